"""The run report's page in a real headless Chromium: its script lays every JSON value out as
json.dumps(indent=2) does, lists of plain values on one line, from the compact text the tool writes
(numbers, escapes and key order as recorded), and nothing a server sent becomes markup."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conformance.record.outcomes import Check
from conformance.record.results import CaseResult
from conformance.record.stamp import make_stamp
from conformance.report.run import html
from tests.chromium_cdp import CHROMIUM, Chromium, keep_artifact
from tests.engine_helpers import STAMP, response_transcript, stream_transcript

pytestmark = pytest.mark.skipif(
    not CHROMIUM, reason="chromium is not installed (scripts/bootstrap installs Debian's chromium where apt-get works)")

# Values a server may send: every kind of number json writes (past 2**53, -0.0, NaN, infinities),
# strings with quotes, backslashes, markup and lone surrogates, keys in any order.
scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats()
           | st.text() | st.sampled_from(['"', "\\", "</pre><b>x</b>", "<script>alert(1)</script>", "\ud800", "a, b: c"]))
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


def laid_out(value, level: int = 0) -> str:
    """The layout spelled out: containers indented by two spaces, lists of scalars on one line."""
    pad, end = "  " * (level + 1), "  " * level
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: {laid_out(item, level + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{end}}}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return "[\n" + ",\n".join(pad + laid_out(item, level + 1) for item in value) + f"\n{end}]"
    return json.dumps(value, ensure_ascii=False)


def as_written(text: str) -> str:
    """A text as the page shows it: the page is written with backslashreplace (a lone surrogate a
    server sent becomes its escape), and a NUL or CR, which HTML cannot carry, as its escape."""
    text = text.replace("\x00", "\\u0000").replace("\r", "\\r")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def shown_texts(browser: Chromium, page: Path, selector: str) -> list[str]:
    browser.open(page.as_uri())
    assert browser.evaluate("document.body.dataset.ready") == "yes"  # the script ran to its end
    return browser.evaluate(f"Array.from(document.querySelectorAll({json.dumps(selector)})).map(e => e.textContent)")


@settings(max_examples=15, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=40))
@example(["\x00", "a\r\nb\rc"])  # what an HTML parser drops (NUL) or rewrites (CR)
def test_every_json_value_is_laid_out_as_json_dumps_lays_it_out(browser, tmp_path_factory, values):
    page = tmp_path_factory.mktemp("layout") / "page.html"
    blocks = "".join(html._pre(value) for value in values)  # a str is shown as it is: no layout
    page.write_text(f"<!doctype html><html><body>{blocks}<script>{html.LAYOUT}</script></body></html>",
                    "utf-8", "backslashreplace")
    expected = [as_written(value if isinstance(value, str) else laid_out(value)) for value in values]
    assert shown_texts(browser, page, "pre") == expected


def test_numbers_keys_and_escapes_stay_as_recorded(browser, tmp_path):
    value = {"b": [2**64 + 1, -0.0, math.nan, math.inf, 1e300, 0.1], "1": {"a\"\\": "\u2028</pre>"}, "a": [[]]}
    page = tmp_path / "page.html"
    page.write_text(f"<!doctype html><html><body>{html._pre(value)}<script>{html.LAYOUT}</script></body></html>")
    [shown] = shown_texts(browser, page, "pre")
    assert shown == laid_out(value)
    assert '"b": [18446744073709551617, -0.0, NaN, Infinity, 1e+300, 0.1]' in shown  # JSON.parse would lose these
    assert shown.index('"b"') < shown.index('"1"')  # a JavaScript object would put the key "1" first


def test_a_run_report_shows_requests_streams_and_responses_as_text(browser, tmp_path):
    hostile = "<b>hi</b><script>document.body.dataset.owned = 1</script>"
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "<tool_call>" + hostile},
                            "finish_reason": "stop"}]}]
    stream = stream_transcript(chunks, case_id="one-call", request={"messages": [{"role": "user", "content": hostile}]})
    response = response_transcript({"content": hostile}, "stop", case_id="one-call",
                                    request={"messages": [{"role": "user", "content": hostile}], "stream": False})
    response.response["choices"][0]["token_ids"] = [1, 2, 3]
    check = Check("expected_message", "fail", "expectation", "differs", expected={"content": "x"},
                  actual={"content": hostile})
    results = [CaseResult("one-call", mode, "hf", "fail", "differs", checks=[check]) for mode in ("stream", "non-stream")]
    page = tmp_path / "report.html"
    page.write_text(html.render(results, make_stamp(STAMP.__dict__), [stream, response]), "utf-8")
    shown = shown_texts(browser, page, "pre.json")
    values = [check.expected, check.actual, stream.request, response.request, response.response]
    for value in values:
        assert laid_out(value) in shown
    assert browser.evaluate("document.querySelectorAll('pre b, td b, pre script').length") == 0
    assert browser.evaluate("document.body.dataset.owned") is None
    rows = browser.evaluate("Array.from(document.querySelectorAll('table.raw tr')).map(r => r.textContent)")
    assert any(hostile in row for row in rows) and rows[-1] == f"{stream.sse[-1].t:.3f}s[DONE]"
    assert '"token_ids": [1, 2, 3]' in laid_out(response.response)
    browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    keep_artifact(browser.screenshot(tmp_path / "run-report.png", full_page=True))
    assert escape(hostile) in page.read_text("utf-8")  # written escaped, not only shown as text
