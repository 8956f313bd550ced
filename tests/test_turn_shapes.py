"""Shapes of a turn's rendered text (conformance/suite/turn_shapes.py) offline, in every shipped format: each
shaped text differs from the plain rendering only in the region its shape names, the reference is the format's
own parse of the shaped text, and a format that cannot express a shape is a skip saying why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.formats.registry import FORMATS
from conformance.formats.turn_text import parse_whole, render
from conformance.record.case_model import Case, ExpectedMessage, ExpectedToolCall
from conformance.suite.cases import load_suite
from conformance.suite.format_cases import in_format, reference_of, subject_of_format
from conformance.suite.turn_shapes import AFTER_CALLS, SECOND_THOUGHT, SHAPES, delimiter_texts
from conformance.util.package_paths import load_schema

SUITE = {case.id: case for case in load_suite() if case.turn is not None}
SHIPPED = {case_id: case for case_id, case in SUITE.items() if case.shape is not None}


def _shaped(case_id: str, like: str, shape: str, turn: ExpectedMessage) -> Case:
    """A shaped turn case the suite does not ship (yet): the shipped case `like`'s request, this turn and shape."""
    return replace(SUITE[like], id=case_id, turn=turn, shape=shape, second_turn=None)


# the shapes whose cases are not shipped: vLLM 0.32's parsers answer them otherwise than the format's parse (and
# transformers serve, turn-unclosed-reasoning's reasoning), and those deviations are not declared yet (issue 27)
UNSHIPPED = {case.id: case for case in (
    _shaped("turn-unclosed-reasoning", "turn-reasoning-then-content", "unclosed_reasoning",
            ExpectedMessage(reasoning="The user asks a simple question.", content="Yes, on a clear day.")),
    _shaped("turn-two-reasoning-blocks", "turn-reasoning-then-content", "two_reasoning_blocks",
            ExpectedMessage(reasoning="The user wants two thoughts.", content="Here is the answer.")),
    _shaped("turn-text-after-calls", "turn-reasoning-then-call", "text_after_calls",
            ExpectedMessage(reasoning="The user wants the weather in Madrid.",
                            tool_calls=(ExpectedToolCall("get_weather", {"city": "Madrid"}),))),
    _shaped("turn-call-in-reasoning", "turn-reasoning-then-call", "call_in_reasoning",
            ExpectedMessage(reasoning="The user wants the weather in Lisbon.",
                            tool_calls=(ExpectedToolCall("get_weather", {"city": "Lisbon"}),))),
)}
SHAPED = {**SHIPPED, **UNSHIPPED}
RENDERED = sorted(name for name in FORMATS if FORMATS[name].chat_template is not None)
# the shaped turns a format with a chat template cannot express: gpt-oss's calls (its two templates disagree)
NOT_EXPRESSED = {"gpt-oss": {"turn-unclosed-call", "turn-text-after-calls", "turn-call-in-reasoning"}}


def _plain_and_shaped(name: str, case_id: str):
    form = FORMATS[name]
    case = SHAPED[case_id]
    (plain,) = in_format([replace(case, shape=None)], form)
    (shaped,) = in_format([case], form)
    return form, plain, shaped


def test_every_shape_is_in_the_schema_and_has_a_case_here() -> None:
    enum = load_schema("case.schema.json")["$defs"]["case"]["properties"]["shape"]["enum"]
    assert enum == list(SHAPES)
    assert {case.shape for case in SHAPED.values()} == set(SHAPES)
    assert not set(UNSHIPPED) & set(SUITE)  # one shipped, the other a case of this test only


def test_the_delimiters_a_shape_finds_regions_by_are_the_formats_own() -> None:
    assert delimiter_texts(FORMATS["qwen3-hermes"]) == {"reasoning_open": "<think>", "reasoning_close": "</think>",
                                                         "call_open": "<tool_call>", "call_close": "</tool_call>"}
    assert delimiter_texts(FORMATS["gemma4"]) == {"reasoning_open": "<|channel>thought\n", "reasoning_close": "<channel|>",
                                                   "call_open": "<|tool_call>", "call_close": "<tool_call|>"}
    # a token its open or close pattern writes, escaped or not
    assert delimiter_texts(FORMATS["qwen3-xml"])["call_open"] == delimiter_texts(FORMATS["glm45"])["call_open"] == "<tool_call>"
    assert delimiter_texts(FORMATS["qwen3-xml"])["call_close"] == "</tool_call>"


def _differs_only_in_its_region(shape: str, plain: str, shaped: str, texts: dict[str, str]) -> None:
    """The property each shape promises: the plain rendering changed in the region the shape names only."""
    if shape == "unclosed_last_call":
        assert shaped == plain[:plain.rfind(texts["call_close"])]
    elif shape == "unclosed_reasoning":
        assert shaped == plain[:plain.find(texts["reasoning_close"])] and texts["reasoning_close"] not in shaped
    elif shape == "two_reasoning_blocks":
        end = plain.find(texts["reasoning_close"]) + len(texts["reasoning_close"])
        block = shaped[end:len(shaped) - (len(plain) - end)]
        assert shaped == plain[:end] + block + plain[end:]
        assert block.startswith(texts["reasoning_open"]) and block.endswith(texts["reasoning_close"])
        assert block[len(texts["reasoning_open"]):-len(texts["reasoning_close"])].strip() == SECOND_THOUGHT
    elif shape == "text_after_calls":
        end = plain.rfind(texts["call_close"]) + len(texts["call_close"])
        assert shaped == plain[:end] + AFTER_CALLS + plain[end:]
    elif shape == "call_in_reasoning":
        call_at = plain.find(texts["call_open"], plain.find(texts["reasoning_close"]))
        call = plain[call_at:plain.find(texts["call_close"], call_at) + len(texts["call_close"])]
        assert call and shaped.count(call) == plain.count(call) == 1
        assert shaped.replace(call, "") == plain.replace(call, "")  # the call moved, nothing else changed
        assert shaped.find(call) + len(call) == shaped.find(texts["reasoning_close"])  # right before the closer
    else:
        raise AssertionError(f"no property written for shape {shape}")


@pytest.mark.parametrize("name", RENDERED)
def test_a_shape_changes_only_its_region_and_the_reference_is_the_formats_parse_of_the_shaped_text(name):
    form = FORMATS[name]
    subject = subject_of_format(form)
    expressed = set()
    for case_id, case in SHAPED.items():
        _, plain, shaped = _plain_and_shaped(name, case_id)
        if shaped.reference.skip is not None:
            assert shaped.force is None and f"the {name} format cannot express this turn: " in shaped.reference.skip
            continue
        expressed.add(case_id)
        assert plain.reference.skip is None and shaped.force != plain.force
        _differs_only_in_its_region(case.shape, plain.force, shaped.force, delimiter_texts(form))
        tools = case.request.get("tools") or []
        prompt = render(subject, list(case.request["messages"]), tools, add_generation_prompt=True)
        parsed = parse_whole(subject, prompt, shaped.force, tools)
        assert shaped.reference.rendered_with == "chat_template"  # a shipped record writes with its chat template
        assert reference_of(parsed.message) == replace(shaped.reference, rendered_with=None)  # parse_response's, exactly
        for end in form.end_tokens:
            assert not shaped.force.endswith(end)  # the server generates the end itself
    assert expressed == set(SHAPED) - NOT_EXPRESSED.get(name, set())


@pytest.mark.parametrize("name", sorted(set(RENDERED) - {"gpt-oss"}))
def test_what_each_format_means_by_each_shape(name: str) -> None:
    """The parse of each shaped turn, stated: the same meaning in every format that can express it."""
    cases = {case.id: case for case in in_format(SHAPED.values(), FORMATS[name])}
    texts = delimiter_texts(FORMATS[name])
    cut = cases["turn-unclosed-reasoning"].reference
    assert cut.message.reasoning.strip() == "The user asks a simple question." and not cut.message.content
    assert cut.finish_reason == "stop"  # the answer the turn had is not invented
    twice = cases["turn-two-reasoning-blocks"].reference.message
    assert twice.reasoning.strip() == SECOND_THOUGHT  # transformers' parse keeps the last block, not both
    assert twice.content.strip() == "Here is the answer." and texts["reasoning_close"] not in twice.content
    after = cases["turn-text-after-calls"].reference
    assert after.message.content.strip() == AFTER_CALLS and after.finish_reason == "tool_calls"
    assert [(call.name, call.arguments) for call in after.message.tool_calls] == [("get_weather", {"city": "Madrid"})]
    thought = cases["turn-call-in-reasoning"].reference
    assert thought.finish_reason == "stop" and not thought.message.tool_calls and not thought.message.content
    assert texts["call_open"] in thought.message.reasoning and "Lisbon" in thought.message.reasoning


def test_a_shape_whose_region_the_rendering_lacks_is_a_skip_saying_why() -> None:
    no_reasoning = replace(SHAPED["turn-unclosed-reasoning"], turn=ExpectedMessage(content="Yes."))
    (case,) = in_format([no_reasoning], FORMATS["qwen3-hermes"])
    assert case.force is None and "writes no '</think>'" in case.reference.skip
    no_call = replace(SHAPED["turn-call-in-reasoning"],
                      turn=replace(SHAPED["turn-call-in-reasoning"].turn, tool_calls=()))
    (case,) = in_format([no_call], FORMATS["gemma4"])
    assert "writes no '<tool_call|>'" in case.reference.skip
    (case,) = in_format([SHAPED["turn-unclosed-reasoning"]], FORMATS["cohere-command"])
    assert "no chat template" in case.reference.skip
