"""Hypothesis strategies for OpenAI-style answers: chat chunks, chat completions, Responses events
and responses, mostly well-formed, sometimes with a value of the wrong type anywhere."""

from __future__ import annotations

from hypothesis import strategies as st

text = st.text(max_size=12)
junk = st.one_of(st.none(), st.integers(-3, 3), st.booleans(), text, st.lists(st.integers(0, 9), max_size=2),
                 st.dictionaries(st.sampled_from(["a", "index"]), st.integers(0, 3), max_size=2))


def sometimes(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly the well-formed value, one time in ten a value of the wrong type."""
    return st.integers(0, 9).flatmap(lambda roll: junk if roll == 0 else strategy)


function = st.fixed_dictionaries({}, optional={"name": sometimes(st.one_of(st.none(), text)),
                                               "arguments": sometimes(st.one_of(st.none(), text))})
tool_call = st.fixed_dictionaries(
    {"index": sometimes(st.integers(0, 3))},
    optional={"id": sometimes(text), "type": sometimes(st.just("function")), "function": sometimes(function)},
)
delta = st.fixed_dictionaries({}, optional={
    "role": sometimes(st.sampled_from(["assistant", "user"])),
    "content": sometimes(st.one_of(st.none(), text)),
    "reasoning": text,  # vLLM's field, not the SDK's: an extra
    "reasoning_content": st.one_of(st.none(), text),
    "tool_calls": sometimes(st.lists(tool_call, max_size=3)),
})
choice = st.fixed_dictionaries(
    {"index": sometimes(st.integers(0, 1)), "delta": sometimes(delta)},
    optional={
        "finish_reason": sometimes(st.sampled_from([None, "stop", "length", "tool_calls", "content_filter"])),
        "logprobs": st.none(),
        "token_ids": st.lists(st.integers(0, 500), max_size=4),  # vLLM's return_token_ids
    },
)
usage = st.fixed_dictionaries({"prompt_tokens": sometimes(st.integers(0, 99)),
                               "completion_tokens": st.integers(0, 99), "total_tokens": st.integers(0, 99)})
chunk = st.fixed_dictionaries(
    {"id": sometimes(text), "object": sometimes(st.just("chat.completion.chunk")),
     "created": sometimes(st.integers(0, 2**31)), "model": text, "choices": sometimes(st.lists(choice, max_size=2))},
    optional={"usage": st.one_of(st.none(), usage), "prompt_token_ids": st.lists(st.integers(0, 500), max_size=4),
              "prompt_text": st.none(), "system_fingerprint": st.one_of(st.none(), text)},
)

item = st.one_of(
    st.fixed_dictionaries({"type": st.just("function_call"), "id": sometimes(text), "call_id": text,
                           "name": sometimes(text), "arguments": text},
                          optional={"status": st.sampled_from(["in_progress", "completed"])}),
    st.fixed_dictionaries({"type": st.just("message"), "id": text, "role": st.just("assistant"),
                           "status": st.just("in_progress"), "content": st.just([])}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "id": text, "summary": st.just([])},
                          optional={"content": st.lists(st.fixed_dictionaries(
                              {"type": st.just("reasoning_text"), "text": text}), max_size=2)}),
)
event = st.one_of(
    st.fixed_dictionaries({"type": st.just("response.output_text.delta"), "item_id": text,
                           "output_index": sometimes(st.integers(0, 2)), "content_index": st.integers(0, 2),
                           "delta": sometimes(text), "sequence_number": st.integers(0, 99)},
                          optional={"logprobs": st.just([])}),
    st.fixed_dictionaries({"type": st.just("response.function_call_arguments.delta"), "item_id": text,
                           "output_index": st.integers(0, 2), "delta": text,
                           "sequence_number": sometimes(st.integers(0, 99))}),
    st.fixed_dictionaries({"type": st.just("response.output_item.added"), "output_index": st.integers(0, 2),
                           "item": sometimes(item), "sequence_number": st.integers(0, 99)}),
    st.fixed_dictionaries({"type": sometimes(st.just("response.not_an_event")), "sequence_number": junk}),
)

message = st.fixed_dictionaries({}, optional={
    "role": st.just("assistant"),
    "content": sometimes(st.one_of(st.none(), text)),
    "reasoning": sometimes(st.one_of(st.none(), text)),
    "tool_calls": sometimes(st.lists(tool_call, max_size=2)),
})
completion = st.fixed_dictionaries(
    {"id": text, "object": st.just("chat.completion"), "created": st.integers(0, 9), "model": text,
     "choices": sometimes(st.lists(st.fixed_dictionaries(
         {"index": st.integers(0, 1), "message": sometimes(message)},
         optional={"finish_reason": sometimes(st.sampled_from([None, "stop", "tool_calls"]))}), max_size=2))},
)
response = st.fixed_dictionaries(
    {"id": text, "object": st.just("response"), "status": sometimes(st.sampled_from(["completed", "incomplete"])),
     "output": sometimes(st.lists(sometimes(item), max_size=3))},
)
terminal = st.fixed_dictionaries({"type": st.just("response.completed"), "response": sometimes(response),
                                  "sequence_number": st.integers(0, 99)})
