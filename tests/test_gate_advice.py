"""The gate's advice to client owners: each to-do item is one advice for one sort of difference, its
example is a difference of that sort, default advice is given only where it fits, and a difference
no advice fits says so instead of borrowing another's."""

from __future__ import annotations

from typing import Any

from conformance.report.gate import actions, html, markdown, view
from tests.gate_samples import full_gate

LABELS: dict[view.Side, str] = {"baseline": "legacy", "candidate": "hf"}
PLAIN_ANSWERS = {"reason": "hf splits reasoning at the template's region", "source": "expect.yaml:50",
                 "client_action": "Plain answers now arrive in content; read reasoning only from `reasoning`."}


def _difference(case_id: str, field: str | None, baseline: Any, candidate: Any, kind: str = "message",
                mode: str = "non-stream", acknowledged: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": kind, "case_id": case_id, "mode": mode, "features": ["f"], "description": "", "field": field,
            "baseline": baseline, "candidate": candidate, "acknowledged": acknowledged, "excerpt": {},
            "summary": f"{field}: {baseline!r} under the baseline, {candidate!r} under the candidate"}


def _text(member: dict[str, Any]) -> str:
    return "".join(actions.client_action(member, LABELS))


def _gate(differences: list[dict[str, Any]]) -> dict[str, Any]:
    gate = full_gate()
    gate["differences"] = differences
    gate["behaviours"] = [{"case_id": d["case_id"], "features": ["f"], "description": "", "baseline": "", "candidate": "",
                           "changed": True, "kinds": [d["kind"]], "acknowledged": False} for d in differences]
    return gate


def test_casting_advice_only_for_arguments_that_were_cast() -> None:
    cast = _difference("cast", "tool_calls[0].arguments", {"json": {"days": "5", "on": "true", "o": '{"a": [1]}'}},
                       {"json": {"days": 5, "on": True, "o": {"a": [1]}}})
    as_json_string = _difference("whole", "tool_calls[0].arguments", {"json": '{"city": "Paris"}'},
                                 {"json": {"city": "Paris"}})
    lost_think = _difference("think", "tool_calls[0].arguments", {"json": {"city": "<think>x"}},
                             {"json": {"city": "<think>x</think>"}})
    broken = _difference("broken", "tool_calls[0].arguments", {"raw": '{"city": "A"'}, {"json": {"city": "B"}})
    for member in (cast, as_json_string):
        assert actions.sort_of(member, LABELS) == "arguments cast to the declared types"
        assert "values may arrive cast" in _text(member)
    for member in (lost_think, broken):  # a changed string is not a cast: no casting advice for a lost </think>
        assert actions.sort_of(member, LABELS) == "other argument values"
        assert _text(member).startswith(actions.NO_ADVICE) and "cast" not in _text(member)


def test_differences_no_advice_fits_say_so() -> None:
    unfitting = [
        _difference("name", "tool_calls[0].name", "get_weather", "get_time"),
        _difference("role", "role_chunks", [1], [1, 2], kind="stream_shape", mode="stream"),
        _difference("cors", "preflight.headers.access-control-allow-origin", None, "*"),
        _difference("new", "something_new", 1, 2, kind="a_kind_from_a_newer_suite"),
    ]
    for member in unfitting:
        assert _text(member).startswith(actions.NO_ADVICE), member["case_id"]
    # ...while the sorts that have advice get it (one of each kind the suite records).
    for member in full_gate()["differences"]:
        assert not _text(member).startswith(actions.NO_ADVICE), member["case_id"]


def test_each_to_do_item_is_one_sort_and_its_example_is_of_that_sort() -> None:
    """One expectation's advice covering two sorts of reasoning change makes two items, each with an
    example of its own sort; differences of several kinds never share an item."""
    differences = [
        # listed first, as in case-file order: under one advice, it once illustrated "plain answers now in content"
        _difference("closing-delimiter-in-argument", "reasoning", None, '"}}\n</tool_call>', acknowledged=PLAIN_ANSWERS),
        _difference("content-only", "reasoning", "Hello", None, acknowledged=PLAIN_ANSWERS),
        _difference("content-only-with-tools", "reasoning", "Hi", None, acknowledged=PLAIN_ANSWERS),
        _difference("think-delimiters-in-argument", "tool_calls[0].arguments", {"json": {"city": "<think>x"}},
                    {"json": {"city": "<think>x</think>"}}),
        _difference("string-values-cast", "tool_calls[0].arguments", {"json": {"days": "5"}}, {"json": {"days": 5}}),
        _difference("string-values-cast-2", "tool_calls[0].arguments", {"json": {"n": "2.5"}}, {"json": {"n": 2.5}}),
        _difference("unclosed", "finish_reason", "tool_calls", "stop", kind="finish_reason"),
        _difference("malformed", "finish_reason", "stop", "tool_calls", kind="finish_reason"),
    ]
    items = actions.to_do(view.difference_groups(_gate(differences)), LABELS)
    by_title = {item.title: item for item in items}
    moved_out = by_title["parsed message differs: no reasoning where there was some"]
    appeared = by_title["parsed message differs: reasoning where there was none"]
    assert [g.case_id for g in moved_out.rows] == ["content-only", "content-only-with-tools"]
    assert [g.case_id for g in appeared.rows] == ["closing-delimiter-in-argument"]
    cast = by_title["parsed message differs: arguments cast to the declared types"]
    assert [g.case_id for g in cast.rows] == ["string-values-cast", "string-values-cast-2"]
    other = by_title["parsed message differs: other argument values"]
    assert [g.case_id for g in other.rows] == ["think-delimiters-in-argument"] and other.action[0] == actions.NO_ADVICE
    assert {by_title[f'finish_reason differs: "{a}" became "{b}"'].rows[0].case_id
            for a, b in (("tool_calls", "stop"), ("stop", "tool_calls"))} == {"unclosed", "malformed"}
    # Every item's example (its first entry) is of the item's own sort.
    for item in items:
        group, member = item.entries[0]
        assert actions.sort_of(member, LABELS) == item.sort and group.kind == item.kind
    # The reports show that example: the row of "no reasoning where there was some" illustrates it with content-only.
    report = markdown.render(_gate(differences))
    row = next(line for line in report.splitlines() if "no reasoning where there was some" in line)
    assert "e.g. `content-only`" in row and "closing-delimiter" not in row
    row = next(line for line in report.splitlines() if "other argument values" in line and line.startswith("| "))
    assert "no advice for this kind of difference" in row and "values may arrive cast" not in row
    page = html.render(_gate(differences))
    assert "e.g. <code>string-values-cast</code>" in page and "e.g. <code>content-only</code>" in page
