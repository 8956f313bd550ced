"""Template rules and vLLM 0.32 startup verdicts (fast tier, no vLLM): expectations from the contract
(../shared/facts/vllm-0.32-contract.md sections 1.4 and 6), written out by hand."""

from __future__ import annotations

import copy
import signal
import time

import pytest

from conformance.audit import template_worker
from conformance.audit.template_rules import TemplateAnalysisTimeout, analyze_template_unbounded
from conformance.audit.template_worker import analyze_template, predict_vllm_startup
from tests.audit_helpers import QWEN3_STYLE, fixture_tokenizer_configs, gemma4_template

MISSING = "The hf parser requires `response_template` metadata in the tokenizer configuration"
NEEDS_THINKING = "--reasoning-parser hf requires a response_template with a thinking field"
NEEDS_TOOL_CALLS = "--tool-call-parser hf requires a response_template with a tool_calls field"


def qwen3(**field_changes) -> dict:
    template = copy.deepcopy(QWEN3_STYLE)
    for name, spec in field_changes.items():
        if spec is None:
            del template["fields"][name]
        else:
            template["fields"][name] = spec
    return {"response_template": template}


def outcomes(tokenizer_config: dict) -> dict[str, str | None]:
    """Configuration -> None when vLLM starts, else its error message."""
    return {name: (None if verdict.starts else verdict.error) for name, verdict in predict_vllm_startup(tokenizer_config).items()}


def invalid(message: str) -> dict[str, str]:
    """A template the loader rejects: raw message in the engine config, prefixed in the frontend (contract 1.4)."""
    return {"tool_call_parser_hf": f"Invalid response_template metadata: {message}",
            "reasoning_parser_hf": message, "both": message}


def test_gemma4_fixture_starts_everywhere_and_describes_its_regions() -> None:
    analysis = analyze_template(fixture_tokenizer_configs()["google/gemma-4-12B-it"])
    assert (analysis.metadata_key, analysis.present, analysis.valid, analysis.error) == ("response_template", True, True, None)
    assert all(verdict.starts and verdict.error is None for verdict in analysis.vllm_0_32.values())
    assert "thinking: '<|channel>thought\\n' … '<channel|>' [text]" in analysis.regions
    assert "tool_calls: /<\\|tool_call>call:(?P<name>\\w+)/ … '<tool_call|>' [json, repeats, transform]" in analysis.regions
    assert "content: (implicit) … '<turn|>' | '<|tool_response>' | '<eos>' [text]" in analysis.regions
    assert analysis.findings == ()


@pytest.mark.parametrize("repo, key", [
    ("ConicCat/Gemma4-GarnetV2-31B", "response_schema"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "none"),
    ("Qwen/Qwen3-0.6B", "none"),
    ("meta-llama/Llama-3.1-8B-Instruct", "none"),
])
def test_fixtures_without_response_template_fail_everywhere(repo: str, key: str) -> None:
    analysis = analyze_template(fixture_tokenizer_configs()[repo])
    assert (analysis.metadata_key, analysis.present, analysis.valid) == (key, False, False)
    assert outcomes(fixture_tokenizer_configs()[repo]) == dict.fromkeys(["tool_call_parser_hf", "reasoning_parser_hf", "both"], MISSING)
    codes = [finding.code for finding in analysis.findings]
    assert codes == (["legacy-response-schema"] if key == "response_schema" else [])


def test_legacy_schema_next_to_a_template_is_reported_as_ignored() -> None:
    config = {**qwen3(), "response_schema": {"type": "object"}}
    analysis = analyze_template(config)
    assert analysis.metadata_key == "both"
    assert [f.code for f in analysis.findings] == ["legacy-response-schema"]
    assert "vLLM 0.32 ignores it" in analysis.findings[0].message
    assert all(verdict.starts for verdict in analysis.vllm_0_32.values())


def test_missing_thinking_field_fails_only_with_the_reasoning_parser() -> None:
    assert outcomes(qwen3(thinking=None)) == {"tool_call_parser_hf": None, "reasoning_parser_hf": NEEDS_THINKING, "both": NEEDS_THINKING}


def test_missing_tool_calls_field_fails_only_with_the_tool_parser() -> None:
    assert outcomes(qwen3(tool_calls=None)) == {"tool_call_parser_hf": NEEDS_TOOL_CALLS, "reasoning_parser_hf": None, "both": NEEDS_TOOL_CALLS}


@pytest.mark.parametrize("change, message", [
    ({"version": 2}, "Unsupported response_template version: 2"),
    ({"extra": 1}, "Unknown keys in response_template: ['extra']"),
    ({"fields": {}}, "response_template.fields must be a non-empty dict"),
    ({"defaults": []}, "response_template.defaults must be a dict"),
    ({"start_anchor_pattern": "x"}, "response_template: cannot specify both 'start_anchor' and 'start_anchor_pattern'"),
    ({"start_anchor": None}, "response_template: 'start_anchor' must be a string or list of strings, got NoneType"),
])
def test_top_level_load_errors_carry_the_loaders_message(change: dict, message: str) -> None:
    config = qwen3()
    config["response_template"].update(change)
    assert outcomes(config) == invalid(message)
    analysis = analyze_template(config)
    assert (analysis.valid, analysis.error) == (False, message)


def test_no_start_anchor() -> None:
    config = qwen3()
    del config["response_template"]["start_anchor"]
    assert outcomes(config) == invalid("response_template must define 'start_anchor' or 'start_anchor_pattern'.")


@pytest.mark.parametrize("field_spec, message", [
    ({"open": "<c>", "foo": 1}, "Field 'content': unknown keys ['foo']"),
    ({"content": "yaml"}, "Field 'content': unknown content parser 'yaml'. Available: "
                          "['bool', 'float', 'int', 'json', 'kv-lines', 'text', 'xml-inline']"),
    ({"join": "\n"}, "Field 'content': 'join' requires 'repeats': true"),
    ({"transform_each": True}, "Field 'content': transform_each is set but no transform was provided"),
    ({"open": "<c>", "open_pattern": "<c>"}, "Field 'content': cannot specify both 'open' and 'open_pattern'"),
])
def test_field_load_errors_carry_the_loaders_message(field_spec: dict, message: str) -> None:
    assert outcomes(qwen3(content=field_spec)) == invalid(message)


def test_bad_regex_and_named_groups_without_transform() -> None:
    bad = outcomes(qwen3(tool_calls={"open_pattern": "(unclosed", "content": "json"}))
    assert bad["reasoning_parser_hf"].startswith("Field 'tool_calls': invalid open_pattern regex: missing )")
    named = outcomes(qwen3(tool_calls={"open_pattern": "<call (?P<name>\\w+)>", "content": "json"}))
    assert named["both"].startswith("Field 'tool_calls': open_pattern/close_pattern declares named group(s) ['name'], "
                                    "but the field has no 'transform'.")


def test_two_implicit_fields() -> None:
    assert outcomes(qwen3(thinking={"close": "</think>"})) == invalid(
        "At most one field may omit 'open'/'open_pattern' (that field becomes the implicit-open / leftover sink). "
        "Found: thinking, content")


def test_reasoning_content_field_is_reported_specifically() -> None:
    config = qwen3()
    fields = config["response_template"]["fields"]
    fields["reasoning_content"] = fields.pop("thinking")
    analysis = analyze_template(config)
    message = ("response_template contains unsupported semantic fields: ['reasoning_content']. "
               "Supported fields are: ['content', 'thinking', 'tool_calls']")
    assert outcomes(config) == invalid(message)
    assert (analysis.valid, analysis.error) == (True, None)  # the format allows it; vLLM's serving does not
    codes = {finding.code: finding.message for finding in analysis.findings}
    assert "rename it to `thinking`" in codes["reasoning-content-field"]
    assert message in codes["not-servable"]


@pytest.mark.parametrize("field, spec", [
    ("thinking", {"open": "<think>", "close": "</think>", "content": "json"}),
    ("content", {"transform": {"text": "{content}"}}),
])
def test_streamable_fields_must_be_plain_text(field: str, spec: dict) -> None:
    message = f"response_template field '{field}' uses semantics that cannot be streamed by the OpenAI serving adapter"
    assert outcomes(qwen3(**{field: spec})) == invalid(message)


def test_defaults_other_than_role_are_unsupported_semantic_fields() -> None:
    config = qwen3()
    config["response_template"]["defaults"]["tool_calls"] = []
    assert outcomes(config)["tool_call_parser_hf"] == (
        "Invalid response_template metadata: response_template contains unsupported semantic fields: "
        "['tool_calls']. Supported fields are: ['content', 'thinking', 'tool_calls']")


@pytest.mark.parametrize("value, json_type", [("{\"fields\": {}}", "string"), (["x"], "array"), (None, "null"), (3, "number")])
def test_a_template_that_is_not_an_object_counts_as_missing(value: object, json_type: str) -> None:
    config = {"response_template": value}
    analysis = analyze_template(config)
    assert (analysis.present, analysis.valid) == (True, False)
    assert analysis.error == f"`response_template` is a JSON {json_type}, not an object; vLLM 0.32 treats it as missing"
    assert [f.code for f in analysis.findings] == ["template-not-object"]
    assert set(outcomes(config).values()) == {MISSING}


def test_catastrophic_pattern_is_a_finding_not_a_hang() -> None:
    config = qwen3(tool_calls={"open_pattern": "<tc>(a|aa)+$", "content": "json", "transform": {"function": "{content}"}})
    started = time.monotonic()
    analysis = analyze_template(config)
    assert time.monotonic() - started < 5
    assert [f.code for f in analysis.findings] == ["slow-regex"]
    assert analysis.findings[0].message.startswith("fields.tool_calls.open_pattern: a search took over")
    assert all(verdict.starts for verdict in analysis.vllm_0_32.values())  # vLLM would still start


@pytest.mark.parametrize("content_args, problem", [
    ({}, "fields.tool_calls.content_args.tag_pattern: missing; the xml-inline content parser needs"),
    ({"tag_pattern": "<(?P<name>\\w+)>(?P<value>.*?)</(?P=name)>"},
     "fields.tool_calls.content_args.tag_pattern: has no named group 'key'"),
    ({"tag_pattern": "<(?P<key>\\w+"}, "fields.tool_calls.content_args.tag_pattern: missing )"),
    ({"tag_pattern": "<(?P<key>\\w+)>(?P<value>.*?)</(?P=key)>"}, None),
])
def test_xml_inline_tag_pattern_problems_are_findings(content_args: dict, problem: str | None) -> None:
    config = qwen3(tool_calls={"open": "<tool_call>", "close": "</tool_call>", "content": "xml-inline",
                               "content_args": content_args})
    analysis = analyze_template(config)
    assert analysis.valid and all(verdict.starts for verdict in analysis.vllm_0_32.values())  # the loader lets it by
    if problem is None:
        assert analysis.findings == ()
    else:
        assert [finding.code for finding in analysis.findings] == ["bad-tag-pattern"]
        assert analysis.findings[0].message.startswith(problem)
        assert analysis.findings[0].message.endswith("(vLLM fails only when a response is parsed)")


def test_pattern_too_expensive_to_compile_times_out_and_the_worker_recovers() -> None:
    config = qwen3(content={"open_pattern": "(((a{100}){100}){100}){100}"})
    started = time.monotonic()
    with pytest.raises(TemplateAnalysisTimeout, match="longer than 0.2s"):  # before the memory bound is reached
        analyze_template(config, timeout=0.2)
    assert time.monotonic() - started < 5
    assert analyze_template(qwen3()).valid  # a fresh worker answers the next template


def test_the_worker_outlives_a_ctrl_c_to_the_process_group() -> None:
    """The parent handles Ctrl-C; the worker must neither die nor print a traceback."""
    analyze_template(qwen3())
    worker = template_worker.WORKER._process
    worker.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert worker.poll() is None
    assert analyze_template(qwen3()).valid and template_worker.WORKER._process is worker


def test_bounded_and_in_process_analyses_agree() -> None:
    config = {"response_template": gemma4_template()}
    assert analyze_template(config) == analyze_template_unbounded(config)
