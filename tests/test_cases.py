"""The case loader, the case-file schema and the `conformance cases check` linter, on good and bad
files in temporary directories, and the shipped suite itself."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from conformance.cli import main
from conformance.record.case_model import GRANULARITY_FEATURE
from conformance.servers.profiles import PROFILES, expectation_for
from conformance.suite.cases import (
    DEFAULT_CASES_DIR,
    SCHEMA_PATH,
    TOOLS_FILE,
    CaseFileError,
    check_suite,
    load_features,
    load_suite,
)
from conformance.util import exit_codes

GOOD_FILE = """\
tools:
  get_weather:
    type: function
    function:
      name: get_weather
      parameters:
        type: object
        properties:
          city: {type: string}
cases:
  - id: reasoning-then-call
    description: Reasoning then one call; the blank line is content under hf only.
    features: [reasoning, tool_call, stream]
    references: ["contract 3.3"]
    request:
      messages:
        - {role: user, content: "Weather in Paris?"}
      tools: [get_weather]
      max_tokens: 100
    force: "<think>\\nplan\\n</think>\\n\\n<tool_call>{}</tool_call>"
    natural:
      expect_tool: get_weather
    expect:
      hf:
        message:
          reasoning: "\\nplan\\n"
          content: "\\n\\n"
          tool_calls:
            - {name: get_weather, arguments: {city: Paris}}
        finish_reason: tool_calls
        tool_call_streaming: whole
      legacy:
        message:
          reasoning: "\\nplan\\n"
          tool_calls:
            - {name: get_weather, arguments_raw: '{"city": "Par'}
        finish_reason: tool_calls
        stream:
          content: "\\n\\n"
          finish_reason: length
  - id: refused-everywhere
    description: An empty tools array is refused with HTTP 400 naming the tools parameter.
    features: [no_tools, request_error]
    modes: [non-stream]
    request:
      messages: [{role: user, content: "Hi"}]
      tools: []
    expect:
      hf: {error: {status: 400, param: tools, message: "must not be an empty array"}}
      legacy: {error: {status: 400, param: tools}}
"""


def write_suite(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def good_data() -> dict:
    return yaml.safe_load(GOOD_FILE)


def only_error(directory: Path):
    """The single error that checking `directory` reports (fails the test if there are others)."""
    errors = check_suite(directory).errors
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def bad_suite(tmp_path: Path, mutate) -> Path:
    """A suite with one file: the good file changed by `mutate(data)`, dumped as YAML."""
    data = good_data()
    mutate(data)
    return write_suite(tmp_path / "suite", {"bad.yaml": yaml.safe_dump(data, sort_keys=False)})


# ---------------------------------------------------------------------------------------------
# Loading


def test_good_file_loads_with_tools_resolved_and_defaults(tmp_path: Path) -> None:
    directory = write_suite(tmp_path, {"group.yaml": GOOD_FILE})
    first, second = load_suite(directory)

    assert first.id == "reasoning-then-call"
    assert first.source == directory / "group.yaml" and first.index == 0 and first.line == 11
    assert first.modes == ("non-stream", "stream") and first.endpoint == "chat"
    assert first.features == ("reasoning", "tool_call", "stream") and first.references == ("contract 3.3",)
    assert first.request["tools"] == [good_data()["tools"]["get_weather"]]
    assert first.request["max_tokens"] == 100 and "model" not in first.request
    assert first.force == "<think>\nplan\n</think>\n\n<tool_call>{}</tool_call>"
    assert first.natural is not None and first.natural.expect_tool == "get_weather"
    assert first.tool_parameters() == {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}
    assert second.modes == ("non-stream",) and second.force is None and second.index == 1


def test_expectations_and_stream_overrides(tmp_path: Path) -> None:
    case = load_suite(write_suite(tmp_path, {"group.yaml": GOOD_FILE}))[0]
    hf, legacy = case.expect["hf"], case.expect["legacy"]

    assert hf.error is None and hf.tool_call_streaming == "whole" and hf.stream_overrides == frozenset()
    assert hf.message.content == "\n\n" and hf.message.tool_calls[0].arguments == {"city": "Paris"}
    assert hf.for_mode("stream") == hf.for_mode("non-stream")

    assert legacy.stream_overrides == {"content", "finish_reason"}
    assert legacy.message.content is None and legacy.finish_reason == "tool_calls"
    call = legacy.message.tool_calls[0]
    assert call.is_raw and call.arguments_raw == '{"city": "Par'
    streamed = legacy.for_mode("stream")
    assert streamed.message.content == "\n\n" and streamed.finish_reason == "length"
    assert streamed.message.reasoning == "\nplan\n" and streamed.message.tool_calls == legacy.message.tool_calls
    assert legacy.for_mode("non-stream").message.content is None


def test_an_expectation_written_once_with_a_yaml_anchor_applies_to_both_profiles(tmp_path: Path) -> None:
    text = GOOD_FILE.replace("      hf: {error:", "      hf: &refused {error:").replace(
        "      legacy: {error: {status: 400, param: tools}}", "      legacy: *refused"
    )
    assert "*refused" in text
    case = load_suite(write_suite(tmp_path, {"anchored.yaml": text}))[1]
    assert case.expect["legacy"] == case.expect["hf"]
    assert case.expect["legacy"].error.message == "must not be an empty array"


def test_error_expectation(tmp_path: Path) -> None:
    case = load_suite(write_suite(tmp_path, {"group.yaml": GOOD_FILE}))[1]
    hf_error, legacy_error = case.expect["hf"].error, case.expect["legacy"].error
    assert (hf_error.status, hf_error.param, hf_error.message) == (400, "tools", "must not be an empty array")
    assert (legacy_error.status, legacy_error.param, legacy_error.message) == (400, "tools", None)
    assert case.expect["hf"].message is None and case.expect["hf"].for_mode("stream") == case.expect["hf"]


def test_a_declared_skip_is_the_profiles_whole_expectation(tmp_path: Path) -> None:
    data = good_data()
    data["cases"][1]["expect"]["legacy"] = {"skip": "legacy knowingly cannot\n  run this case here"}
    case = load_suite(write_suite(tmp_path, {"group.yaml": yaml.safe_dump(data)}))[1]
    assert case.expect["legacy"].skip == "legacy knowingly cannot run this case here"
    assert case.expect["legacy"].for_mode("stream") == case.expect["legacy"]
    assert case.expect["hf"].skip is None


def test_responses_endpoint_gets_flat_tools(tmp_path: Path) -> None:
    data = good_data()
    data["cases"][0]["endpoint"] = "responses"
    for profile in ("hf", "legacy"):
        data["cases"][0]["expect"][profile]["finish_reason"] = "completed"
    del data["cases"][0]["expect"]["legacy"]["stream"]["finish_reason"]
    case = load_suite(write_suite(tmp_path, {"r.yaml": yaml.safe_dump(data)}))[0]
    assert case.endpoint == "responses"
    assert case.request["tools"] == [
        {"type": "function", "name": "get_weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]  # fmt: skip
    assert case.tool_parameters() == {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}


PREFLIGHT_FILE = """\
cases:
  - id: preflight
    description: A browser preflight from an unlisted origin is refused with HTTP 400.
    features: [cors]
    references: ["contract 5"]
    endpoint: preflight
    request: {origin: "http://localhost:3000", method: POST, headers: [content-type]}
    expect:
      hf: {preflight: {status: 400, body: Disallowed, headers: {access-control-allow-origin: null, vary: Origin}}}
"""


def test_a_preflight_case_is_one_request_with_headers_expected(tmp_path: Path) -> None:
    case = load_suite(write_suite(tmp_path, {"cors.yaml": PREFLIGHT_FILE}))[0]
    assert (case.endpoint, case.modes, case.force, case.natural) == ("preflight", ("non-stream",), None, None)
    preflight = case.expect["hf"].preflight
    assert (preflight.status, preflight.body) == (400, "Disallowed")
    assert preflight.headers == {"access-control-allow-origin": None, "vary": "Origin"}


def test_a_preflight_case_cannot_force_stream_or_send_messages(tmp_path: Path) -> None:
    data = yaml.safe_load(PREFLIGHT_FILE)
    data["cases"][0].update(force="x", modes=["stream"], natural={})
    data["cases"][0]["request"]["messages"] = [{"role": "user", "content": "Hi"}]
    data["cases"][0]["expect"]["hf"]["preflight"]["headers"]["Vary"] = "Origin"
    errors = check_suite(write_suite(tmp_path, {"cors.yaml": yaml.safe_dump(data)})).errors
    found = {(error.field, error.message) for error in errors}
    assert {("force", "key not allowed here"), ("modes", "key not allowed here"),
            ("natural", "key not allowed here")} <= found, found
    assert any(field == "request.messages" and "unknown key 'messages'" in message for field, message in found)
    assert any(field == "expect.hf.preflight.headers" and "Vary" in message for field, message in found)
    assert len(errors) == 5


def test_cases_come_in_file_name_order(tmp_path: Path) -> None:
    second = good_data()
    for index, case in enumerate(second["cases"]):
        case["id"] = f"other-{index}"
        case["description"] = f"Another behaviour number {index} that this second file pins down."
    directory = write_suite(tmp_path, {"b.yaml": yaml.safe_dump(second), "a.yaml": GOOD_FILE})
    assert [case.id for case in load_suite(directory)] == [
        "reasoning-then-call", "refused-everywhere", "other-0", "other-1"
    ]  # fmt: skip


def test_load_suite_raises_with_every_error(tmp_path: Path) -> None:
    def two_errors(data: dict) -> None:
        data["cases"][0]["features"].append("no_such_feature")
        data["cases"][1]["request"]["tools"] = ["nope"]

    directory = bad_suite(tmp_path, two_errors)
    with pytest.raises(CaseFileError) as caught:
        load_suite(directory)
    assert len(caught.value.issues) == 2
    message = str(caught.value)
    assert str(directory / "bad.yaml") in message and "case #0 'reasoning-then-call'" in message
    assert "field features[3]" in message and "no_such_feature" in message and "and 1 more" in message


# ---------------------------------------------------------------------------------------------
# Bad files: each names file, line, case and field


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"]["message"].update(content=3),
                     "expect.hf.message.content", "3 is not of type 'string', 'null'", id="wrong-type"),
        pytest.param(lambda d: d["cases"][0].pop("description"), "description", "required key is missing",
                     id="missing-field"),
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"].pop("finish_reason"), "expect.hf.finish_reason",
                     "required key is missing", id="missing-finish-reason"),
        pytest.param(lambda d: d["cases"][0].update(forse="x"), "forse", "unknown key 'forse'", id="unknown-key"),
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"]["message"].update(tool_call=[]),
                     "expect.hf.message.tool_call", "unknown key 'tool_call'", id="unknown-nested-key"),
        pytest.param(lambda d: d["cases"][0]["features"].append("telepathy"), "features[3]",
                     "unknown feature 'telepathy'", id="unknown-feature"),
        pytest.param(lambda d: d["cases"][0]["request"]["tools"].append("get_wether"), "request.tools[1]",
                     "unknown tool name 'get_wether' (tools of this file and tools.yaml: get_weather)", id="unknown-tool"),
        pytest.param(lambda d: d["cases"][0]["request"].update(model="m"), "request.model", "key not allowed here",
                     id="request-model"),
        pytest.param(lambda d: d["cases"][0]["request"].update(stream=True), "request.stream",
                     "key not allowed here", id="request-stream"),
        pytest.param(lambda d: d["cases"][1]["expect"]["hf"].update(finish_reason="stop"), "expect.hf.finish_reason",
                     "key not allowed here", id="error-with-finish-reason"),
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"]["message"]["tool_calls"][0].update(arguments_raw="{}"),
                     "expect.hf.message.tool_calls[0]", "give exactly one of `arguments` or `arguments_raw`",
                     id="arguments-and-raw"),
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"].update(finish_reason="done"), "expect.hf.finish_reason",
                     "'done' is not one of", id="bad-finish-reason"),
        pytest.param(lambda d: d["cases"][0]["expect"]["hf"].update(finish_reason="completed"),
                     "expect.hf.finish_reason", "'completed' is not a valid finish_reason for endpoint chat",
                     id="status-on-chat"),
        pytest.param(lambda d: d["cases"][0].update(id="Bad_Id"), "id", "does not match", id="bad-id"),
        pytest.param(lambda d: d["cases"][0].update(modes=["streaming"]), "modes[0]", "is not one of",
                     id="bad-mode"),
        pytest.param(lambda d: d["cases"][0].update(description="Checks the weather call."), "description",
                     "description too short (4 words)", id="short-description"),
        pytest.param(lambda d: d["cases"][0].update(description="   "), "description",
                     "description too short (0 words)", id="blank-description"),
        pytest.param(lambda d: d["cases"][0]["natural"].update(expect_tool="get_time"), "natural.expect_tool",
                     "'get_time' is not among the request's tools", id="natural-tool-not-offered"),
        pytest.param(lambda d: d["cases"][1]["expect"].update(hf={"skip": "hf cannot run this one",
                                                                  "message": {"content": "x"}}),
                     "expect.hf.message", "key not allowed here", id="skip-with-message"),
        pytest.param(lambda d: d["cases"][1]["expect"].update(hf={"skip": "hf cannot run this one",
                                                                  "error": {"status": 400}}),
                     "expect.hf.error", "key not allowed here", id="skip-with-error"),
        pytest.param(lambda d: d["cases"][1]["expect"].update(hf={"skip": " no "}), "expect.hf.skip",
                     "does not match", id="skip-without-a-reason"),
    ],
)
def test_bad_case_is_reported_with_file_case_and_field(tmp_path: Path, mutate, field: str, words: str) -> None:
    directory = bad_suite(tmp_path, mutate)
    error = only_error(directory)
    assert error.file == directory / "bad.yaml"
    assert error.case_index is not None and error.case_id in ("reasoning-then-call", "refused-everywhere", "Bad_Id")
    assert error.field == field
    assert words in error.message
    assert error.line is not None and error.line > 1
    assert f"field {field}" in str(error) and f"case #{error.case_index}" in str(error)


@pytest.mark.parametrize("description", ["Reasoning then call", "reasoning-then-call", "REASONING  then call"])
def test_description_equal_to_id_is_refused(tmp_path: Path, description: str) -> None:
    error = only_error(bad_suite(tmp_path, lambda d: d["cases"][0].update(description=description)))
    assert error.message == "description repeats the id; state the behaviour instead"


def test_stream_feature_and_stream_overrides_go_together(tmp_path: Path) -> None:
    untagged = only_error(bad_suite(tmp_path / "untagged", lambda d: d["cases"][0]["features"].remove("stream")))
    assert (untagged.case_index, untagged.field) == (0, "features")
    assert untagged.message == (
        "expect.legacy.stream records a difference between streaming and non-streaming: list the feature 'stream'"
    )
    unbacked = only_error(bad_suite(tmp_path / "unbacked", lambda d: d["cases"][1]["features"].append("stream")))
    assert (unbacked.case_index, unbacked.field) == (1, "features")
    assert "no expectation has a `stream` override" in unbacked.message


def test_tool_block_name_mismatch(tmp_path: Path) -> None:
    error = only_error(bad_suite(tmp_path, lambda d: d["tools"]["get_weather"]["function"].update(name="weather")))
    assert error.case_index is None and error.field == "tools.get_weather.function.name"
    assert "'weather'" in error.message


def test_error_line_points_at_the_field(tmp_path: Path) -> None:
    text = GOOD_FILE.replace("finish_reason: tool_calls\n        tool_call_streaming", "finish_reason: 7\n        tool_call_streaming")
    directory = write_suite(tmp_path, {"lines.yaml": text})
    error = only_error(directory)
    assert error.field == "expect.hf.finish_reason"
    assert text.splitlines()[error.line - 1].strip() == "finish_reason: 7"


def test_duplicate_id_across_files_names_both(tmp_path: Path) -> None:
    other = good_data()
    other["cases"] = other["cases"][:1]
    other["cases"][0]["description"] = "The same id again, in a second file with another behaviour."
    directory = write_suite(tmp_path, {"a.yaml": GOOD_FILE, "b.yaml": yaml.safe_dump(other)})
    error = only_error(directory)
    assert error.file == directory / "b.yaml" and error.case_id == "reasoning-then-call" and error.field == "id"
    assert "duplicate id" in error.message and str(directory / "a.yaml") in error.message


def test_duplicate_description_is_refused(tmp_path: Path) -> None:
    def copy_description(data: dict) -> None:
        data["cases"][1]["description"] = data["cases"][0]["description"].upper()

    error = only_error(bad_suite(tmp_path, copy_description))
    assert error.field == "description" and error.case_index == 1 and "duplicate description" in error.message


def test_invalid_yaml_names_line_and_column(tmp_path: Path) -> None:
    directory = write_suite(tmp_path, {"broken.yaml": "cases:\n  - id: a\n    features: [x,\n"})
    error = only_error(directory)
    assert error.file == directory / "broken.yaml" and error.line == 4
    assert error.message.startswith("invalid YAML (column 1)")


def test_duplicate_yaml_key_is_refused(tmp_path: Path) -> None:
    text = GOOD_FILE.replace("    force: ", "    modes: [stream]\n    modes: [non-stream]\n    force: ", 1)
    error = only_error(write_suite(tmp_path, {"dup.yaml": text}))
    assert error.message == "duplicate key 'modes'" and error.field == "modes" and error.case_index == 0
    assert text.splitlines()[error.line - 1].strip() == "modes: [non-stream]"


def test_top_level_problems_have_no_case(tmp_path: Path) -> None:
    directory = write_suite(tmp_path, {"top.yaml": "tools: {}\ncases: []\nextra: 1\n"})
    errors = check_suite(directory).errors
    assert {(e.field, e.case_index) for e in errors} == {("cases", None), ("extra", None)}


def test_unknown_profile_is_a_warning_and_still_loads(tmp_path: Path) -> None:
    data = good_data()
    data["cases"][0]["expect"]["vllm-rs"] = {"message": {"content": "x"}, "finish_reason": "stop"}
    directory = write_suite(tmp_path, {"p.yaml": yaml.safe_dump(data)})
    result = check_suite(directory)
    assert result.errors == []
    (warning,) = result.warnings
    assert warning.field == "expect.vllm-rs" and "unknown profile 'vllm-rs'" in warning.message
    assert str(warning).startswith("warning: ")
    assert "vllm-rs" in load_suite(directory)[0].expect


def test_directory_features_file_replaces_the_shipped_registry(tmp_path: Path) -> None:
    registry = "# mine\nreasoning  thinking text\ntool_call  a call\nno_tools  none\nrequest_error  refused\nstream  differs\n"
    directory = write_suite(tmp_path, {"features.txt": registry, "a.yaml": GOOD_FILE})
    assert load_features(directory) == {
        "reasoning": "thinking text", "tool_call": "a call", "no_tools": "none", "request_error": "refused",
        "stream": "differs",
    }  # fmt: skip
    assert len(load_suite(directory)) == 2
    (directory / "features.txt").write_text("reasoning  thinking text\n", encoding="utf-8")
    assert {e.message for e in check_suite(directory).errors} == {
        "unknown feature 'tool_call' (not in features.txt)",
        "unknown feature 'no_tools' (not in features.txt)",
        "unknown feature 'request_error' (not in features.txt)",
        "unknown feature 'stream' (not in features.txt)",
    }


def test_bad_feature_registry_lines(tmp_path: Path) -> None:
    directory = write_suite(tmp_path, {"features.txt": "Bad-Tag  x\nlonely\nok  fine\nok  twice\n"})
    issues = check_suite(directory).errors
    messages = {(issue.line, issue.message) for issue in issues if issue.file.name == "features.txt"}
    assert messages == {
        (1, "invalid feature tag 'Bad-Tag' (use [a-z][a-z0-9_]*)"),
        (2, "feature 'lonely' has no description"),
        (4, "feature 'ok' is listed twice"),
    }
    with pytest.raises(CaseFileError):
        load_features(directory)


def test_missing_or_empty_directory(tmp_path: Path) -> None:
    assert only_error(tmp_path / "nope").message == "not a directory"
    assert only_error(write_suite(tmp_path / "empty", {})).message.startswith("no case files")


# ---------------------------------------------------------------------------------------------
# The directory's shared tools file

SHARED_TOOLS = """\
tools:
  get_weather:
    type: function
    function:
      name: get_weather
      parameters: {type: object, properties: {city: {type: string}}}
"""


def without_tools_block(text: str) -> str:
    return "cases:" + text.split("\ncases:", 1)[1]


def test_case_files_use_the_shared_tools_file(tmp_path: Path) -> None:
    directory = write_suite(tmp_path, {"tools.yaml": SHARED_TOOLS, "a.yaml": without_tools_block(GOOD_FILE)})
    result = check_suite(directory)
    assert result.issues == [] and result.files == [directory / "a.yaml"]
    assert result.cases[0].request["tools"] == [yaml.safe_load(SHARED_TOOLS)["tools"]["get_weather"]]


def test_a_tool_defined_in_both_places_is_refused(tmp_path: Path) -> None:
    error = only_error(write_suite(tmp_path, {"tools.yaml": SHARED_TOOLS, "a.yaml": GOOD_FILE}))
    assert (error.file.name, error.field, error.case_index) == ("a.yaml", "tools.get_weather", None)
    assert error.message.startswith("tool 'get_weather' is already defined in tools.yaml")


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (SHARED_TOOLS.replace("name: get_weather", "name: weather"), "tools.get_weather.function.name",
         "its function.name is 'weather'"),
        (SHARED_TOOLS + "cases: []\n", "cases", "unknown key 'cases' (allowed here: tools)"),
        (SHARED_TOOLS.replace("type: function", "type: functoin"), "tools.get_weather.type", "'function' was expected"),
        ("tools: [\n", "", "invalid YAML"),
    ],
)
def test_a_bad_shared_tools_file_is_reported_by_file_and_field(
    tmp_path: Path, text: str, field: str, words: str
) -> None:
    case_file = GOOD_FILE.replace("get_weather", "get_forecast")  # its own tool: only tools.yaml is broken
    directory = write_suite(tmp_path, {"tools.yaml": text, "a.yaml": case_file})
    error = only_error(directory)
    assert error.file == directory / "tools.yaml" and error.field == field and error.case_index is None
    assert words in error.message


# ---------------------------------------------------------------------------------------------
# `conformance cases check`


def test_check_command_exit_codes_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_suite(tmp_path / "good", {"a.yaml": GOOD_FILE})
    assert main(["cases", "check", str(good)]) == exit_codes.OK
    assert "2 cases in 1 files" in capsys.readouterr().out

    bad = bad_suite(tmp_path, lambda d: d["cases"][0]["features"].append("telepathy"))
    assert main(["cases", "check", str(bad)]) == exit_codes.FAILED
    err = capsys.readouterr().err
    assert f"error: {bad / 'bad.yaml'}:" in err and "case #0 'reasoning-then-call': field features[3]" in err
    assert "1 errors, 0 warnings" in err

    broken = write_suite(tmp_path / "broken", {"x.yaml": "cases: [\n"})
    assert main(["cases", "check", str(broken)]) == exit_codes.FAILED
    assert "invalid YAML" in capsys.readouterr().err

    assert main(["cases", "check", str(tmp_path / "missing")]) == exit_codes.ERROR
    assert "not a directory" in capsys.readouterr().err
    assert main(["cases", "check", str(write_suite(tmp_path / "empty", {}))]) == exit_codes.ERROR


def test_check_command_warnings_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = good_data()
    data["cases"][0]["expect"]["future"] = {"message": {}, "finish_reason": "stop"}
    directory = write_suite(tmp_path, {"w.yaml": yaml.safe_dump(data)})
    assert main(["cases", "check", str(directory)]) == exit_codes.OK
    out = capsys.readouterr().out
    assert "warning:" in out and "unknown profile 'future'" in out and "0 errors, 1 warnings" in out


# ---------------------------------------------------------------------------------------------
# The shipped suite

REQUIRED_FEATURES = {
    "content", "reasoning", "tool_call", "parallel_calls", "stream", "no_tools", "tool_choice_auto",
    "tool_choice_none", "tool_choice_required", "tool_choice_named", "strict_tool", "parallel_tool_calls_false",
    "enable_thinking_false", "include_reasoning_false", "malformed_call", "truncated", "unicode", "escapes",
    "nested_arguments", "empty_arguments", "delimiters_in_args", "type_coercion", "responses_api",
}  # fmt: skip


@pytest.fixture(scope="module")
def shipped() -> list:
    return load_suite()


def test_shipped_suite_passes_the_linter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cases", "check"]) == exit_codes.OK
    captured = capsys.readouterr()
    assert "0 errors, 0 warnings" in captured.out and captured.err == ""


def test_shipped_suite_size_and_feature_coverage(shipped: list) -> None:
    assert len(shipped) >= 40
    used = {tag for case in shipped for tag in case.features}
    assert REQUIRED_FEATURES <= used, REQUIRED_FEATURES - used
    runner_tags = {GRANULARITY_FEATURE}  # the runner lists granular streams' results under it
    assert used == set(load_features()) - runner_tags, "every registry tag is used by some case, and only those"


def test_shipped_cases_expect_every_known_profile(shipped: list) -> None:
    for case in shipped:
        # a case judged by its format's parse expects that of every profile (its refusals and the format's deviations aside)
        assert set(case.expect) == set(PROFILES) or case.turn is not None or case.judged_by_parse, case.id
        assert case.references, f"{case.id} points at no contract section"


def test_shipped_suite_covers_the_required_scenarios(shipped: list) -> None:
    def some(predicate) -> bool:
        return any(predicate(case, expectation) for case in shipped for expectation in [expectation_for(case, "hf")])

    def calls(expectation) -> int:
        return len(expectation.message.tool_calls) if expectation.message else 0

    assert some(lambda c, e: e.message and e.message.content and not e.message.reasoning and not calls(e))
    assert some(lambda c, e: e.message and e.message.reasoning and e.message.content and not calls(e))
    assert some(lambda c, e: e.message and e.message.reasoning and calls(e) == 1)
    assert some(lambda c, e: calls(e) == 2) and some(lambda c, e: calls(e) == 3)
    for param in ("tool_choice", "tools", "parallel_tool_calls"):
        assert some(lambda c, e: e.error is not None and e.error.status == 400 and e.error.param == param), param
    assert some(lambda c, e: c.request.get("tool_choice") == "none" and "<tool_call>" in (e.message.content or ""))
    assert some(lambda c, e: c.request.get("chat_template_kwargs") == {"enable_thinking": False})
    assert some(lambda c, e: c.request.get("include_reasoning") is False)
    assert some(lambda c, e: "tools" not in c.request)
    assert some(lambda c, e: c.endpoint == "responses" and e.error is not None)
    assert some(lambda c, e: c.endpoint == "responses" and calls(e) >= 1)
    # hf casts string values by the tool schema, hermes does not
    assert any(
        expectation_for(case, "hf").message.tool_calls[0].arguments
        != expectation_for(case, "legacy").message.tool_calls[0].arguments
        for case in shipped if "type_coercion" in case.features and expectation_for(case, "legacy").message
    )  # fmt: skip


def test_shipped_cases_are_valid_requests(shipped: list) -> None:
    """Every case that generates sends temperature 0 and bounds the output, as the real-server tier needs."""
    for case in shipped:
        if case.endpoint == "preflight":  # no model output
            continue
        assert case.request.get("temperature") == 0, case.id
        limit = case.request.get("max_output_tokens" if case.endpoint == "responses" else "max_tokens")
        assert isinstance(limit, int) and limit > 0, case.id
        own_grammar = (case.request.get("response_format") or {}).get("type") == "structural_tag"  # tool_choice null
        inexpressible = case.turn is not None and case.reference.skip is not None  # a turn the format cannot write
        assert case.force is not None or case.natural is not None or own_grammar or inexpressible, \
            f"{case.id}: neither forced nor natural"


def test_shipped_files_validate_against_the_schema_alone() -> None:
    """The schema itself (without the loader's extra rules) accepts every shipped file."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = sorted(path for path in DEFAULT_CASES_DIR.glob("*.yaml") if path.name != TOOLS_FILE)
    assert len(files) >= 4
    for path in files:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
        assert errors == [], (path, [e.message for e in errors])


def test_readme_examples_are_valid_case_files(tmp_path: Path) -> None:
    """The examples in cases/README.md (a whole file, then one preflight case) stay in step with the schema."""
    readme = (DEFAULT_CASES_DIR / "README.md").read_text(encoding="utf-8")
    whole_file, preflight_case = (block.split("```", 1)[0] for block in readme.split("```yaml\n")[1:3])
    files = {"example.yaml": textwrap.dedent(whole_file), "preflight.yaml": "cases:\n" + preflight_case}
    result = check_suite(write_suite(tmp_path, files))
    assert result.errors == [], [str(e) for e in result.errors]
    assert [case.id for case in result.cases] == ["reasoning-then-one-call", "cors-preflight-chat-from-browser-origin"]


def test_one_pass_reports_schema_and_registry_problems_of_the_same_case(tmp_path: Path) -> None:
    def several(data: dict) -> None:
        case = data["cases"][0]
        case["features"].append("telepathy")
        case["request"]["tools"].append("nope")
        case["expect"]["hf"]["message"]["content"] = 3

    errors = check_suite(bad_suite(tmp_path, several)).errors
    assert [e.field for e in errors] == ["features[3]", "request.tools[1]", "expect.hf.message.content"]
    assert [e.line for e in errors] == sorted(e.line for e in errors)
