// Runs the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`) over recorded answers served by
// conformance/clients/replay_server.py: one process per batch. Reads a JSON job list from the file
// named by argv[2] and writes one JSON result per line to stdout, in job order.
// A job: {id, api: "generateText"|"streamText", baseURL, model, messages, tools, toolChoice}.
// A result: {id, message: {reasoning, content, tool_calls: [{name, arguments}]}, error, items, first_name_item}.
// "generateText-turn2" (a job with toolResults too) runs the two-step tool loop: tools whose `execute`
// returns the job's toolResults in call order, `stopWhen: isStepCount(2)`, so the SDK sends turn 2 itself
// (the replay server captures it); its result is {id, error}.
import { readFileSync } from "node:fs";
import { generateText, streamText, jsonSchema, tool, isStepCount } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";

const versions = {
  ai: JSON.parse(readFileSync(new URL("./node_modules/ai/package.json", import.meta.url))).version,
  "@ai-sdk/openai-compatible": JSON.parse(readFileSync(
    new URL("./node_modules/@ai-sdk/openai-compatible/package.json", import.meta.url))).version,
};

function toolsOf(tools, execute) {
  const out = {};
  for (const t of tools || []) {
    const f = t.function || {};
    out[f.name] = tool({ description: f.description, inputSchema: jsonSchema(f.parameters || { type: "object" }), execute });
  }
  return out;
}

function messagesOf(messages) {
  // The answer does not depend on the request (the replay server plays a recording): the case's
  // system and user texts are sent, other turns as user text.
  return (messages || []).map((m) => ({
    role: m.role === "system" ? "system" : "user",
    content: typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""),
  }));
}

function errorText(error) {
  if (error == null) return null;
  const name = error.name || error.constructor?.name || "Error";
  return `${name}: ${error.message ?? String(error)}`.slice(0, 2000);
}

function callsOf(toolCalls) {
  return (toolCalls || []).map((c) => ({
    name: c.toolName ?? null,
    arguments: typeof c.input === "string" ? c.input : JSON.stringify(c.input ?? null),
  }));
}

async function runJob(job) {
  const provider = createOpenAICompatible({ name: "vllm", baseURL: job.baseURL, apiKey: "replay" });
  const common = {
    model: provider.chatModel(job.model),
    messages: messagesOf(job.messages),
    allowSystemInMessages: true, // AI SDK 7 refuses a system message in `messages` otherwise
    tools: job.tools && job.tools.length ? toolsOf(job.tools) : undefined,
    toolChoice: job.toolChoice ?? undefined,
    maxRetries: 0,
  };
  let streamError = null;
  const result = { id: job.id, message: null, error: null, items: 0, first_name_item: null, finish_reason: null };
  try {
    if (job.api === "generateText-turn2") {
      let next = 0;
      const execute = async () => job.toolResults[next++] ?? "";
      await generateText({ ...common, tools: toolsOf(job.tools, execute), stopWhen: isStepCount(2) });
      return { id: job.id, error: null };
    }
    if (job.api === "generateText") {
      const r = await generateText(common);
      result.message = { reasoning: r.reasoningText ?? null, content: r.text || null, tool_calls: callsOf(r.toolCalls) };
      result.finish_reason = r.rawFinishReason ?? r.finishReason ?? null;
      return result;
    }
    const r = streamText({ ...common, onError: ({ error }) => { streamError = streamError ?? error; } });
    for await (const part of r.fullStream) {
      result.items += 1;
      if (result.first_name_item == null && (part.type === "tool-input-start" || part.type === "tool-call") && part.toolName) {
        result.first_name_item = result.items;
      }
      if (part.type === "error") streamError = streamError ?? part.error;
    }
    const [text, reasoningText, toolCalls, finishReason] = await Promise.all(
      [r.text, r.reasoningText, r.toolCalls, r.finishReason]);
    result.message = { reasoning: reasoningText ?? null, content: text || null, tool_calls: callsOf(toolCalls) };
    result.finish_reason = finishReason ?? null;
    result.error = errorText(streamError);
  } catch (error) {
    // A stream's error part (the server's refusal, say) comes first; what the caller awaits throws after it.
    result.error = streamError ? `${errorText(streamError)} (then ${errorText(error)})` : errorText(error);
  }
  return result;
}

const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
process.stdout.write(JSON.stringify({ versions }) + "\n");
for (const job of jobs) {
  process.stdout.write(JSON.stringify(await runJob(job)) + "\n");
}
