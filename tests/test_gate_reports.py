"""The gate's reports (report.md, report.html, timing.png, junit.xml, GitHub annotations) as views of
hand-made gate dicts: what they show, that server strings cannot break out of any of them, the size
cap, and report.html in a real headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt
from PIL import Image

from conformance.report.gate import actions as gate_actions
from conformance.report.gate import annotations as gate_annotations
from conformance.report.gate import chart as gate_chart
from conformance.report.gate import html as gate_html
from conformance.report.gate import junit as gate_junit
from conformance.report.gate import markdown as gate_markdown
from conformance.report.gate import view as gate_view
from conformance.report.gate.write import write_gate_reports
from conformance.servers.profiles import cors_advice_for
from tests.chromium_cdp import CHROMIUM, Chromium, keep_artifact
from tests.gate_samples import HOSTILE, full_gate, huge_gate, passing_gate

REPO = Path(__file__).resolve().parent.parent


def _md_html(markdown: str) -> str:
    """The Markdown rendered as GitHub does in spirit: CommonMark + tables, raw HTML allowed."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


class _Tags(HTMLParser):
    """Every start tag, the text inside <code>, and the script bodies of an HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.code_text: list[str] = []
        self.scripts: list[str] = []
        self._stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._stack.append(tag)
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._stack:
            del self._stack[len(self._stack) - 1 - self._stack[::-1].index(tag):]

    def handle_data(self, data: str) -> None:
        if "code" in self._stack:
            self.code_text.append(data)
        if self._stack and self._stack[-1] == "script":
            self.scripts[-1] += data


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    parser.close()
    return parser


def _state(gate: dict, behaviour: dict) -> str:
    return gate_view.row_state(behaviour, gate_view.groups_by_case(gate_view.difference_groups(gate)).get(behaviour["case_id"], []))


def _unacknowledged(gate: dict) -> list[gate_view.DifferenceGroup]:
    return [g for g in gate_view.difference_groups(gate) if not g.acknowledged]


# ---- report.md ----------------------------------------------------------------------------------


def test_markdown_opens_with_the_gates_own_verdict_line():
    gate = full_gate()
    gate["verdict"]["line"] = "7 unacknowledged differences, 1 acknowledged, 0 stale, 2 newly failing"
    first = gate_markdown.render(gate).splitlines()[0]
    assert first == "# ❌ FAIL: 7 unacknowledged differences, 1 acknowledged, 0 stale, 2 newly failing"
    passing = gate_markdown.render(passing_gate()).splitlines()[0]
    assert passing.startswith("# ✅ PASS: 0 unacknowledged differences")


def test_markdown_lists_unacknowledged_differences_before_acknowledged_ones():
    gate = full_gate()
    text = gate_markdown.render(gate)
    unack_at = text.index("### Unacknowledged differences (14): 13 things to do")
    ack_at = text.index("### Acknowledged differences (2): 2 things to do")
    assert unack_at < ack_at < text.index("## Behaviours by feature")
    unack_table, ack_table = text[unack_at:ack_at], text[ack_at:text.index("## Behaviours by feature")]
    for group in gate_view.difference_groups(gate):
        where = f"`{group.case_id}` ({group.mode})"
        assert where in (ack_table if group.acknowledged else unack_table), where
    # One advice, one row, for every case it concerns.
    row = next(line for line in unack_table.splitlines() if "`two-calls` (stream)" in line)
    assert "`nested-arguments` (stream)" in row and row.count("accumulate each tool call") == 1
    assert unack_table.count("accumulate each tool call") == 1
    # Refused requests come first (they break a client outright); a case in both modes is named once.
    strict = next(d for d in gate["differences"] if d["case_id"] == "strict-tool")
    gate["differences"].append(dict(strict, mode="non-stream"))
    text = gate_markdown.render(gate)
    rows = [line for line in text[text.index("### Unacknowledged"):].splitlines() if line.startswith("| ")][1:]
    assert rows[0].startswith("| request newly refused | `tool-choice-required` (non-stream) |")
    assert any(row.startswith("| request newly refused | `strict-tool` (both modes) |") for row in rows[:3])


def test_markdown_follows_each_changed_row_with_excerpts_and_the_client_action():
    gate = full_gate()
    text = gate_markdown.render(gate)
    for behaviour in gate["behaviours"]:
        row_at = text.index(f"| `{behaviour['case_id']}` |", text.index("## Behaviours by feature"))
        detail = f"#### `{behaviour['case_id']}` ·"
        if behaviour["changed"]:
            assert text.index(detail) > row_at
        else:
            assert detail not in text
    # The team's own words win over the default, backticks made code.
    assert "- **Client action**: send `tool_choice: auto`; check for a call yourself" in text
    # The field is named unless the summary starts with it.
    assert "- **What differs**: `tools`: refused under the candidate: HTTP 400 param tools" in text
    assert "- **What differs**: content after the tool call kept by the candidate" in text
    # Within a case, what still needs acknowledging comes first.
    assert (text.index("#### `tool-choice-required` · `non-stream` · request newly refused (**not acknowledged**)")
            < text.index("#### `tool-choice-required` · `stream` · request newly refused (acknowledged)"))
    # The request and both answers of that difference.
    assert '- **Request** (the fields that matter): `{"tool_choice": "required", "stream": true}`' in text
    assert '- **`legacy` answered**: `HTTP 200, tool call get_weather({"city": "Paris"})`' in text
    assert '- **Acknowledged**: hf cannot force a call (reference `docs/vllm-0.32-contract.md#2-1`, source `expect.yaml:12`)' in text


def test_default_client_actions_are_worded_from_the_recorded_values():
    gate = full_gate()
    labels = gate_view.labels(gate)
    by_case = {(d["case_id"], d["mode"], d["kind"]): d for d in gate["differences"]}

    def action(member: dict) -> str:
        return "".join(gate_actions.client_action(member, labels))

    required = by_case[("tool-choice-required", "non-stream", "request_refused")]
    assert action(required).startswith('send tool_choice: "auto"; "required" is refused by hf with HTTP 400 param tool_choice')
    assert "openai.BadRequestError" in action(required)
    # Other values, other words: a refusal of another parameter and status names those.
    other = dict(required, candidate={"status": 422, "param": "max_tokens"}, excerpt={"request": {"max_tokens": 9}})
    assert action(other).startswith("stop sending max_tokens: 9 is refused by hf with HTTP 422 param max_tokens")
    strict = action(by_case[("strict-tool", "stream", "request_refused")])
    assert strict.startswith("drop strict: true from the tool definitions") and "param tools" in strict
    assert action(by_case[("reasoning-only", "stream", "reasoning_field")]).startswith(
        "read the reasoning from reasoning (legacy used reasoning_content)")
    # A message difference: the advice follows the field and the direction of the change.
    content = by_case[("content-after-call", "non-stream", "message")]
    assert action(content).startswith("hf puts text in content where legacy had none")
    assert action(dict(content, baseline="Hi", candidate=None)).startswith("hf sends no content where legacy did")
    assert action(dict(content, baseline=None, candidate="\n\n")).startswith("hf sends whitespace-only content")
    assert action(dict(content, field="reasoning", baseline="a", candidate="ab")).startswith("the reasoning text differs")
    calls = dict(content, field="tool_calls", baseline=[{"name": "f"}, {"name": "g"}], candidate=[{"name": "f"}])
    assert action(calls).startswith("hf returns fewer tool calls than legacy")
    assert action(dict(calls, candidate=calls["baseline"] * 2)).startswith("hf returns tool calls legacy did not")
    assert "never compare the raw string" in action(by_case[("string-values-cast-to-integer", "stream", "message")])
    finish = by_case[("unclosed-call", "stream", "finish_reason")]
    assert action(finish).startswith('handle finish_reason: "length" where legacy sent "tool_calls"')
    split = {"kind": "stream_granularity", "case_id": "two-calls", "mode": "stream@whole", "field": "split_invariance",
             "baseline": {"outcome": "pass"}, "candidate": {"outcome": "fail", "reason": "first divergent chunk: 3"}}
    turn2 = {"kind": "multi_turn", "case_id": "two-calls", "mode": "turn2@litellm", "field": "prompt",
             "baseline": "</think>\n<tool_call>", "candidate": "</think>\n\n\n<tool_call>"}
    samples = {sample["kind"]: sample for sample in (split, turn2)}
    for kind in gate_view.KIND_TITLES:  # every kind has its own advice
        member = next((d for d in gate["differences"] if d["kind"] == kind), samples.get(kind))
        assert member is not None, kind
        assert not action(member).startswith(gate_actions.NO_ADVICE)
    assert action(split).startswith("under hf a stream that delivers several tokens per delta")
    assert action(turn2).startswith("a tool loop that sends the assistant message back as the client named in the "
                                    "mode does shows the model another prompt under hf")
    assert action(dict(turn2, field="status")).startswith("the second request of a tool loop")
    assert action(dict(split, baseline=split["candidate"], candidate=split["baseline"])).startswith("under legacy")


def _with_an_unforced_answer(gate: dict) -> dict:
    """hermes answered tool-choice-required with the tiny model's own output, not the forced text."""
    reason = "the output is not the forced text: expected '<tool_call>...', got '<tool_call>{\"arguments\": true}'"
    for difference in gate["differences"]:
        if difference["case_id"] == "tool-choice-required":
            difference["excerpt"]["unforced"] = {"baseline": reason}
    next(b for b in gate["behaviours"] if b["case_id"] == "tool-choice-required")["unforced"] = {
        "baseline": ["stream", "non-stream"]}
    return gate


def test_reports_mark_an_answer_that_is_not_the_forced_text_as_unforced():
    gate = _with_an_unforced_answer(full_gate())
    text = gate_markdown.render(gate)
    row = next(line for line in text.splitlines() if line.startswith("| `tool-choice-required` |"))
    baseline_cell, candidate_cell = row.split(" | ")[1:3]
    assert baseline_cell.startswith("**unforced** (both modes) `") and "unforced" not in candidate_cell
    assert sum(1 for line in text.splitlines() if line.startswith("| `") and "**unforced**" in line) == 1
    assert "An answer marked **unforced** is the model's own output, not the forced text" in text
    assert "- **`legacy` answered** (**unforced**: the output is not the forced text: expected" in text
    assert "- **`hf` answered**: `HTTP 400" in text  # the other side is not marked
    page = gate_html.render(gate)
    cells = page[page.index("id='case-tool-choice-required'"):].split("</tr>", 1)[0]
    assert "<span class='unforced'" in cells and cells.index("unforced (both modes)") < cells.index("candidate of")
    detail = page[page.index("id='diff-tool-choice-required-stream-request_refused'"):].split("</div>", 1)[0]
    assert "<code>legacy</code> answered <span class='unforced'" in detail and "got &#x27;&lt;tool_call&gt;" in detail
    # A gate.json without the field (written before it) marks nothing.
    assert "**unforced** (" not in gate_markdown.render(full_gate())


def test_row_state_follows_the_differences_not_a_contradicting_row_flag():
    gate = full_gate()
    for behaviour in gate["behaviours"]:
        behaviour["acknowledged"] = True  # what an engine might claim; the differences say otherwise
    text = gate_markdown.render(gate)
    assert "| `strict-tool` | `baseline of strict-tool` | `candidate of strict-tool` | **yes, not acknowledged** |" in text
    assert "| `reasoning-then-one-call` | `baseline of reasoning-then-one-call` | `candidate of reasoning-then-one-call` | yes, acknowledged |" in text
    assert "| `plain-content` | `content \"Hello\"` | `content \"Hello\"` | no |" in text
    page = gate_html.render(gate)
    assert "id='case-strict-tool' class='case' data-state='unacknowledged'" in page


def test_markdown_shows_hostile_server_strings_as_text_only():
    gate = full_gate()
    text = gate_markdown.render(gate)
    text.encode("utf-8")  # a lone surrogate would raise here
    assert not re.search("[\x00-\x09\x0b-\x1f\u2028\ud800]", text)
    html = _md_html(text)
    parsed = _parse(html)
    tags = {tag for tag, _ in parsed.tags}
    assert not tags & {"script", "tool_call", "b", "img"}, tags
    shown = gate_view.printable(HOSTILE)
    assert any(shown in code for code in parsed.code_text)  # exactly as sent, as code
    # Every table row keeps its columns although the strings hold `|`.
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        widths = {len(re.findall(r"<t[hd][ >]", row)) for row in re.findall(r"<tr>.*?</tr>", table, re.S)}
        assert len(widths) == 1, table[:300]


def test_markdown_code_spans_survive_backticks_and_pipes():
    for value in ["a`b", "``", "` x `", "|a|", "<tool_call>", "  ", " a ", " a", "&amp; *x*"]:
        html = _md_html(f"| h |\n|---|\n| {gate_markdown.code(value, in_table=True)} |\n\n{gate_markdown.code(value)}\n")
        shown = re.findall(r"<code>(.*?)</code>", html, re.S)
        unescaped = [s.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&quot;", '"') for s in shown]
        assert unescaped == [value, value], (value, html)


def test_markdown_stays_under_githubs_summary_cap_and_keeps_every_section():
    gate = huge_gate()
    assert len(json.dumps(gate)) > 30 * 1024 * 1024  # far more than fits
    text = gate_markdown.render(gate)
    assert len(text.encode()) <= gate_markdown.MAX_BYTES < 1024 * 1024
    for heading in ("# ❌ FAIL:", "## Servers compared", "### Unacknowledged differences", "## Behaviours by feature",
                    "## Stale expectations (1)", "## Timing (streaming)", "## Browser clients (CORS)"):
        assert heading in text, heading
    assert "not shown to keep this summary under GitHub's 1 MiB limit" in text
    assert re.search(r"\) and \d+ more \|", text)  # a to-do row names its first cases and counts the rest


def test_markdown_without_differences_timing_or_preflight_says_so():
    text = gate_markdown.render(passing_gate())
    assert "No client-visible difference was found between the two servers." in text
    assert "was not measured" in text
    assert "No CORS preflight was sent" in text and "`--origin ORIGIN`" in text
    assert "Stale expectations" not in text and "#### " not in text


def test_markdown_timing_section_gives_the_first_tool_name_delay_and_links_the_chart():
    gate = full_gate()
    delay = gate["timing"]["summary"]["first_tool_name_delay"]
    text = gate_markdown.render(gate)
    assert (f"Under `hf` the first tool name becomes visible {delay['p50'] * 1000:.0f} ms later than under `legacy` "
            f"at the median of {delay['n']} streamed case runs ({delay['p90'] * 1000:.0f} ms later at p90, "
            f"{delay['max'] * 1000:.0f} ms later at the most).") in text
    assert "[`timing.png`](timing.png)" in text
    delay.update(p50=-0.02, p90=0.0001, max=-0.001)
    text = gate_markdown.render(gate)
    assert ("becomes visible 20 ms earlier than under `legacy` at the median of 12 streamed case runs "
            "(at the same time at p90, 1 ms earlier at the most).\n") in text
    assert "that much later" not in text


def _with_tool_name_lines(gate: dict, seconds_p50: float) -> dict:
    """The timing of a 10-token forced call on a shared CPU: the name 2 data lines later under the
    candidate by the stream's structure, `seconds_p50` later (or earlier) by the clock."""
    stats = lambda *values: {"n": 12, "p50": values[0], "p90": values[1], "max": values[2]}  # noqa: E731
    summary = gate["timing"]["summary"]
    summary["first_tool_name_delay"] = stats(seconds_p50, 0.01, 0.02)
    summary["first_tool_name_line_delay"] = stats(2, 2, 3)
    summary["tool_name_lines"] = {"baseline": {"first_tool_name": stats(3, 3, 4), "data_lines": stats(12, 12, 13)},
                                  "candidate": {"first_tool_name": stats(5, 5, 6), "data_lines": stats(12, 12, 13)}}
    return gate


def test_timing_section_gives_the_structure_first_then_the_seconds_with_what_they_cannot_show():
    text = gate_markdown.render(_with_tool_name_lines(full_gate(), seconds_p50=-0.004))
    section = text[text.index("## Timing (streaming)"):text.index("## Browser clients")]
    structure = section.index("it first appears at data line 3 of 12 under `legacy` and at data line 5 of 12 under "
                              "`hf` (medians): 2 data lines later under `hf`")
    assert section.index("| data line of the first tool name | 3 / 3 / 4 (n=12) | 5 / 5 / 6 (n=12) |") > structure
    caveat = section.index("not how much later a real model's tool name appears")
    seconds = section.index("Under `hf` the first tool name becomes visible 4 ms earlier")
    assert structure < caveat < seconds < section.index("| first tool name visible |")
    # Seconds that contradict the structure are called noise; seconds that agree are not.
    assert "Here they contradict it: the name appears 4 ms earlier by the clock but 2 data lines later" in section
    agreeing = gate_markdown.render(_with_tool_name_lines(full_gate(), seconds_p50=0.004))
    assert "not how much later" in agreeing and "contradict" not in agreeing
    page = gate_html.render(_with_tool_name_lines(full_gate(), seconds_p50=-0.004))
    assert page.index("id='timing-structure'") < page.index("id='timing-caveat'") < page.index("becomes visible 4 ms earlier")
    # A gate.json written before the structure was recorded says so instead of guessing.
    assert "where the name first appears was not compared" in gate_markdown.render(full_gate())


def test_cors_section_tells_browser_clients_what_each_server_allows():
    gate = full_gate()
    text = gate_markdown.render(gate)
    assert "| access-control-allow-origin | `absent` | `absent` |" in text
    assert "| access-control-max-age | `600` | `absent` |" in text  # header names compared case-insensitively
    assert "cannot call `hf` directly" in text
    assert "start it with `--allowed-origins '[\"http://localhost:3000\"]'`" in text
    assert "vLLM 0.32 refuses cross-origin browser access by default" in text  # the candidate record's advice
    # The advice is the candidate's own (another record, another text), and a record without one gets a generic line.
    gate["sides"]["candidate"].update(label="hf-rust", cors_advice=cors_advice_for("hf-rust", "http://localhost:3000"))
    text = gate_markdown.render(gate)
    assert "vLLM 0.32's Rust frontend refuses cross-origin browser access" in text and "vLLM 0.32 refuses" not in text
    gate["sides"]["candidate"].update(label="other", cors_advice=None)
    text = gate_markdown.render(gate)
    assert "--allowed-origins" not in text and "allow the origin in its CORS settings" in text
    # Once the candidate lets the origin in, there is nothing to do, whatever the baseline did.
    gate["sides"]["candidate"].update(label="hf", cors_advice=cors_advice_for("hf", "http://localhost:3000"))
    gate["cors"]["candidate"] = {"status": 200, "headers": {"Access-Control-Allow-Origin": "http://localhost:3000"}, "body": "OK"}
    text = gate_markdown.render(gate)
    assert "may call `hf` directly" in text and "cannot call `legacy` directly" in text
    assert "--allowed-origins" not in text and "CORS settings" not in text


# ---- timing.png ---------------------------------------------------------------------------------


def _pixels_near(image: Image.Image, color: str, tolerance: int = 40) -> int:
    target = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
    return sum(n for n, rgb in image.getcolors(1 << 20) if all(abs(a - b) <= tolerance for a, b in zip(rgb, target)))


def test_chart_is_a_png_drawing_both_sides_and_the_delay():
    png = gate_chart.render(full_gate())
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert 1000 <= image.width <= 2000 and 600 <= image.height <= 1500
    for color in (gate_chart.COLORS["baseline"], gate_chart.COLORS["candidate"], gate_chart.DELAY_COLOR):
        assert _pixels_near(image, color) > 200, color
    empty = Image.open(io.BytesIO(gate_chart.render(passing_gate()))).convert("RGB")  # timing null
    assert _pixels_near(empty, gate_chart.COLORS["candidate"]) == 0


def test_chart_delays_are_per_case_candidate_minus_baseline():
    cases = full_gate()["timing"]["cases"]
    expected = [(c["candidate"]["first_tool_name"] - c["baseline"]["first_tool_name"]) * 1000
                for c in cases if c["baseline"]["first_tool_name"] is not None]
    assert gate_chart.tool_name_delays(cases) == pytest.approx(expected)
    assert len(expected) == len(cases) - 1  # the case without a call has no delay


def test_chart_labels_are_drawn_as_written():
    gate = full_gate()
    gate["sides"]["baseline"]["label"] = r"$\undefinedmacro{$ " + HOSTILE  # mathtext would refuse this
    assert gate_chart.render(gate).startswith(b"\x89PNG")


# ---- report.html --------------------------------------------------------------------------------


def test_html_escapes_every_server_string():
    gate = full_gate()
    page = gate_html.render(gate, gate_chart.render(gate))
    page.encode("utf-8")
    parsed = _parse(page)
    tags = {tag for tag, _ in parsed.tags}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "b", "code", "span",
                    "table", "thead", "tbody", "tr", "th", "td", "a", "div", "label", "select", "option", "section",
                    "button", "details", "summary", "dl", "dt", "dd", "img", "ul", "li", "hr", "script"}, tags
    assert parsed.scripts == [gate_html.SCRIPT]  # one script, ours, whole
    assert any(gate_view.printable(HOSTILE) in text for text in parsed.code_text)


def test_html_is_self_contained():
    gate = full_gate()
    chart = gate_chart.render(gate)
    parsed = _parse(gate_html.render(gate, chart))
    for tag, attrs in parsed.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "data:image/png;base64,")), (tag, value)
    images = [a["src"] for t, a in parsed.tags if t == "img"]
    assert [base64.b64decode(src.split(",", 1)[1]) for src in images] == [chart]
    csp = next(a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp


def test_html_gives_every_row_and_difference_an_id():
    gate = full_gate()
    parsed = _parse(gate_html.render(gate))
    ids = [a["id"] for _, a in parsed.tags if a.get("id")]
    assert len(ids) == len(set(ids))
    for behaviour in gate["behaviours"]:
        assert gate_view.anchor("case", behaviour["case_id"]) in ids
    for d in gate["differences"]:
        assert f"diff-{d['case_id']}-{d['mode']}-{d['kind']}" in ids
    # Links from the to-do list lead to those ids.
    hrefs = {a["href"][1:] for t, a in parsed.tags if t == "a"}
    assert {g.anchor for g in gate_view.difference_groups(gate)} <= hrefs
    assert {a.get("data-state") for _, a in parsed.tags if "data-state" in a} == {"unchanged", "acknowledged", "unacknowledged"}


def test_html_differences_of_one_case_mode_and_kind_share_one_id():
    gate = full_gate()
    cast = next(d for d in gate["differences"] if d["case_id"] == "string-values-cast-to-integer")
    gate["differences"].append(dict(cast, field="tool_calls[1].arguments", summary="second call cast too"))
    groups = gate_view.difference_groups(gate)
    same = [g for g in groups if g.anchor == "diff-string-values-cast-to-integer-stream-message"]
    assert len(same) == 1 and len(same[0].members) == 2
    # Headings count differences as the verdict does, and say when rows hold several.
    assert "### Unacknowledged differences (15): 13 things to do" in gate_markdown.render(gate)
    page = gate_html.render(gate)
    assert page.count("id='diff-string-values-cast-to-integer-stream-message'") == 1
    assert "second call cast too" in page


def _visible(selector: str) -> str:
    return (f"(function () {{ var e = document.querySelector({json.dumps(selector)}); if (!e) return false;"
            " var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&"
            " getComputedStyle(e).display !== 'none' && getComputedStyle(e).visibility !== 'hidden'; })()")


def _in_viewport(element_id: str) -> str:
    return (f"(function () {{ var r = document.getElementById({json.dumps(element_id)}).getBoundingClientRect();"
            " return r.height > 0 && r.top >= 0 && r.top < window.innerHeight; })()")


@pytest.fixture
def browser(tmp_path):
    if not CHROMIUM:
        pytest.skip("chromium is not installed (scripts/bootstrap installs Debian's chromium where apt-get works)")
    chromium = Chromium(tmp_path / "chromium-profile")
    yield chromium
    chromium.close()


def test_html_in_headless_chromium_shows_the_table_and_the_chart_and_opens_fragments(browser, tmp_path):
    gate = full_gate()
    paths = write_gate_reports(tmp_path / "gate", gate)
    url = paths["html"].as_uri()
    browser.open(url)
    assert browser.evaluate("document.body.dataset.ready") == "yes"  # the page script ran to the end
    assert browser.evaluate(_visible("table.behaviours")) and browser.evaluate(_visible("table.todo"))
    width = Image.open(paths["chart"]).width
    assert browser.evaluate("[document.getElementById('timing-chart').complete, "
                            "document.getElementById('timing-chart').naturalWidth]") == [True, width]
    assert browser.evaluate(_visible("#timing-chart"))
    assert browser.evaluate("document.querySelectorAll('tr.detail:not([hidden])').length") == 0
    shot = keep_artifact(browser.screenshot(tmp_path / "gate-report.png", full_page=True))
    image = Image.open(shot).convert("RGB")
    assert image.height > 2000 and _pixels_near(image, gate_chart.COLORS["candidate"]) > 200  # the chart drawn
    assert _pixels_near(image, "#cf222e", 10) > 500  # the red unacknowledged marks

    # A difference's fragment (under an acknowledged row, while the filter shows only unacknowledged
    # rows) resets the filter, expands its row and brings it into view.
    target = "diff-reasoning-then-one-call-stream-stream_shape"
    browser.open(f"{url}?outcome=unacknowledged#{target}")
    assert browser.evaluate("document.getElementById('outcome').value") == "all"
    assert browser.evaluate(f"document.getElementById({json.dumps(target)}).closest('tr.detail').hidden") is False
    assert browser.evaluate(_in_viewport(target))
    assert browser.evaluate(f"document.getElementById({json.dumps(target)}).classList.contains('target')")
    keep_artifact(browser.screenshot(tmp_path / "gate-report-fragment.png"))

    # A case fragment opens that row.
    browser.open(f"{url}#case-content-after-call")
    assert browser.evaluate("document.getElementById('case-content-after-call').nextElementSibling.hidden") is False
    assert browser.evaluate(_in_viewport("case-content-after-call"))

    # The filter by outcome, then by feature, hides the other rows.
    browser.open(f"{url}?outcome=unacknowledged")
    shown = browser.evaluate("Array.from(document.querySelectorAll('tr.case')).filter(function (r) {"
                             " return getComputedStyle(r).display !== 'none'; }).map(function (r) { return r.id; })")
    expected = {gate_view.anchor("case", b["case_id"]) for b in gate["behaviours"] if _state(gate, b) == "unacknowledged"}
    assert set(shown) == expected and len(expected) < len(gate["behaviours"])
    assert not browser.evaluate(_visible("#case-plain-content"))
    browser.evaluate("var f = document.getElementById('feature'); f.value = 'request_error';"
                     " f.dispatchEvent(new Event('change'))")
    shown = browser.evaluate("Array.from(document.querySelectorAll('tr.case')).filter(function (r) {"
                             " return getComputedStyle(r).display !== 'none'; }).map(function (r) { return r.id; })")
    assert set(shown) == {gate_view.anchor("case", b["case_id"]) for b in gate["behaviours"]
                          if _state(gate, b) == "unacknowledged" and "request_error" in b["features"]}
    assert browser.evaluate("document.getElementById('shown').textContent") == f"{len(shown)} of {len(gate['behaviours'])} behaviour rows shown"
    todo = browser.evaluate("Array.from(document.querySelectorAll('table.todo tbody tr')).filter(function (r) {"
                            " return getComputedStyle(r).display !== 'none'; }).length")
    items = gate_actions.to_do(gate_view.difference_groups(gate), gate_view.labels(gate))
    assert todo == sum(1 for item in items if not item.acknowledged and "request_error" in item.features) > 0
    # The toggle button opens and closes a row by hand.
    browser.evaluate("document.querySelector('#case-tools-empty button.toggle').click()")
    assert browser.evaluate("document.getElementById('case-tools-empty').nextElementSibling.hidden") is False
    browser.evaluate("document.querySelector('#case-tools-empty button.toggle').click()")
    assert browser.evaluate("document.getElementById('case-tools-empty').nextElementSibling.hidden") is True


def _shown(browser, selector: str) -> list[str]:
    return browser.evaluate(f"Array.from(document.querySelectorAll({json.dumps(selector)})).filter(function (e) {{"
                            " var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; })"
                            ".map(function (e) { return e.textContent; })")


def test_html_filter_reaches_the_to_do_list_says_when_nothing_matches_and_anchors_clear_the_bar(browser, tmp_path):
    gate = full_gate()
    url = write_gate_reports(tmp_path / "gate", gate)["html"].as_uri()
    # The feature filter narrows each to-do row to its cases of that feature: the accumulate advice
    # concerns two-calls (parallel_calls) and nested-arguments, and only the first stays.
    browser.open(f"{url}?feature=parallel_calls")
    where = _shown(browser, "table.todo span.where")
    assert where == ["two-calls (stream)"]
    assert len(_shown(browser, "table.todo tbody tr")) == 1
    assert browser.evaluate("document.getElementById('todo-none').hidden") is True
    browser.open(f"{url}?feature=all")
    assert {"two-calls (stream)", "nested-arguments (stream)"} <= set(_shown(browser, "table.todo span.where"))
    separators = browser.evaluate("Array.from(document.querySelectorAll('table.todo span.where')).filter(function (e) {"
                                  " return /^(two-calls|nested-arguments) /.test(e.textContent); }).map(function (e) {"
                                  " return getComputedStyle(e, '::before').content; })")
    assert separators == ["none", '", "']  # the cases shown are comma-separated, the first without one
    # A filter nothing matches says so, in the to-do list and in the behaviours.
    assert not _shown(browser, "#rows-none") and not _shown(browser, "#todo-none")
    browser.open(f"{url}?outcome=unchanged&feature=request_error")
    assert _shown(browser, "#rows-none") == ["No rows match this filter."]
    assert _shown(browser, "#todo-none") == ["No rows match this filter."]
    assert not _shown(browser, "table.todo") and not _shown(browser, "tr.case")
    # On a narrow window the sticky filter bar wraps; a row opened by its anchor sits below it, not under it.
    narrow = Chromium(tmp_path / "chromium-narrow", width=420, height=500)
    try:
        for target in ("case-hostile-case", "diff-unclosed-call-stream-finish_reason"):
            narrow.open(f"{url}#{target}")
            top, bar_bottom, scrolled = narrow.evaluate(
                f"[document.getElementById('{target}').getBoundingClientRect().top,"
                " document.getElementById('filters').getBoundingClientRect().bottom, window.scrollY]")
            assert scrolled > 0 and top >= bar_bottom - 1, (target, top, bar_bottom)
    finally:
        narrow.close()


def _huge_gate_with_ids() -> dict:
    gate = huge_gate()
    for d in gate["differences"]:  # as build_gate writes them
        d["id"] = f"{d['case_id']}-{d['mode']}-{d['kind']}" + (f"-{d['field']}" if d["field"] else "")
    return gate


def test_html_of_a_huge_gate_shows_the_first_differences_of_each_kind_in_full_and_counts_the_rest(monkeypatch):
    gate = _huge_gate_with_ids()
    page = gate_html.render(gate)
    with monkeypatch.context() as uncapped:
        uncapped.setattr(gate_html, "MAX_IN_FULL_PER_KIND", len(gate["differences"]))
        everything = gate_html.render(gate)  # 25 MB
    assert len(page.encode()) < min(8 * 1024 * 1024, len(everything.encode()) // 3)
    parsed = _parse(page)
    ids = {a["id"] for _, a in parsed.tags if a.get("id")}
    divs = {a["id"]: a.get("class") for t, a in parsed.tags if t == "div" and a.get("id")}
    cap = gate_html.MAX_IN_FULL_PER_KIND
    seen: dict[str, int] = {}
    groups = gate_view.difference_groups(gate)
    left_out = set()
    for group in groups:  # unacknowledged first, then case order
        seen[group.kind] = seen.get(group.kind, 0) + 1
        if seen[group.kind] <= cap:
            assert divs[group.anchor] == "diff", group.anchor
        elif group.anchor in divs:
            assert divs[group.anchor] == "diff brief"
        else:
            left_out.add(group.case_id)
    assert left_out and all(count > cap for count in seen.values())
    brief = sum(count - cap for count in seen.values())
    assert f"the other {brief} (case, mode, kind) rows" in page
    note = page[page.index("id='size-cap'"):page.index("</div>", page.index("id='size-cap'"))]
    assert f"{len(left_out)} cases without a row on this page" in note
    assert all(f"<code>{h}</code>" in note for h in left_out)
    # No row of a left-out case, no link into nothing.
    assert not any(gate_view.anchor("case", case_id) in ids for case_id in left_out)
    hrefs = [a["href"][1:] for t, a in parsed.tags if t == "a"]
    assert hrefs and set(hrefs) <= ids
    # A gate within the cap shows everything in full and says nothing about a cap.
    assert "size-cap" not in gate_html.render(full_gate())


def test_html_of_a_huge_gate_opens_in_headless_chromium(browser, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(gate_html.render(_huge_gate_with_ids()), encoding="utf-8")
    browser.open(path.as_uri())
    assert browser.evaluate("document.body.dataset.ready") == "yes"
    rows = browser.evaluate("document.querySelectorAll('tr.case').length")
    assert 0 < rows < len(huge_gate()["behaviours"])
    assert browser.evaluate("document.getElementById('shown').textContent") == f"{rows} of {rows} behaviour rows shown"
    assert browser.evaluate(_visible("#size-cap"))


# ---- junit.xml ----------------------------------------------------------------------------------


def test_junit_has_a_testcase_per_difference_and_fails_the_unacknowledged():
    gate = full_gate()
    root = ET.fromstring(gate_junit.render(gate))  # the control characters of HOSTILE made it through
    cases = root.findall(".//testcase")
    groups = gate_view.difference_groups(gate)
    without = [b for b in gate["behaviours"] if b["case_id"] not in {g.case_id for g in groups}]
    assert len(cases) == len(groups) + len(without) + len(gate["stale"]) + 1
    failed = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert failed == [(g.case_id, f"{g.mode} {g.kind}") for g in _unacknowledged(gate)] + [("gate", "verdict")]
    assert root.get("failures") == str(len(failed)) == root.find("testsuite").get("failures")
    acknowledged = next(c for c in cases if c.get("classname") == "tool-choice-required" and c.get("name") == "stream request_refused")
    assert acknowledged.find("failure") is None and "hf cannot force a call" in acknowledged.find("system-out").text
    assert [c.get("name") for c in cases if c.find("skipped") is not None] == ["stale expect.yaml:40"]
    hostile = next(c for c in cases if c.get("classname") == "hostile-case" and c.get("name") == "stream message")
    assert gate_view.printable(HOSTILE) in hostile.find("failure").get("message")
    model = next(p for p in root.iter("property") if p.get("name") == "candidate.model")
    assert model.get("value") == "/tmp/tiny " + gate_view.printable(HOSTILE, keep_newlines=True)


def test_junit_verdict_testcase_matches_the_gate():
    root = ET.fromstring(gate_junit.render(passing_gate()))
    assert root.get("failures") == "0" and root.get("errors") == "0"
    gate = passing_gate()
    gate["verdict"].update(outcome="error", exit_code=2, line="the candidate server did not start")
    root = ET.fromstring(gate_junit.render(gate))
    verdict = next(c for c in root.iter("testcase") if c.get("name") == "verdict")
    assert verdict.find("error").get("message") == "the candidate server did not start" and root.get("errors") == "1"


# ---- GitHub annotations -------------------------------------------------------------------------


def _decode(data: str) -> str:
    return data.replace("%0A", "\n").replace("%0D", "\r").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def test_annotations_name_each_thing_to_do_within_githubs_limit():
    gate = full_gate()
    keep = ("strict-tool", "hostile-case", "two-calls", "nested-arguments")
    gate["differences"] = [d for d in gate["differences"] if d["acknowledged"] or d["case_id"] in keep]
    lines = gate_annotations.annotations(gate)
    errors = [line for line in lines if line.startswith("::error title=")]
    assert len(errors) == 4  # strict tool, stream shape (two cases), two for the hostile case
    assert all(line.startswith(("::error title=", "::warning title=")) for line in lines)  # one line each
    title, message = errors[0][len("::error title="):].split("::", 1)
    assert _decode(title) == "Unacknowledged: request newly refused (1 in 1 case runs)"
    assert _decode(message).startswith("Client action: drop strict: true from the tool definitions")
    assert _decode(message).endswith("Where: strict-tool (stream).")
    shape = next(_decode(line) for line in errors if "stream shape" in line)
    assert "(2 in 2 case runs)" in shape and shape.endswith("Where: two-calls (stream), nested-arguments (stream).")
    hostile = next(line for line in errors if "hostile-case" in line and "case outcome" in line)
    assert "%0A" not in hostile and "\n" not in hostile
    assert lines[-1].startswith("::warning title=Stale expectation expect.yaml%3A40::")
    assert r"\n::error::boom %250A" in lines[-1]  # the server's newline and percent stay data, on this line
    many = full_gate()
    for i in range(12):  # twelve more refused parameters, twelve more things to do
        many["differences"].append(dict(next(d for d in many["differences"] if d["case_id"] == "strict-tool"), case_id=f"refused-{i}",
                                        candidate={"status": 400, "param": f"p{i}"}))
    errors = [line for line in gate_annotations.annotations(many) if line.startswith("::error")]
    items = [i for i in gate_actions.to_do(gate_view.difference_groups(many), gate_view.labels(many)) if not i.acknowledged]
    assert len(errors) == gate_annotations.GITHUB_LIMIT < len(items)
    assert errors[-1].startswith(f"::error title={len(items) - 9} more things to do::")


def test_annotations_of_a_failing_gate_without_differences_and_of_a_green_one():
    assert gate_annotations.annotations(passing_gate()) == []
    gate = passing_gate()
    gate["verdict"].update(outcome="fail", exit_code=1, line="0 unacknowledged differences, 0 acknowledged, 0 stale, 1 newly failing")
    assert gate_annotations.annotations(gate) == [
        "::error title=Gate fail::0 unacknowledged differences, 0 acknowledged, 0 stale, 1 newly failing"]


def test_annotations_command_reads_gate_json_and_refuses_a_broken_one(tmp_path):
    good = tmp_path / "gate.json"
    good.write_text(json.dumps(full_gate()))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "conformance.report.gate.annotations", str(good)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines() == gate_annotations.annotations(full_gate())
    bad = tmp_path / "broken.json"
    bad.write_text('{"verdict":\n  {"outcome": }')
    done = subprocess.run([sys.executable, "-m", "conformance.report.gate.annotations", str(bad)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and f"{bad}: line 2 column" in done.stderr and done.stdout == ""


# ---- all of them, and the workflow --------------------------------------------------------------


def test_write_gate_reports_writes_the_five_views(tmp_path):
    gate = full_gate()
    paths = write_gate_reports(tmp_path / "out", gate)
    assert {p.name for p in paths.values()} == {"report.md", "summary.md", "report.html", "timing.png", "junit.xml"}
    assert paths["markdown"].read_text() == gate_markdown.render(gate)
    assert paths["summary"].read_text() == gate_markdown.render_summary(gate)
    assert paths["junit"].read_text() == gate_junit.render(gate)
    assert paths["html"].read_text() == gate_html.render(gate, paths["chart"].read_bytes())


WORKFLOW = REPO / "examples" / "github-actions" / "gate.yml"


def test_workflow_report_steps_fill_the_summary_and_annotate(tmp_path):
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["gate"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert {"actions/checkout", "actions/setup-python", "actions/upload-artifact"} <= set(uses)
    junit_upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact") and "junit" in s["with"]["path"])
    assert junit_upload.get("if") == "always()"
    gate_step = next(s for s in steps if s.get("id") == "gate")
    assert "conformance gate" in gate_step["run"].replace('"$CONFORMANCE"', "conformance")
    # Run the steps after the gate as GitHub would, on a gate's output made here.
    out = tmp_path / "gate-out"
    gate = full_gate()
    write_gate_reports(out, gate)
    (out / "gate.json").write_text(json.dumps(gate))
    summary = tmp_path / "summary.md"
    env = {**os.environ, **workflow["jobs"]["gate"]["env"], "GATE_OUT": str(out), "GITHUB_STEP_SUMMARY": str(summary),
           "PYTHON": sys.executable, "PYTHONPATH": str(REPO), "GATE_EXIT_CODE": "1"}
    outputs = {}
    for step in steps[steps.index(gate_step) + 1:]:
        if "run" in step:
            done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
            outputs[step["name"]] = done
    assert summary.read_text() == (out / "summary.md").read_text()  # the job summary, not the whole report
    annotations = next(done for name, done in outputs.items() if "nnotation" in name)
    assert annotations.stdout.splitlines() == gate_annotations.annotations(gate)
    verdict = next(done for name, done in outputs.items() if "erdict" in name)
    assert verdict.returncode == 1
