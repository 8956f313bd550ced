"""report.md as a GitHub-flavoured renderer reads it (markdown-it-py: CommonMark plus GFM tables and
strikethrough): values come out verbatim as code, text verbatim as text, and the file stays small
(fast tier)."""

from __future__ import annotations

import json

from hypothesis import assume, given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from conformance.record.outcomes import Check
from conformance.record.results import CaseResult
from conformance.record.stamp import make_stamp
from conformance.report.audit import report as audit_report
from conformance.report.run import markdown
from conformance.util.markdown_text import code_span, visible
from tests.engine_helpers import STAMP

RENDERER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
HOSTILE_CHARACTERS = "`|\\\"'<>&*_~[]()!#\n\r\t\x1b\x7f\u2028 "
hostile_text = st.text(alphabet=st.sampled_from(HOSTILE_CHARACTERS) | st.characters(), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | hostile_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(hostile_text, children, max_size=3),
    max_leaves=6,
)


def rendered_cells(row: list) -> list[list]:
    """The inline tokens of each body cell of a one-row table, as markdown-it parses it."""
    tokens = RENDERER.parse("\n".join(markdown._table([f"c{i}" for i in range(len(row))], [row])))
    body = tokens[[t.type for t in tokens].index("tbody_open"):]
    return [t.children or [] for t in body if t.type == "inline"]


@given(json_values)
def test_a_value_is_its_json_verbatim_in_one_code_span(value):
    assume(value is not None)  # None is "no value given": an empty cell
    [cell] = rendered_cells([markdown.Value(value)])
    expected = visible(json.dumps(value, ensure_ascii=False))
    if len(expected) > markdown.MAX_CELL:
        return  # cut: covered below
    assert [child.type for child in cell] == ["code_inline"]
    assert cell[0].content == expected


@given(hostile_text)
def test_text_cells_show_the_text_literally(text):
    [cell] = rendered_cells([text])
    assert all(child.type == "text" for child in cell), [child.type for child in cell]
    assert "".join(child.content for child in cell).strip() == visible(text).strip()


def test_a_long_value_is_cut_outside_its_code_span():
    [cell] = rendered_cells([markdown.Value("`" * 1000)])
    assert [child.type for child in cell] == ["code_inline", "text"] and cell[1].content == "…"
    assert cell[0].content.startswith('"```') and len(cell[0].content) == markdown.MAX_CELL - 1


def test_failures_show_expected_and_actual_as_code_and_the_file_stays_small():
    nasty = {"arguments": '{"path": "C:\\\\tmp\\\\a|b", "q": "`rm -rf`"}', "content": "a\nb\x1b[0m\ud800"}
    check = Check("expected_message", "fail", "expectation", "differs " * 100, expected=nasty, actual="</td>|`x`")
    long_value = Check("expected_message", "fail", "expectation", "z" * 900, expected="e" * 900, actual="a" * 900)
    results = [CaseResult(f"case-{i}", "stream", f"profile-{i % 7}", "fail", "x" * 2000,
                          checks=[check if i == 0 else long_value,
                                  Check("client_replay", "fail", "finding", "r" * 900, actual=f"value {i} " * 90)])
               for i in range(3000)]
    skipped = [CaseResult(f"skip-{i}", "stream", "hf", "skip", "y" * 5000) for i in range(3000)]
    text = markdown.render(results + skipped, make_stamp(STAMP.__dict__))
    size = len(text.encode("utf-8"))  # encodes: no lone surrogate left
    assert size <= markdown.MAX_BYTES < 1024 * 1024
    codes = {child.content for token in RENDERER.parse(text) for child in token.children or []
             if child.type == "code_inline"}
    assert {visible(json.dumps(nasty, ensure_ascii=False)), '"</td>|`x`"'} < codes
    assert text.rstrip().endswith("every result is in results.jsonl._")
    *kept, blank, note = text.splitlines()
    assert note.startswith("_Report cut at 256 KiB: the last ") and blank == "" and kept[-1].endswith(" |")


@given(hostile_text)
def test_any_text_is_one_code_span_of_itself(text):
    assume(text != "")
    [child] = RENDERER.parseInline(code_span(visible(text)))[0].children
    assert (child.type, child.content) == ("code_inline", visible(text))


def test_the_audit_reports_error_texts_in_such_code_spans():
    message = "a ``double`` and a `single` backtick"
    [child] = RENDERER.parseInline(audit_report._code(message))[0].children
    assert (child.type, child.content) == ("code_inline", message)
