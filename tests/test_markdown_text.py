"""The one Markdown escaping every view uses (conformance.util.markdown_text): a server answer full of bidi
controls, zero-width characters and a BOM reaches the run report and the gate's report.md as visible
escapes, never as the raw characters that would reorder or hide what a reader sees (fast tier)."""

from __future__ import annotations

import json

import pytest
from markdown_it import MarkdownIt

from conformance.record.outcomes import Check
from conformance.record.results import CaseResult
from conformance.record.stamp import make_stamp
from conformance.report.gate import markdown as gate_markdown
from conformance.report.run import markdown as run_markdown
from conformance.util.markdown_text import code_span, plain, visible
from tests.engine_helpers import STAMP
from tests.gate_samples import full_gate

RENDERER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
ZERO_WIDTHS = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064"
HIDDEN = BIDI_CONTROLS + ZERO_WIDTHS + "\ufeff"
# A tool call whose text bidi overrides would reorder and zero-widths would split, behind a BOM.
ANSWER = ("\ufeff<tool_call>\u202e{\"name\": \"get_\u200bweather\", \u2066\"arguments\"\u2069: "
          "{\"city\": \"Par\u200dis\u2060\"}}\u202c</tool_call>\u2067\u202a\u202b\u202d\u2068\u200c\u200e\u200f\u061c"
          "\u2061\u2062\u2063\u2064")


def _escape(character: str) -> str:
    return f"\\u{ord(character):04x}"


def _shown(markdown: str) -> tuple[set[str], str]:
    """The code spans and the plain text a GitHub-like renderer shows for `markdown`."""
    children = [child for token in RENDERER.parse(markdown) for child in token.children or []]
    codes = {child.content for child in children if child.type == "code_inline"}
    return codes, "".join(child.content for child in children if child.type == "text")


def _assert_escaped(markdown: str) -> None:
    assert not set(markdown) & set(HIDDEN), sorted(f"U+{ord(c):04X}" for c in set(markdown) & set(HIDDEN))
    for character in HIDDEN:
        assert _escape(character) in markdown, _escape(character)


@pytest.mark.parametrize("character", HIDDEN)
def test_visible_writes_each_bidi_control_zero_width_and_the_bom_as_an_escape(character):
    assert visible(f"a{character}b") == f"a{_escape(character)}b"
    assert visible(f"a{character}b", keep_newlines=True) == f"a{_escape(character)}b"


def test_visible_escapes_controls_separators_and_lone_surrogates_and_keeps_the_rest():
    assert visible("a\nb\rc\td\x1b\x7f\x9f\u2028\u2029\ud800\ufffe") == \
        "a\\nb\\rc\\td\\u001b\\u007f\\u009f\\u2028\\u2029\\ud800\\ufffe"
    assert visible("a\nb\tc\u202e", keep_newlines=True) == "a\nb\\tc\\u202e"
    assert visible("é 中文 😀 \u00a0 عربى") == "é 中文 😀 \u00a0 عربى"


def test_the_answer_is_one_code_span_or_literal_text_of_its_escapes():
    shown = visible(ANSWER)
    _assert_escaped(shown)
    [child] = RENDERER.parseInline(code_span(shown))[0].children
    assert (child.type, child.content) == ("code_inline", shown)
    assert _shown(plain(shown)) == (set(), shown)


@pytest.mark.parametrize("text", [" \u00a0 ", " \u3000a ", " `a` ", "  "])
def test_a_code_span_keeps_the_spaces_around_non_space_whitespace(text):
    [child] = RENDERER.parseInline(code_span(text))[0].children
    assert (child.type, child.content) == ("code_inline", text)


def test_the_run_report_shows_a_bidi_answer_as_escapes():
    check = Check("expected_message", "fail", "expectation", f"content differs: {ANSWER}",
                  expected={"content": "Paris"}, actual={"content": ANSWER})
    result = CaseResult("bidi-answer", "stream", "hf", "fail", f"expected_message: {ANSWER}", checks=[check])
    text = run_markdown.render([result], make_stamp(STAMP.__dict__))
    _assert_escaped(text)
    codes, plain_text = _shown(text)
    assert visible(json.dumps({"content": ANSWER}, ensure_ascii=False)) in codes
    assert f"content differs: {visible(ANSWER)}" in plain_text


def test_the_gate_report_shows_a_bidi_answer_as_escapes():
    gate = full_gate()
    gate["behaviours"][-1]["candidate"] = ANSWER
    gate["differences"][0]["excerpt"]["candidate"] = ANSWER
    gate["verdict"]["line"] = f"1 unacknowledged difference: {ANSWER}"
    text = gate_markdown.render(gate)
    _assert_escaped(text)
    codes, plain_text = _shown(text)
    assert visible(ANSWER) in codes
    assert f"1 unacknowledged difference: {visible(ANSWER)}" in plain_text
