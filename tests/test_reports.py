"""Reports rendered from results: Markdown, JUnit XML, HTML, JSON lines (fast tier)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict
from html import escape

import pytest

from conformance.record.outcomes import Check
from conformance.record.recording import make_header
from conformance.record.results import CaseResult, read_results, summarize
from conformance.record.run_dir import write_results
from conformance.record.stamp import make_stamp
from conformance.record.transcript import TranscriptError
from conformance.report.run import html, junit, markdown
from conformance.report.run.write import write_reports
from tests.engine_helpers import STAMP, stream_transcript

HEADER = make_header("results", cases=[], markers=["<think>"], server=asdict(STAMP), created_at="2026-12-01T00:00:00+00:00")
STAMP_DICT = make_stamp({**STAMP.__dict__, "checkpoint_revision": "sha256:feedbeef"})


def result(case_id: str, mode: str, outcome: str, profile: str = "hf", reason: str = "", checks=()) -> CaseResult:
    return CaseResult(case_id, mode, profile, outcome, reason, features=("tool_call",),
                      description=f"{case_id} does what it says", checks=list(checks))


FAILED_CHECK = Check("expected_message", "fail", "expectation", "differs in content | pipes",
                     expected={"content": None}, actual={"content": "\n\n"})
RESULTS = [
    result("one-call", "stream", "pass", checks=[Check("reasoning_field", "pass", "finding", actual="reasoning")]),
    result("one-call", "non-stream", "fail", reason="expected_message: differs", checks=[FAILED_CHECK]),
    result("stalled", "stream", "error", reason="transport: timeout",
           checks=[Check("transport", "error", reason="timeout: no complete response within 2s")]),
    result("legacy-only", "stream", "skip", reason="no expectation for profile hf"),
    result("one-call", "stream", "pass", profile="legacy"),
]


@pytest.mark.parametrize("render", [markdown.render, lambda r, s: junit.render(r, s), html.render])
def test_every_report_is_stamped(render):
    text = render(RESULTS, STAMP_DICT)
    for value in ("0.32.0", "tiny", "sha256:feedbeef", "hf", STAMP_DICT["suite_version"], STAMP_DICT["time"]):
        assert value in text


def test_markdown_lists_failures_with_expected_and_actual():
    text = markdown.render(RESULTS, STAMP_DICT)
    assert "**5 results: 2 pass, 1 fail, 1 skip, 1 error**" in text
    assert "| hf | 1 | 1 | 1 | 1 | 0 |" in text
    assert "| ❌ | one-call[non-stream] | hf | expected_message | `{\"content\": null}` | `{\"content\": \"\\n\\n\"}` | " \
           "differs in content \\| pipes |" in text  # JSON, as the server sent it, in code spans
    assert "| 💥 | stalled[stream] | hf | transport |  |  | timeout: no complete response within 2s |" in text
    assert "| hf | reasoning_field | reasoning | 1 |" in text
    assert "| legacy-only[stream] | hf | no expectation for profile hf |" in text


def test_markdown_escapes_template_markers_so_github_shows_them():
    leak = Check("marker_leak", "fail", reason="template markers leaked: '<tool_call>' in content",
                 actual={"content": "<tool_call>\n{}"})
    text = markdown.render([result("leaky", "stream", "fail", checks=[leak])], STAMP_DICT)
    assert "| `{\"content\": \"<tool_call>\\n{}\"}` | template markers leaked: '&lt;tool_call&gt;' in content |" in text
    assert "<tool_call>" not in text.replace("`{\"content\": \"<tool_call>", "")  # verbatim in a code span only


def test_markdown_stays_far_below_the_step_summary_limit():
    long_reason = "x" * 5000
    many = [result(f"case-{i}", "stream", "fail", reason=long_reason,
                   checks=[Check("marker_leak", "fail", reason=long_reason)]) for i in range(5000)]
    text = markdown.render(many, STAMP_DICT)
    assert len(text.encode()) < markdown.MAX_BYTES <= 1024 * 1024
    assert "4850 more rows not shown; see results.jsonl." in text


def test_junit_counts_and_messages():
    root = ET.fromstring(junit.render(RESULTS, STAMP_DICT))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"conformance.hf", "conformance.legacy"}
    hf = suites["conformance.hf"]
    assert (hf.get("tests"), hf.get("failures"), hf.get("errors"), hf.get("skipped")) == ("4", "1", "1", "1")
    cases = {c.get("name"): c for c in hf.iter("testcase")}
    failure = cases["one-call[non-stream]"].find("failure")
    assert failure.get("message") == "expected_message: differs"
    assert "expected: {'content': None}" in failure.text
    assert cases["stalled[stream]"].find("error").get("message") == "transport: timeout"
    assert cases["legacy-only[stream]"].find("skipped").get("message") == "no expectation for profile hf"
    properties = {p.get("name"): p.get("value") for p in hf.iter("property")}
    assert properties["server_version"] == "0.32.0" and properties["checkpoint_revision"] == "sha256:feedbeef"


def test_html_drills_down_to_request_and_raw_stream_escaped():
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "<tool_call>"},
                            "finish_reason": "stop"}]}]
    transcript = stream_transcript(chunks, case_id="one-call", request={"messages": [{"content": "<b>hi</b>"}]})
    page = html.render(RESULTS, STAMP_DICT, [transcript])
    assert "&lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi</b>" not in page
    assert "&lt;tool_call&gt;" in page  # the raw stream line
    assert "0.000s" in page and "[DONE]" in page  # arrival times and the terminator
    assert "Message as a client sees it" in page and "&quot;content&quot;: &quot;&lt;tool_call&gt;&quot;" in page
    assert page.index("stalled[stream]") < page.index("one-call[stream]")  # errors first
    assert "timeout: no complete response within 2s" in page


def test_results_jsonl_round_trip_and_run_summary(tmp_path):
    write_results(tmp_path / "results.jsonl", RESULTS, HEADER)
    assert read_results(tmp_path / "results.jsonl") == RESULTS
    paths = write_reports(tmp_path, RESULTS, STAMP_DICT)
    run = json.loads(paths["run"].read_text())
    assert run["stamp"] == STAMP_DICT
    assert run["summary"]["counts"] == summarize(RESULTS).counts == {"pass": 2, "fail": 1, "skip": 1, "error": 1}
    assert {p.name for p in tmp_path.iterdir()} == {"results.jsonl", "report.md", "junit.xml", "report.html", "run.json"}


def test_a_bad_results_file_is_named_with_the_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(RESULTS[0].to_dict()) + "\n" + '{"case_id": "a", "checks": [{"oops": 1}]}\n')
    with pytest.raises(TranscriptError, match="results.jsonl:2: not a result: "):
        read_results(path)


def test_pass_at_k_counts_a_case_once_if_any_repeat_passed():
    repeated = [result("a", "stream", "skip"), result("a", "stream", "pass"), result("b", "stream", "skip"),
                result("b", "stream", "skip")]
    for index, r in enumerate(repeated):
        r.repeat = index % 2
    summary = summarize(repeated)
    assert summary.pass_at_k == {"k": 2, "cases": 2, "passed": 1}
    assert "pass@2: 1/2" in summary.line()


def test_html_shows_the_forced_text_the_findings_and_compact_token_ids():
    from conformance.servers.forcing import forcing_extra_body
    from conformance.servers.profiles import upgrade_recording
    from tests.engine_helpers import response_transcript

    forced = "<think>\nplan (a|b)*\n</think>\n\n<tool_call>\n{\"city\": \"A\\\\B\"}\n</tool_call>"
    transcript = response_transcript({"content": "x"}, "stop", case_id="one-call",
                                     request={"model": "tiny", **forcing_extra_body(forced)})
    transcript.forced = True
    upgrade_recording([transcript])  # a transcript without `forced_text`, as recorded before it was: read back
    transcript.response["choices"][0]["token_ids"] = [1, 2, 3]
    replay = Check("client_replay", "fail", "finding", "openai client rebuilds a different message: content")
    results = [result("one-call", "non-stream", "pass", checks=[replay])]
    page = html.render(results, STAMP_DICT, [transcript])
    assert f"<pre>{escape(forced)}</pre>" in page  # the regex's escaping undone
    assert "&quot;token_ids&quot;: [1, 2, 3]" in page
    assert "<td>client_replay</td><td>fail</td><td>1</td>" in page  # the findings table
    assert "href='#hf-one-call[non-stream]-0'" in page and "id='hf-one-call[non-stream]-0'" in page
    assert STAMP_DICT["server_args"] == [] and "<th>server flags</th><td>unknown</td>" in page


def test_html_says_why_a_request_was_not_sent():
    from conformance.record.transcript import Transcript

    skipped = Transcript("legacy-only", "stream", "hf", "chat", STAMP, {}, skip_reason="forcing is off for this run")
    page = html.render([result("legacy-only", "stream", "skip", reason="forcing is off")], STAMP_DICT, [skipped])
    assert "Not sent: forcing is off for this run" in page and "Request (" not in page


def test_markdown_and_html_show_the_server_flags_and_every_error_row():
    stamp = make_stamp({**STAMP.__dict__, "args": ("--tool-call-parser", "hf")})
    unexplained = [result("crashed", "stream", "error", reason="recording: case 'crashed' is not in the case set")]
    text = markdown.render(unexplained, stamp)
    assert "| server flags | --tool-call-parser hf |" in text
    assert "| 💥 | crashed[stream] | hf |  |  |  | recording: case 'crashed' is not in the case set |" in text
    assert "<th>server flags</th><td>--tool-call-parser hf</td>" in html.render(unexplained, stamp)
