"""The prompt a server rendered for a second turn (`conformance.run.second_turn`), judged against the
same server's rendering of the conversation as the model wrote turn 1.

The server renders three conversations (recorded in `Transcript.prompts`): the request as the client
sent it (`sent`), the reference (turn 1 as the format's parse reads the model's text: its calls with
the arguments the model wrote, its reasoning) and the reference without the reasoning. Sent equal to
the reference: the model sees its own turn. Equal to the reference without reasoning while the chat
template keeps reasoning: the reasoning is lost, the server's fault when the client sent it back (in a
field the server does not read), a finding when the client sent none. A difference only in whitespace, or
in calls the client sent back as the server's turn-1 answer gave them (hf's arguments cast to the schema's
types) is a finding: turn 1's answer is judged in its own mode. Anything else (the client sent the calls
the model wrote, and the prompt still differs) fails: the server renders a turn the model did not write,
shown where the two prompts part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from difflib import SequenceMatcher
from typing import Any

from conformance.record.case_model import ExpectedMessage
from conformance.record.outcomes import ERROR, FAIL, FINDING, PASS, SKIP, Check
from conformance.record.transcript import Transcript
from conformance.util.json_values import json_equal

REASONING_KEYS = ("reasoning", "reasoning_content")
CHECK = "second_turn_prompt"


def check_turn2_prompt(transcript: Transcript, read_fields: tuple[str, ...] | None,
                       written: ExpectedMessage | None = None) -> Check:
    """`read_fields`: where the server reads reasoning from (its profile record; None: not known); `written`:
    turn 1 as the model wrote it, whose calls a faithful client sends back."""
    prompts = transcript.prompts
    if transcript.prompts_unavailable:
        return Check(CHECK, SKIP, reason=f"the server cannot render the conversation, so the prompt is not judged: "
                                         f"{transcript.prompts_unavailable}")
    if transcript.prompts_error or not prompts:
        return Check(CHECK, ERROR, reason=f"the server's rendering of the second turn could not be read: "
                                          f"{transcript.prompts_error or 'not recorded'}")
    sent, reference, bare = prompts["sent"], prompts["reference"], prompts["reference_without_reasoning"]
    fields = reasoning_fields_sent(transcript.request)
    unread = [field for field in fields if read_fields is not None and field not in read_fields]
    # only whitespace apart (a text field sent back with whitespace the model did not write there): a finding
    spaced = "" if sent in (reference, bare) else " (and in whitespace: a text field sent back with whitespace " \
        "the model did not write there)"
    if _whitespace_apart(sent, reference):
        if fields and unread == fields and reference != bare:
            return Check(CHECK, ERROR, reason=f"the server rendered the reasoning sent back as "
                         f"{' and '.join(fields)}, which its profile record says it does not read (it reads "
                         f"{', '.join(read_fields or ())}): the record is stale (this suite's, not the server's fault)")
        if spaced:
            return Check(CHECK, FAIL, FINDING, reason="the prompt the server rendered for the second turn differs from "
                         "the conversation as the model wrote it only in whitespace" + spaced,
                         expected=_around(reference, sent), actual=_around(sent, reference))
        return Check(CHECK, PASS, reason="the server renders turn 1 as the model wrote it")
    if _whitespace_apart(sent, bare):
        if not fields or unread == fields:
            how = (f"sent it back as {' and '.join(fields)}, which the server does not read (it reads "
                   f"{', '.join(read_fields or ())})" if fields else "sent no reasoning back")
            return Check(CHECK, FAIL, FINDING, reason=f"the turn-1 reasoning is not in the prompt: the client {how}, "
                         "and the chat template renders reasoning: the model sees its calls without it" + spaced)
        return Check(CHECK, FAIL, reason=f"the turn-1 reasoning sent back as {' and '.join(fields)} is not in the "
                     "prompt the server rendered, though its chat template renders reasoning" + spaced,
                     expected=_around(reference, sent), actual=_around(sent, reference))
    at = first_difference(reference, sent)
    if written is not None and (changed := _calls_changed(transcript.request, written)):
        return Check(CHECK, FAIL, FINDING, reason=f"the prompt differs from the conversation as the model wrote it "
                     f"from character {at} on: the client sent the calls back as the server's turn-1 answer gave "
                     f"them ({changed}), which the model did not write (that answer is judged in its own mode)",
                     expected=_around(reference, sent), actual=_around(sent, reference))
    return Check(CHECK, FAIL, reason=f"the prompt the server rendered for the second turn is not the conversation "
                 f"as the model wrote it, from character {at} on: the model sees a turn it did not write",
                 expected=_around(reference, sent), actual=_around(sent, reference))


def _calls_changed(request: Mapping[str, Any], written: ExpectedMessage) -> str:
    """How the calls of the request's last assistant message differ from the ones the model wrote, as JSON values
    (name and arguments; "" when they are the same)."""
    assistants = [m for m in request.get("messages") or [] if isinstance(m, Mapping) and m.get("role") == "assistant"]
    sent = assistants[-1].get("tool_calls") if assistants else None
    sent = sent if isinstance(sent, list) else []
    wanted = [(call.name, call.arguments) for call in written.tool_calls]
    got = []
    for call in sent:
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            pass
        got.append((function.get("name"), arguments))
    if len(got) != len(wanted):
        return f"{len(got)} call(s) where it wrote {len(wanted)}"
    return "; ".join(f"call {i}: {json.dumps(g[1], ensure_ascii=False)} where it wrote {json.dumps(w[1], ensure_ascii=False)}"
                     for i, (g, w) in enumerate(zip(got, wanted)) if g[0] != w[0] or not json_equal(g[1], w[1]))


def _whitespace_apart(a: str, b: str) -> bool:
    """Whether `a` and `b` differ only in runs of whitespace that neither split nor join words (more newlines
    before a delimiter, not "New York" against "NewYork")."""
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if a[i1:i2].strip() or b[j1:j2].strip():
            return False
        if not (i2 - i1 and j2 - j1) and _between_words(a, i1, i2) | _between_words(b, j1, j2):
            return False  # whitespace there on one side only, between two word characters
    return True


def _between_words(text: str, start: int, end: int) -> bool:
    return 0 < start and end < len(text) and end > start and (text[start - 1].isalnum() and text[end].isalnum())


def reasoning_fields_sent(request: Mapping[str, Any]) -> list[str]:
    """The reasoning fields of the request's last assistant message that hold text."""
    assistants = [m for m in request.get("messages") or [] if isinstance(m, Mapping) and m.get("role") == "assistant"]
    if not assistants:
        return []
    return [key for key in REASONING_KEYS if isinstance(assistants[-1].get(key), str) and assistants[-1][key]]


def first_difference(a: str, b: str) -> int:
    """The first index where `a` and `b` differ (the shorter one's length when one is the other's prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _around(text: str, other: str, context: int = 60) -> str:
    """`text` around where it parts from `other`."""
    at = first_difference(text, other)
    return ("…" if at > context else "") + text[max(0, at - context):at + context] + \
        ("…" if at + context < len(text) else "")
