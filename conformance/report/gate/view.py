"""What every gate report shows, worked out once from a gate dict (see gate.json): the differences
grouped by (case, mode, kind) with their ids, unacknowledged first; what a client must do about each;
the stamp rows of both sides; the timing figures and the CORS meaning in words.

Text for people comes as *segments*: a list of `str` (plain text) and `Code` (shown as code), so each
renderer escapes it its own way and no server string is ever parsed as markup."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from conformance.record.case_model import MODES, mode_order
from conformance.report.stamp import stamp_lines
from conformance.util.markdown_text import visible as printable

Side = Literal["baseline", "candidate"]
SIDES: tuple[Side, ...] = ("baseline", "candidate")
RowState = Literal["unchanged", "acknowledged", "unacknowledged"]


class Code(str):
    """A segment shown as code (a value, a flag, a field name)."""


Segments = list[str]  # items are plain `str` or `Code`

KIND_TITLES = {
    "request_refused": "request newly refused",
    "request_accepted": "request newly accepted",
    "message": "parsed message differs",
    "reasoning_field": "reasoning field name differs",
    "stream_shape": "stream shape differs",
    "finish_reason": "finish_reason differs",
    "usage": "usage differs",
    "client_replay": "openai-python rebuilds the message differently",
    "stream_granularity": "several tokens per delta break the stream",
    "multi_turn": "the second turn changes",
    "outcome": "case outcome differs",
}
METRIC_TITLES = {
    "first_byte": "first byte",
    "first_reasoning": "first reasoning delta",
    "first_content": "first content delta",
    "first_tool_name": "first tool name visible",
    "tool_call_complete": "tool call complete",
}
VERDICT_ICONS = {"pass": "✅", "fail": "❌", "error": "💥"}

def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(value: Any, limit: int = 300) -> str:
    """A one-line display of `value`: strings as they are, anything else as compact JSON."""
    text = value if isinstance(value, str) else json_text(value)
    return shorten(printable(text), limit)


def json_text(value: Any, limit: int | None = None) -> str:
    """Compact JSON of `value` (strings quoted, so `"5"` and `5` stay apart), control characters escaped."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    text = printable(text)
    return shorten(text, limit) if limit else text


def code_segments(text: str) -> Segments:
    """Free text from an expectations file: `backticked` parts become Code, the rest stays plain."""
    parts = printable(text).split("`")
    return [Code(p) if i % 2 else p for i, p in enumerate(parts) if p]


def anchor(prefix: str, *parts: str) -> str:
    """An HTML id / URL fragment: `prefix-part-part`, anything outside [A-Za-z0-9._-] turned into `_`."""
    return "-".join([prefix, *(re.sub(r"[^A-Za-z0-9._-]", "_", str(p)) for p in parts)])


def labels(gate: Mapping[str, Any]) -> dict[Side, str]:
    sides = gate.get("sides") or {}
    return {side: plain((sides.get(side) or {}).get("label") or side, 60) for side in SIDES}


@dataclass(frozen=True)
class DifferenceGroup:
    """The differences of one case, mode and kind (one JUnit testcase, one `#diff-...` id)."""

    case_id: str
    mode: str
    kind: str
    anchor: str
    members: tuple[Mapping[str, Any], ...]

    @property
    def acknowledged(self) -> bool:
        return all(m.get("acknowledged") for m in self.members)

    @property
    def title(self) -> str:
        return KIND_TITLES.get(self.kind, self.kind)

    @property
    def summary(self) -> str:
        return "; ".join(dict.fromkeys(plain(m.get("summary") or self.title, 400) for m in self.members))

    @property
    def features(self) -> list[str]:
        return list(self.members[0].get("features") or [])


def difference_groups(gate: Mapping[str, Any]) -> list[DifferenceGroup]:
    """Differences grouped by (case, mode, kind): unacknowledged first, then in case-file order."""
    order = {str(b.get("case_id")): i for i, b in enumerate(gate.get("behaviours") or [])}
    grouped: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for difference in gate.get("differences") or []:
        key = (str(difference.get("case_id")), str(difference.get("mode")), str(difference.get("kind")))
        grouped.setdefault(key, []).append(difference)
    groups, used = [], set()
    for (case_id, mode, kind), members in grouped.items():
        ident = anchor("diff", case_id, mode, kind)
        while ident in used:  # two keys that read alike once sanitized
            ident += "_"
        used.add(ident)
        groups.append(DifferenceGroup(case_id, mode, kind, ident, tuple(members)))
    return sorted(groups, key=lambda g: (g.acknowledged, order.get(g.case_id, len(order)), g.mode, g.kind))


def shown_in_full(groups: Sequence[DifferenceGroup], per_kind: int) -> set[str]:
    """Anchors of the groups a size-capped view shows in full: the first `per_kind` of each kind, in
    `difference_groups` order (unacknowledged first)."""
    seen: Counter[str] = Counter()
    chosen = set()
    for group in groups:
        seen[group.kind] += 1
        if seen[group.kind] <= per_kind:
            chosen.add(group.anchor)
    return chosen


def groups_by_case(groups: Sequence[DifferenceGroup]) -> dict[str, list[DifferenceGroup]]:
    by_case: dict[str, list[DifferenceGroup]] = {}
    for group in groups:
        by_case.setdefault(group.case_id, []).append(group)
    return by_case


def row_state(behaviour: Mapping[str, Any], case_groups: Sequence[DifferenceGroup]) -> RowState:
    """A behaviour row's state, from its case's differences when it has any (each difference says whether
    it is acknowledged), else from the row's own `changed` / `acknowledged`."""
    if case_groups:
        return "acknowledged" if all(g.acknowledged for g in case_groups) else "unacknowledged"
    if not behaviour.get("changed"):
        return "unchanged"
    return "acknowledged" if behaviour.get("acknowledged") else "unacknowledged"


def behaviours_by_feature(gate: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """Behaviour rows under their first feature (so each case appears once), features in name order."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for behaviour in gate.get("behaviours") or []:
        features = behaviour.get("features") or ["(no feature)"]
        grouped.setdefault(str(features[0]), []).append(behaviour)
    return dict(sorted(grouped.items()))


def all_features(gate: Mapping[str, Any]) -> list[str]:
    return sorted({str(f) for b in gate.get("behaviours") or [] for f in b.get("features") or []})


def verdict(gate: Mapping[str, Any]) -> tuple[str, str, str]:
    """(icon, OUTCOME, the verdict line) as the gate decided it."""
    v = gate.get("verdict") or {}
    outcome = str(v.get("outcome") or "error")
    return VERDICT_ICONS.get(outcome, "💥"), outcome.upper(), plain(v.get("line") or "no verdict recorded", 500)


@dataclass(frozen=True)
class Refusal:
    """A candidate server that refused to start (gate.json's `refused_to_start`): the gate's verdict."""

    server: str  # what to call it ("vLLM")
    message: str  # its own error line
    meaning: Segments  # what that means for the gate, where its log is


def refusal(gate: Mapping[str, Any]) -> Refusal | None:
    """The candidate's refusal to start, shown first by every view (None: it started)."""
    refused = gate.get("refused_to_start")
    if not isinstance(refused, Mapping):
        return None
    meaning: Segments = [
        "Its server exited at start-up with this line, so no case was sent to either server: the candidate does not "
        "run on this checkpoint, and that is the gate's verdict. Its log: ", Code(plain(refused.get("log") or "", 300)),
        "; the flags it was given are under Servers compared."]
    return Refusal(plain(refused.get("server") or "the server", 60), plain(refused.get("message") or "", 2000), meaning)


def stamp_rows(gate: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(label, baseline, candidate) rows: results counts, then the stamp fields either side knows."""
    sides = gate.get("sides") or {}
    stamps = [(sides.get(s) or {}).get("stamp") or {} for s in SIDES]
    shown = [dict(stamp_lines(stamp)) for stamp in stamps]  # a row one side alone has (a launch note): `none` beside
    rows = [("results", *(_counts_text((sides.get(s) or {}).get("summary")) for s in SIDES))]
    for label, _ in stamp_lines({**stamps[0], **{k: v for k, v in stamps[1].items() if v}}):
        b, c = (side.get(label, "none") for side in shown)
        if (b, c) != ("unknown", "unknown") and label != "report time":
            rows.append((label, plain(b, 400), plain(c, 400)))
    return rows


def expectations_sentence(gate: Mapping[str, Any]) -> Segments:
    """Which expectations file acknowledged differences, and why that one (empty for a gate.json without it)."""
    source = gate.get("expectations")
    if not isinstance(source, Mapping):
        return []
    file, note = source.get("file"), plain(source.get("note") or "", 300)
    return ["Expectations: ", *([Code(plain(file, 200))] if file else ["none"]), *([f" ({note})"] if note else []), "."]


def _counts_text(summary: Mapping[str, Any] | None) -> str:
    if not summary:
        return "unknown"
    counts = summary.get("counts") or {}
    total = f"{summary.get('total', '?')} results"
    return total + ": " + ", ".join(f"{n} {o}" for o, n in counts.items()) if counts else total


def unwrapped(value: Any) -> Any:
    """A recorded value as a person reads it: tool-call arguments without their `{"json": ...}` wrapper
    (`{"raw": ...}`, arguments that are not JSON, stays as it is)."""
    if isinstance(value, Mapping):
        if len(value) == 1 and "json" in value:
            return unwrapped(value["json"])
        return {k: unwrapped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrapped(v) for v in value]
    return value


def difference_values(member: Mapping[str, Any]) -> tuple[str, str]:
    """Both sides' values of a difference as one-line JSON."""
    return json_text(unwrapped(member.get("baseline")), 300), json_text(unwrapped(member.get("candidate")), 300)


def excerpt(member: Mapping[str, Any]) -> dict[str, str | None]:
    """The request and both answers, one line each (None where the gate recorded none)."""
    found = member.get("excerpt") or {}
    request = found.get("request")
    return {
        "request": None if request is None else plain(request, 400),
        "baseline": None if found.get("baseline") is None else plain(found["baseline"], 400),
        "candidate": None if found.get("candidate") is None else plain(found["candidate"], 400),
    }


def what_differs(member: Mapping[str, Any]) -> tuple[str | None, str]:
    """(the field, unless the summary already starts with its name; the one-line summary)."""
    field, summary = member.get("field"), plain(member.get("summary") or "", 400)
    if not field or summary.lower().startswith((str(field).lower(), str(field).replace("_", " ").lower())):
        return None, summary
    return str(field), summary


def group_excerpts(group: DifferenceGroup) -> list[dict[str, str | None]]:
    """The distinct excerpts of a row's differences (one, in practice: same case, same mode)."""
    found = [excerpt(m) for m in group.members]
    return [e for i, e in enumerate(found) if e not in found[:i] and any(v is not None for v in e.values())]


UNFORCED_MEANING = ("the model's own output, not the forced text (the server replaced the forcing, e.g. with its own "
                    "grammar), so not what its parser makes of the case's output")


def modes_named(modes: Iterable[str]) -> str:
    """A case's modes in a row: one mode as it is, the two plain ones as `both modes`, else listed in order."""
    distinct = sorted(set(modes), key=mode_order)
    if len(distinct) == 1:
        return distinct[0]
    return "both modes" if distinct == list(MODES) else ", ".join(distinct)


def unforced_modes(behaviour: Mapping[str, Any], side: Side) -> str | None:
    """The modes (`modes_named`) in which that side's answer to the case was not the forced text (None: none)."""
    modes = (behaviour.get("unforced") or {}).get(side) or []
    return modes_named(modes) if modes else None


def unforced_reason(member: Mapping[str, Any], side: Side) -> str | None:
    """Why that side's answer in this difference's case and mode was not the forced text (None: it was)."""
    reason = ((member.get("excerpt") or {}).get("unforced") or {}).get(side)
    return plain(reason, 300) if reason else None


def unforced_sides(member: Mapping[str, Any]) -> list[Side]:
    return [side for side in SIDES if unforced_reason(member, side)]


def acknowledgement(member: Mapping[str, Any]) -> dict[str, str] | None:
    ack = member.get("acknowledged")
    if not ack:
        return None
    return {key: plain(ack.get(key), 400) for key in ("reason", "reference", "source") if ack.get(key)}


# ---- timing ------------------------------------------------------------------------------------


def seconds(value: Any) -> str:
    """A duration for people: `12 ms`, `1.20 s`, `-3 ms`; `n/a` when not measured."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "n/a"
    return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"


def delay_phrase(delay: float) -> str:
    """`56 ms later`, `10 ms earlier` or `at the same time` for a candidate-minus-baseline delay."""
    if round(delay * 1000) == 0:
        return "at the same time"
    return f"{seconds(abs(delay))} {'later' if delay > 0 else 'earlier'}"


def _stats_text(stats: Any) -> str:
    if not isinstance(stats, Mapping) or not stats.get("n"):
        return "not seen"
    return f"{seconds(stats.get('p50'))} / {seconds(stats.get('p90'))} / {seconds(stats.get('max'))} (n={stats['n']})"


def timing_rows(gate: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, baseline p50/p90/max, candidate p50/p90/max) per metric."""
    timing = gate.get("timing") or {}
    summary = timing.get("summary") or {}
    return [(METRIC_TITLES.get(str(m), str(m)), *(_stats_text((summary.get(s) or {}).get(m)) for s in SIDES))
            for m in timing.get("metrics") or []]


def timing_sentence(gate: Mapping[str, Any]) -> Segments:
    """How much later (or earlier) the first tool name becomes visible under the candidate."""
    side_labels = labels(gate)
    delay = ((gate.get("timing") or {}).get("summary") or {}).get("first_tool_name_delay") or {}
    if not delay.get("n") or not isinstance(delay.get("p50"), (int, float)):
        return ["No streamed case showed a tool name under both servers, so the delay of the first visible tool "
                "name was not measured."]
    phrase = delay_phrase(delay["p50"])
    figures = [f"{delay_phrase(delay[q])} at {name}" for q, name in (("p90", "p90"), ("max", "the most"))
               if isinstance(delay.get(q), (int, float))]
    later = any(isinstance(delay.get(q), (int, float)) and round(delay[q] * 1000) > 0 for q in ("p50", "p90"))
    return ["Under ", Code(side_labels["candidate"]), " the first tool name becomes visible ", phrase,
            " as under " if phrase == "at the same time" else " than under ", Code(side_labels["baseline"]),
            f" at the median of {delay['n']} streamed case runs", *([" (", ", ".join(figures), ")"] if figures else []),
            ".", *([" A client that shows the tool being called as soon as its name streams shows it that much later "
                    "in those runs."] if later else [])]


def _lines_text(stats: Any) -> str:
    if not isinstance(stats, Mapping) or not stats.get("n"):
        return "not seen"
    return f"{stats.get('p50'):g} / {stats.get('p90'):g} / {stats.get('max'):g} (n={stats['n']})"


def _tool_name_lines(gate: Mapping[str, Any]) -> Mapping[str, Any]:
    found = ((gate.get("timing") or {}).get("summary") or {}).get("tool_name_lines")
    return found if isinstance(found, Mapping) else {}


def tool_name_line_rows(gate: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, baseline, candidate) median / p90 / max: the data line the first tool name appears in, and
    the stream's length in data lines, over the streams where both sides showed a tool name."""
    lines = _tool_name_lines(gate)
    if not lines:
        return []
    return [(what, *(_lines_text((lines.get(side) or {}).get(key)) for side in SIDES))
            for what, key in (("data line of the first tool name", "first_tool_name"),
                              ("data lines in the stream", "data_lines"))]


def _median(stats: Any) -> float | None:
    ok = isinstance(stats, Mapping) and stats.get("n") and isinstance(stats.get("p50"), (int, float))
    return float(stats["p50"]) if ok else None


def structure_sentence(gate: Mapping[str, Any]) -> Segments:
    """Where each server's first tool name appears in its stream (the structure, which no machine's load
    changes), and how many data lines later under the candidate."""
    side_labels, lines = labels(gate), _tool_name_lines(gate)
    at = {side: (_median((lines.get(side) or {}).get("first_tool_name")),
                 _median((lines.get(side) or {}).get("data_lines"))) for side in SIDES}
    if any(line is None or length is None for line, length in at.values()):
        return ["No streamed case showed a tool name under both servers (or this gate.json predates the count), so "
                "where the name first appears was not compared."]
    n = (lines.get("baseline") or {}).get("first_tool_name", {}).get("n")
    where = [part for side in SIDES for part in (
        " at data line ", f"{at[side][0]:g} of {at[side][1]:g} under ", Code(side_labels[side]),
        " and" if side == "baseline" else " (medians)")]
    delay = _median(((gate.get("timing") or {}).get("summary") or {}).get("first_tool_name_line_delay"))
    shift = ([": ", f"{abs(delay):g} data lines {'later' if delay > 0 else 'earlier'} under ",
              Code(side_labels["candidate"]), " at the median of the per-case differences"] if delay else
             [": in the same data line at the median of the per-case differences"] if delay == 0 else [])
    return ["Structure (how each server cuts its stream, the same on any machine): in the ", str(n),
            " streamed case runs where both servers showed a tool name, it first appears", *where, *shift,
            ". Each data line carries about one token, so with a real model the name appears that many tokens' "
            "generation time later."]


def timing_caveat(gate: Mapping[str, Any]) -> Segments:
    """What the seconds can and cannot show, and whether they contradict the structure here."""
    summary = (gate.get("timing") or {}).get("summary") or {}
    seconds_delay, lines_delay = _median(summary.get("first_tool_name_delay")), _median(summary.get("first_tool_name_line_delay"))
    caveat: Segments = [
        "The timings below are wall-clock arrival times of these requests on the machine that ran the gate. With "
        "forced outputs of a few dozen tokens on a small checkpoint, and often a shared CPU, a token takes about as "
        "long as the scheduling noise: the seconds can show a stall or a server slower throughout, not how much later "
        "a real model's tool name appears (that is the structure above)."]
    if seconds_delay is not None and lines_delay and round(seconds_delay * 1000) * lines_delay <= 0:
        caveat += [" Here they contradict it: the name appears ", delay_phrase(seconds_delay), " by the clock but ",
                   f"{abs(lines_delay):g} data lines {'later' if lines_delay > 0 else 'earlier'} in the stream; "
                   "the seconds measured noise."]
    return caveat


# ---- browser clients (CORS) --------------------------------------------------------------------


def _headers(side: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in (side.get("headers") or {}).items()}


def cors_rows(cors: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, baseline, candidate): status, each header either side sent (or `absent`), the body."""
    sides = [cors.get(s) or {} for s in SIDES]
    names = sorted({name for side in sides for name in _headers(side)})[:40]
    rows = [("status", *(plain(side.get("status") if side.get("status") is not None else "no answer") for side in sides))]
    for name in names:
        values = [_headers(side).get(name) for side in sides]
        rows.append((name, *("absent" if v is None else plain(v, 200) for v in values)))
    rows.append(("body", *(plain(side.get("body") if side.get("body") is not None else "", 200) for side in sides)))
    return rows


def cors_allows(side: Mapping[str, Any], origin: str) -> bool:
    allowed = _headers(side).get("access-control-allow-origin")
    return side.get("status") == 200 and allowed in (origin, "*")


def cors_meaning(gate: Mapping[str, Any]) -> list[Segments]:
    """One sentence per side on what a browser app on the origin can do, then the remedy if needed."""
    cors = gate.get("cors")
    side_labels = labels(gate)
    if not cors:
        return [["No CORS preflight was sent, so browser access was not checked; run the gate with ",
                 Code("--origin ORIGIN"), " to check it."]]
    raw_origin = str(cors.get("origin") or gate.get("origin") or "")
    origin = plain(raw_origin, 200)
    sentences: list[Segments] = []
    for side in SIDES:
        answer = cors.get(side) or {}
        if cors_allows(answer, raw_origin):
            sentences.append(["A browser app on ", Code(origin), " may call ", Code(side_labels[side]), " directly."])
        else:
            sentences.append(["A browser app on ", Code(origin), " cannot call ", Code(side_labels[side]),
                              " directly: its preflight got HTTP ", Code(plain(answer.get("status"))), " without a matching ",
                              Code("Access-Control-Allow-Origin"), "."])
    if not cors_allows(cors.get("candidate") or {}, raw_origin):  # what to do after the switch
        advice = ((gate.get("sides") or {}).get("candidate") or {}).get("cors_advice")
        sentences.append(code_segments(shorten(str(advice), 600)) if advice else
                         ["To let browsers on that origin call ", Code(side_labels["candidate"]), ", allow the origin "
                          "in its CORS settings, or serve the app and the API from one origin behind a proxy."])
    return sentences
