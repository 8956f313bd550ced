"""Which of a profile's parser flags to launch on a checkpoint: those the audit predicts its template starts
with. A profile record names the start-up predictor that decides (`Launch.parsers_by_template`, e.g. vLLM 0.32's
for `hf`); the launcher (`conformance.servers`) never reads the audit, the verb that launches asks here first.

A template without a `thinking` field starts `--tool-call-parser hf` but not `--reasoning-parser hf`: `hf` is
then launched with the tool parser only, and says so. When the predictor expects every configuration to be
refused (or cannot tell), the flags stay as recorded: the server's own refusal is then the answer."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.audit.checkpoint_audit import audit_local
from conformance.audit.predictors.registry import PREDICTOR_BY_KEY
from conformance.audit.predictors.vllm_032 import CONFIGURATIONS, StartupVerdict
from conformance.servers.profile import Profile

Option = tuple[str, ...]  # one command-line option with its values: ("--tool-call-parser", "hf")


@dataclass(frozen=True)
class ParserChoice:
    flags: tuple[str, ...] | None = None  # the profile's own flags to launch (None: its record's, unchanged)
    note: str | None = None  # what was left out and why, for the run's stamp (None: nothing was)
    message: str | None = None  # what to tell the user at launch (a note, or a predicted refusal)


def options_of(flags: Sequence[str]) -> list[Option]:
    """`flags` cut into options, each a `--name` with the values that follow it."""
    options: list[list[str]] = []
    for token in flags:
        if token.startswith("--") or not options:
            options.append([token])
        else:
            options[-1].append(token)
    return [tuple(option) for option in options]


def choose(flags: Sequence[str], verdicts: Mapping[str, StartupVerdict], label: str) -> ParserChoice:
    """The largest predicted configuration (`CONFIGURATIONS`) within `flags` that starts; `label` names the
    predicted server in the note ("vLLM 0.32")."""
    own = options_of(flags)
    configurations = {key: options_of(shlex.split(CONFIGURATIONS[key])) for key in verdicts if key in CONFIGURATIONS}
    within = {key: options for key, options in configurations.items() if set(options) <= set(own)}
    starting = [key for key in within if verdicts[key].starts]
    if not starting:
        refused = min(within, key=lambda key: len(within[key]), default=None)
        error = verdicts[refused].error if refused else None
        return ParserChoice(message=f"{label} is predicted to refuse this checkpoint ({error}): launched as recorded, "
                                    "its own refusal is the answer") if refused else ParserChoice()
    kept = set(within[max(starting, key=lambda key: len(within[key]))])
    left_out = [option for option in own if option not in kept and any(option in within[key] for key in within)]
    if not left_out:
        return ParserChoice()
    reasons = dict.fromkeys(str(_refusal(option, within, verdicts)) for option in left_out)
    launched = [token for option in own if option not in left_out for token in option]
    note = (f"{' '.join(' '.join(option) for option in left_out)} left out: {label} refuses it on this checkpoint "
            f"({'; '.join(reasons)}); launched with {' '.join(launched)}")
    return ParserChoice(tuple(launched), note, note)


def _refusal(option: Option, within: Mapping[str, list[Option]], verdicts: Mapping[str, StartupVerdict]) -> str | None:
    """The error of the smallest refused configuration holding `option`."""
    refused = [key for key in within if option in within[key] and not verdicts[key].starts]
    return verdicts[min(refused, key=lambda key: len(within[key]))].error if refused else None


def chosen_parsers(profile: Profile, checkpoint: Path | str | None) -> ParserChoice:
    """The flags to launch `profile` with on `checkpoint` (a local directory; a Hub repo id is launched as
    recorded), as its record's predictor decides."""
    launch = profile.launch
    if launch is None or launch.parsers_by_template is None or checkpoint is None or not Path(checkpoint).is_dir():
        return ParserChoice()
    predictor = PREDICTOR_BY_KEY[launch.parsers_by_template]
    verdicts = audit_local(Path(checkpoint)).prediction(predictor)
    return choose(launch.flags, verdicts, predictor.label) if verdicts is not None else ParserChoice()
