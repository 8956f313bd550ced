"""What a client must do about each difference of a gate: the team's own `client_action` from the
expectations file when there is one, else advice for the sort of difference, worded from the values
that classify it (the refused parameter and status, the field, the direction of a change), never from
the case's payload, so that the same advice for many cases reads as one item of a to-do list.

Every difference is first sorted (`sort_of`: e.g. reasoning that became content, string arguments cast
to their declared types, other argument values); default advice is written for a sort, and a sort with
none says so (`NO_ADVICE`) rather than borrowing the advice of another. A to-do item is one advice for
one sort, so the example it shows is always a difference of the sort its advice is about."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.report.gate.view import (
    KIND_TITLES,
    Code,
    DifferenceGroup,
    Segments,
    Side,
    code_segments,
    json_text,
    modes_named,
    shorten,
    unwrapped,
)
from conformance.util.json_values import json_equal

Labels = Mapping[Side, str]
NO_ADVICE = "no advice for this kind of difference"


@dataclass(frozen=True)
class Advice:
    """The sort of a difference in words ("" when its kind says it all) and the default advice for that
    sort (None: no advice fits)."""

    sort: str
    action: Segments | None


def client_action(member: Mapping[str, Any], labels: Labels) -> Segments:
    """The team's `client_action` when an expectation gives one, else the advice for the difference's
    sort, else `NO_ADVICE` with a pointer to what changed."""
    ack = member.get("acknowledged") or {}
    if ack.get("client_action"):
        return code_segments(shorten(str(ack["client_action"]), 600))
    return default_advice(member, labels).action or [NO_ADVICE, ": read what changed and decide."]


def sort_of(member: Mapping[str, Any], labels: Labels) -> str:
    return default_advice(member, labels).sort


def default_advice(member: Mapping[str, Any], labels: Labels) -> Advice:
    advise = _DEFAULT_ADVICE.get(str(member.get("kind")))
    return advise(member, labels) if advise else Advice("", None)


@dataclass
class ToDo:
    """One piece of advice and every (row, difference) it answers."""

    acknowledged: bool
    kind: str
    sort: str
    action: Segments
    entries: list[tuple[DifferenceGroup, Mapping[str, Any]]] = field(default_factory=list)

    @property
    def title(self) -> str:
        title = KIND_TITLES.get(self.kind, self.kind)
        return f"{title}: {self.sort}" if self.sort else title

    @property
    def rows(self) -> list[DifferenceGroup]:
        """The (case, mode, kind) rows concerned, each once, in order."""
        return list({g.anchor: g for g, _ in self.entries}.values())

    @property
    def features(self) -> list[str]:
        return sorted({f for g in self.rows for f in g.features})

    def where(self) -> list[tuple[str, str, str]]:
        """(case id, its modes concerned (`stream`, `non-stream`, `both modes`, or the modes listed when a
        granular stream is among them), anchor of its first row) per case concerned."""
        by_case: dict[str, list[DifferenceGroup]] = {}
        for row in self.rows:
            by_case.setdefault(row.case_id, []).append(row)
        return [(case_id, modes_named(row.mode for row in rows), rows[0].anchor) for case_id, rows in by_case.items()]


TO_DO_SECTIONS = (
    (False, "Unacknowledged differences", "Not covered by the expectations file: the gate fails on each."),
    (True, "Acknowledged differences", "Known and accepted in the expectations file; clients must still do this."),
)
MAX_ROWS_LISTED = 12  # cases named per to-do item; the rest are counted
# To-do items, most breaking first: a refused request breaks a client outright, a usage count rarely.
KIND_ORDER = {kind: i for i, kind in enumerate(("request_refused", "outcome", "request_accepted", "message",
                                                 "multi_turn", "reasoning_field", "finish_reason", "stream_granularity",
                                                 "stream_shape", "client_replay", "usage"))}


def to_do_heading(title: str, items: Sequence[ToDo]) -> str:
    """`title (N): M things to do`, N counting differences as the verdict does."""
    differences = sum(len(item.entries) for item in items)
    return f"{title} ({differences}): {len(items)} thing{'s' if len(items) != 1 else ''} to do"


def to_do(groups: Sequence[DifferenceGroup], labels: Labels) -> list[ToDo]:
    """The differences as a to-do list: one item per sort of difference and advice (so an expectation
    whose advice covers two sorts makes two items, each with its own example), unacknowledged first."""
    items: dict[tuple[Any, ...], ToDo] = {}
    for group in groups:
        for member in group.members:
            action, sort = client_action(member, labels), sort_of(member, labels)
            acknowledged = bool(member.get("acknowledged"))
            key = (acknowledged, group.kind, sort, tuple((isinstance(s, Code), str(s)) for s in action))
            items.setdefault(key, ToDo(acknowledged, group.kind, sort, action)).entries.append((group, member))
    return sorted(items.values(), key=lambda item: (item.acknowledged, KIND_ORDER.get(item.kind, len(KIND_ORDER))))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _status(value: Any) -> str:
    return str(value.get("status")) if isinstance(value, Mapping) and value.get("status") is not None else "?"


def _sent(member: Mapping[str, Any], param: str) -> Any:
    request = (member.get("excerpt") or {}).get("request")
    return request.get(param) if isinstance(request, Mapping) else None


def _refused(member: Mapping[str, Any], labels: Labels) -> Advice:
    name = str(member.get("field") or "")
    if name.startswith("preflight."):
        return Advice("CORS preflight refused", None)  # the CORS section says what each side allows
    answer = member.get("candidate") if isinstance(member.get("candidate"), Mapping) else {}
    param = str(answer.get("param") or "")
    sent = _sent(member, param)
    refusal: Segments = [" is refused by ", Code(labels["candidate"]), " with HTTP ", Code(_status(answer)),
                         *((" param ", Code(param)) if param else ())]
    if param == "tool_choice" and sent == "required":
        advice: Segments = ["send ", Code('tool_choice: "auto"'), "; ", Code('"required"'), *refusal,
                            ", and a tool call is no longer forced: handle an answer without one"]
    elif param == "tool_choice" and isinstance(sent, Mapping):
        advice = ["send ", Code('tool_choice: "auto"'), " and name the tool in the prompt; a named tool choice",
                  *refusal, ", and the model may then call another tool or none"]
    elif param == "tools":
        advice = ["drop ", Code("strict: true"), " from the tool definitions; a strict tool", *refusal,
                  ", so validate the arguments against the schema yourself"]
    elif param == "parallel_tool_calls" and sent is False:
        advice = ["omit ", Code("parallel_tool_calls"), " (or send ", Code("null"), "); ",
                  Code("parallel_tool_calls: false"), *refusal, ", so keep only the first tool call yourself"]
    elif param:
        advice = ["stop sending ", Code(f"{param}: {json_text(sent, 120)}" if sent is not None else param), *refusal]
    else:
        advice = ["this request", *refusal]
    sort = "refused differently" if name == "error" else ""
    return Advice(sort, [*advice, "; openai-python raises ", Code("openai.BadRequestError"), " from ", Code("create()"),
                         "."])


def _accepted(member: Mapping[str, Any], labels: Labels) -> Advice:
    if str(member.get("field") or "").startswith("preflight."):
        return Advice("CORS preflight newly accepted", None)
    before = member.get("baseline") if isinstance(member.get("baseline"), Mapping) else {}
    param = before.get("param")
    what: Segments = ["a request with ", Code(str(param))] if param else ["this request"]
    return Advice("", [*what, " is now answered by ", Code(labels["candidate"]), " (HTTP ",
                       Code(_status(member.get("candidate"))), ") where ", Code(labels["baseline"]),
                       " refused it with HTTP ", Code(_status(before)), ": code that relied on the refusal (a fallback, "
                       "a feature probe) now gets a normal answer."])


def cast_to_types(base: Any, cand: Any) -> bool:
    """Whether `cand` is `base` with string values read as the JSON they hold (`"5"` as `5`, `"true"` as
    `true`, a JSON string as the object it holds), everything else the same."""
    if isinstance(base, str) and not isinstance(cand, str):
        try:
            return json_equal(json.loads(base), cand)
        except ValueError:
            return False
    if isinstance(base, Mapping) and isinstance(cand, Mapping):
        return base.keys() == cand.keys() and all(cast_to_types(base[key], cand[key]) for key in base)
    if isinstance(base, list) and isinstance(cand, list):
        return len(base) == len(cand) and all(map(cast_to_types, base, cand))
    return json_equal(base, cand)


def _message(member: Mapping[str, Any], labels: Labels) -> Advice:
    name = str(member.get("field") or "message")
    base, cand = member.get("baseline"), member.get("candidate")
    if name.endswith("arguments"):
        if not cast_to_types(unwrapped(base), unwrapped(cand)):
            return Advice("other argument values", None)
        return Advice("arguments cast to the declared types", [
            "parse each tool call's ", Code("function.arguments"), " as JSON and accept the types of the tool's "
            "schema: values may arrive cast (", Code('"5"'), " as ", Code("5"), ", a JSON string as the object it "
            "holds); never compare the raw string."])
    if name == "tool_calls":
        if isinstance(base, list) and isinstance(cand, list) and len(cand) < len(base):
            return Advice("fewer tool calls", [
                Code(labels["candidate"]), " returns fewer tool calls than ", Code(labels["baseline"]), " (it drops "
                "calls it cannot parse completely): handle a turn with fewer calls than tool-call regions, and do "
                "not expect a call with broken arguments."])
        return Advice("more tool calls", [
            Code(labels["candidate"]), " returns tool calls ", Code(labels["baseline"]), " did not (or other ones): "
            "read ", Code("message.tool_calls"), " whatever else the turn holds."])
    if name in ("content", "reasoning"):
        return _text_field(name, base, cand, labels)
    if name.endswith(".name"):
        return Advice("another tool name", None)
    return Advice(name, None)  # CORS preflight headers (the CORS section), anything newer


def _text_field(name: str, base: Any, cand: Any, labels: Labels) -> Advice:
    other = "reasoning" if name == "content" else "content"
    if not (_text(base) or "").strip() and (_text(cand) or "") and not _text(cand).strip():
        return Advice(f"whitespace-only {name}", [
            Code(labels["candidate"]), f" sends whitespace-only {name} where ", Code(labels["baseline"]),
            " sent none or other whitespace: treat whitespace-only ", Code(f"message.{name}"), " as empty."])
    if base is None and cand is not None:
        return Advice(f"{name} where there was none", [
            Code(labels["candidate"]), f" puts text in {name} where ", Code(labels["baseline"]), " had none "
            f"(it was {other}, or dropped): show ", Code(f"message.{name}"), " whatever else the turn holds."])
    if base is not None and cand is None:
        return Advice(f"no {name} where there was some", [
            Code(labels["candidate"]), f" sends no {name} where ", Code(labels["baseline"]), f" did (the text moved "
            f"to {other}, or was raw markup): do not require ", Code(f"message.{name}"), "."])
    if name == "reasoning":
        return Advice("other reasoning text", [
            "the reasoning text differs (a tool-call region may stay reasoning text): do not look for tool calls in ",
            Code("message.reasoning"), ", and do not depend on its exact text."])
    return Advice("other content text", [
        "the content text differs: do not parse tool calls or reasoning out of ", Code("message.content"),
        " yourself, and do not depend on the exact text."])


def _reasoning_field(member: Mapping[str, Any], labels: Labels) -> Advice:
    base, cand = (shorten(str(member.get(s)), 80) for s in ("baseline", "candidate"))
    return Advice("", ["read the reasoning from ", Code(cand), " (", Code(labels["baseline"]), " used ", Code(base),
                       "); reading both keeps a client working with either server."])


def _stream_shape(member: Mapping[str, Any], labels: Labels) -> Advice:
    name = str(member.get("field") or "")
    if name == "finish_chunk":
        return Advice("the finish chunk", [
            "take ", Code("finish_reason"), " from whichever chunk carries it, and keep reading until ",
            Code("[DONE]"), ": the chunk that ends the stream differs."])
    if name == "event_types":
        return Advice("Responses event types", [
            "handle Responses stream events by their ", Code("type"), ", not by their order or number: ",
            Code(labels["candidate"]), " sends other events."])
    accumulate: Segments = [
        "accumulate each tool call's ", Code("function.arguments"), " by concatenating the deltas of its ",
        Code("index"), " and parse them only after ", Code("finish_reason"), "; do not expect the name or the "
        "arguments in a particular chunk or in a particular number of deltas (", Code(labels["candidate"]),
        " may send a whole call in one delta)."]
    if name.startswith(("tool_call_streaming", "tool_call_deltas")):
        return Advice("how tool-call deltas are cut", accumulate)
    if name.startswith("first_name_chunk"):
        return Advice("the chunk where a call's name first appears", accumulate)
    return Advice(name.replace("_", " "), None)  # role chunks, anything newer


def _stream_granularity(member: Mapping[str, Any], labels: Labels) -> Advice:
    cand = member.get("candidate") if isinstance(member.get("candidate"), Mapping) else {}
    who = "candidate" if cand.get("outcome") == "fail" else "baseline"
    return Advice(f"several tokens per delta break {labels[who]}'s stream",
                  ["under ", Code(labels[who]), " a stream that delivers several tokens per delta (speculative "
                   "decoding, ", Code("--stream-interval"), ", a busy batch) does not add up to the message its "
                   "one-token stream makes: a client reading it loses or misreads text at the chunk named; keep ",
                   Code(labels[who]), " at one token per delta, or use the non-streaming answer for tool calls."])


def _multi_turn(member: Mapping[str, Any], labels: Labels) -> Advice:
    if member.get("field") == "prompt":
        return Advice("turn 2's prompt renders differently", [
            "a tool loop that sends the assistant message back as the client named in the mode does shows the model "
            "another prompt under ", Code(labels["candidate"]), " (see what changed: the text where the two parted); "
            "send back what the model wrote (", Code("content: null"), " where it wrote none, the reasoning under "
            "the field the server reads) or check the candidate's turn-2 answers."])
    return Advice("turn 2 is refused or accepted differently", [
        "the second request of a tool loop, as the client named in the mode rebuilds it, gets another status under ",
        Code(labels["candidate"]), ": change what the client sends back before switching (see the error)."])


def _finish_reason(member: Mapping[str, Any], labels: Labels) -> Advice:
    base, cand = json_text(member.get("baseline"), 40), json_text(member.get("candidate"), 40)
    return Advice(f"{base} became {cand}", [
        "handle ", Code(f"finish_reason: {cand}"), " where ", Code(labels["baseline"]), " sent ", Code(base),
        "; decide on tool calls from ", Code("message.tool_calls"), ", not from ", Code("finish_reason"), " alone."])


def _usage(member: Mapping[str, Any], labels: Labels) -> Advice:
    name = str(member.get("field") or "usage")
    return Advice(name, ["do not depend on ", Code(name), ": ", Code(labels["candidate"]),
                         " counts it differently (see what changed)."])


def _client_replay(member: Mapping[str, Any], labels: Labels) -> Advice:
    outcomes = {side: (member.get(side) or {}).get("outcome") if isinstance(member.get(side), Mapping) else None
                for side in ("baseline", "candidate")}
    helper: Segments = ["openai-python's stream accumulator (", Code("client.chat.completions.stream()"), ", ",
                        Code("ChatCompletionStreamState"), ")"]
    if outcomes == {"baseline": "fail", "candidate": "pass"}:
        return Advice("now the same message", [
            "under ", Code(labels["candidate"]), " ", *helper, " rebuilds the same message as the chunks (under ",
            Code(labels["baseline"]), " it did not): a workaround for that can go."])
    return Advice("", ["if you use ", *helper, ", check its final message under ", Code(labels["candidate"]),
                       ": it differs from the message the chunks make (see what changed)."])


def _outcome(member: Mapping[str, Any], labels: Labels) -> Advice:
    base, cand = json_text(member.get("baseline"), 80), json_text(member.get("candidate"), 80)
    return Advice(f"{base} became {cand}", [
        "not a client change: the case is ", Code(base), " under ", Code(labels["baseline"]), " and ", Code(cand),
        " under ", Code(labels["candidate"]), "; read the failed checks in the candidate run's ", Code("report.html"),
        " before switching."])


_DEFAULT_ADVICE: dict[str, Callable[[Mapping[str, Any], Labels], Advice]] = {
    "request_refused": _refused,
    "request_accepted": _accepted,
    "message": _message,
    "reasoning_field": _reasoning_field,
    "stream_shape": _stream_shape,
    "finish_reason": _finish_reason,
    "usage": _usage,
    "client_replay": _client_replay,
    "stream_granularity": _stream_granularity,
    "multi_turn": _multi_turn,
    "outcome": _outcome,
}
