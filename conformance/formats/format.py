"""A response format as a record: what a checkpoint of one family writes and how its servers read it.

A `Format` holds the family's chat template (None where none is known) and `response_template`, its
delimiter tokens (each one token, added and not special, so they stay in decoded text) and special
tokens, its end-of-sequence, padding and stop tokens, the raw output the forcing probe asks for, the
vLLM parser flags (and environment) that serve it as "legacy", and the checkpoint variants the suite
builds of it (each a named edit of the `response_template`). The tiny checkpoint's Qwen3/Hermes record
is code (`qwen3_hermes.py`); every other one is a folder of data (`shipped/<name>/`, read by
`format_files.py`). `conformance.formats.registry` registers them all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Variant:
    """A checkpoint variant: `edit` turns a copy of the format's full response_template into the
    variant's (None: the variant ships no `response_template`)."""

    name: str
    description: str
    edit: Callable[[dict[str, Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class Deviation:
    """A known bug of a server on this format: profile `profile`'s answer to the case `case` judged by the
    format's parse (a format-independent case, or a raw one with `reference: parse`) differs from that parse in
    `modes`, in the `message` fields given (as in cases: reasoning, content, tool_calls) and `finish_reason` if
    given; `link` is where the bug is seen (an issue, the parser's source)."""

    profile: str
    case: str
    modes: tuple[str, ...]
    message: Mapping[str, Any]
    reason: str
    link: str
    # The answer cannot be judged at all (an HTTP 500 in one mode, the call gone in the other): the case is
    # a declared skip for the profile, saying why, instead of a deviating message.
    skip: bool = False
    # The answer's finish_reason where it differs from the parse's (None: the parse's)
    finish_reason: str | None = None


@dataclass(frozen=True)
class StreamBug:
    """A known bug of profile `profile`'s parsers on this format: its stream of `case` sent at the granular
    `modes` (`stream@N`) does not reassemble to its one-token stream's message (`reason`, seen at `link`).
    While the split stays broken the case's failures there are one `known_stream_bug` finding; the day it
    reassembles, the declaration fails as stale."""

    profile: str
    case: str
    modes: tuple[str, ...]
    reason: str
    link: str


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    provenance: str
    chat_template: str | None  # None: no chat template of the family is known
    response_template: Mapping[str, Any]
    delimiter_tokens: tuple[str, ...]  # added, not special: they stay in decoded text
    special_tokens: tuple[str, ...]
    eos_token: str
    pad_token: str
    probe_text: str  # the raw output a forcing probe asks for
    legacy_flags: tuple[str, ...]  # vLLM's hand-written parsers for this format
    variants: tuple[Variant, ...]
    model_type: str = "qwen3"
    stop_tokens: tuple[str, ...] = ()  # the generation config's end tokens (empty: the eos and pad tokens)
    legacy_env: Mapping[str, str] = field(default_factory=dict)  # what the legacy parsers need to force an output
    sample_raw: str | None = None  # an assistant turn in the format: reasoning and two tool calls
    deviations: tuple[Deviation, ...] = ()  # known server bugs on it, judged as strict xfails
    stream_bugs: tuple[StreamBug, ...] = ()  # known bugs at several tokens per delta, judged as strict xfails
    # The checkpoint directory the record was read from (`checkpoint_format`): its templates are untrusted,
    # rendered bounded; None: a shipped record
    checkpoint: str | None = None

    def stream_bug(self, profile: str, case: str, mode: str | None) -> StreamBug | None:
        """The declared stream bug of `profile` on `case` sent in `mode` (None: at any granularity; None: none)."""
        return next((bug for bug in self.stream_bugs if (bug.profile, bug.case) == (profile, case)
                     and (mode is None or mode in bug.modes)), None)

    @property
    def end_tokens(self) -> tuple[str, ...]:
        return self.stop_tokens or (self.eos_token, self.pad_token)

    @property
    def marker_tokens(self) -> tuple[str, ...]:
        """The tokens its turns are written with: its delimiter tokens and the special tokens its sample
        and probe texts use. Each is one token of its checkpoint, so a forced text must bring each one
        back as that token (special tokens a case writes elsewhere, say in content, are not asked to)."""
        written = (self.sample_raw or "") + self.probe_text
        return tuple(dict.fromkeys([*self.delimiter_tokens, *(t for t in self.special_tokens if t in written)]))

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(variant.name for variant in self.variants)

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise ValueError(f"unknown fixture variant {name!r}; choose one of: {', '.join(self.variant_names)}")

    def response_template_for(self, variant: str) -> dict[str, Any] | None:
        """The `response_template` that `variant` ships (None: the key is absent)."""
        return self.variant(variant).edit(copy.deepcopy(dict(self.response_template)))
