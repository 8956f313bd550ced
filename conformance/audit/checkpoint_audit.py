"""The checkpoint audit: fetched (or local) metadata -> template verdicts -> expectations.

`audit_local(directory)` audits a checkpoint directory on disk; `audit_checkpoints(entries, settings)`
fetches Hub checkpoints concurrently and yields each audit as soon as it is complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.audit import hub
from conformance.audit.checkpoint_list import CheckpointEntry, revision_warning
from conformance.audit.known_formats import known_format_finding
from conformance.audit.predictors.predictor import Predictor
from conformance.audit.predictors.registry import PREDICTOR_BY_KEY, PREDICTORS
from conformance.audit.predictors.vllm_032 import CONFIGURATIONS, StartupVerdict
from conformance.audit.roundtrip.roundtrip import chat_template_of
from conformance.audit.template_rules import Finding, TemplateAnalysis, TemplateAnalysisTimeout, TemplateTooExpensive
from conformance.audit.template_worker import analyze_template
from conformance.formats import checkpoint_files
from conformance.formats.checkpoint_format import record_of_chat_template
from conformance.formats.registry import FORMATS

OK = checkpoint_files.OK
TEMPLATE_TIMEOUT = "template_timeout"
TEMPLATE_TOO_EXPENSIVE = "template_too_expensive"  # the analysis needed more memory than its worker may have
ANALYSIS_ERROR = "analysis_error"  # the analysis worker itself failed: a tool problem
# Statuses that say something about the checkpoint itself (exit 1); any other failure means the audit
# could not look at the checkpoint (Hub, network, cache, access: exit 2).
CHECKPOINT_FAULTS = frozenset({checkpoint_files.INVALID_JSON, checkpoint_files.TOO_LARGE, checkpoint_files.TOO_DEEP,
                               TEMPLATE_TIMEOUT, TEMPLATE_TOO_EXPENSIVE})

# Read on disk only (a bounded prefix, for the round trip's stop tokens); fetched from the Hub it would be tens of MB.
LOCAL_ONLY_FILES = (checkpoint_files.TOKENIZER,)


@dataclass
class CheckpointAudit:
    id: str  # Hub repo id, or the directory for a local checkpoint
    source: str  # "hub" or "local"
    revision: str | None  # as asked (None for local)
    commit: str | None  # resolved commit (None for local or when fetching failed)
    status: str  # OK or a failure kind
    error: str | None = None
    files: list[str] = field(default_factory=list)
    template: TemplateAnalysis | None = None
    expect: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    position: int = 0  # place in the requested order
    startup_error: str | None = None  # vLLM fails reading the files themselves, whatever the flags
    # Offline checks (conformance/audit/offline.py): what they read, and their records for the report.
    tokenizer_config: dict | None = field(default=None, repr=False)
    file_paths: dict[str, Path] = field(default_factory=dict, repr=False)
    roundtrip: dict | None = None
    implementations: dict | None = None
    offline_findings: list[Finding] = field(default_factory=list)
    model_type: str | None = None  # config.json's (None: no config.json, or none in it)
    known_format: str | None = None  # the shipped format whose chat template it has (audit/known_formats.py)

    def prediction(self, predictor: Predictor) -> Mapping[str, Any] | None:
        """A predictor's verdicts (None: the template could not be analysed). Files that cannot be read fail
        every start-up configuration alike; they say nothing certain about a frontend's own reader."""
        if self.template is not None:
            return self.template.predictions[predictor.key]
        if predictor.kind == "startup" and self.startup_error is not None:
            return {name: StartupVerdict(starts=False, error=self.startup_error) for name in CONFIGURATIONS}
        return None

    def __getattr__(self, key: str) -> Mapping[str, Any] | None:
        """A prediction by its key: `audit.vllm_0_32`."""
        if key in PREDICTOR_BY_KEY:
            return self.prediction(PREDICTOR_BY_KEY[key])
        raise AttributeError(key)

    @property
    def findings(self) -> tuple[Finding, ...]:
        known = ()
        if self.known_format is not None and self.needs_template:  # something to do about it
            known = (known_format_finding(FORMATS[self.known_format]),)
        return (self.template.findings if self.template is not None else ()) + known + tuple(self.offline_findings)

    @property
    def needs_template(self) -> bool:
        """Whether vLLM 0.32's hf parsers cannot start on its response_template (it has none, or one refused)."""
        verdicts = self.vllm_0_32
        return verdicts is not None and not verdicts["both"].starts

    @property
    def unmet_expectations(self) -> list[str]:
        """One message per `expect` entry and Python release whose prediction does not meet it (or one per
        entry when it cannot be checked). vLLM 0.32's messages name no release, as before 0.33 was predicted."""
        unmet = []
        startup = [predictor for predictor in PREDICTORS if predictor.kind == "startup"]
        for configuration, expected in self.expect.items():
            if self.prediction(startup[0]) is None:
                unmet.append(f"{configuration}: expected {expected}, but the checkpoint could not be audited ({self.status})")
                continue
            for predictor in startup:
                verdict = self.prediction(predictor)[configuration]
                predicted = configuration_outcome(verdict)
                if predicted != expected:
                    unmet.append(f"{configuration}: expected {expected}, {predictor.expect_label}predicted {predicted}"
                                 + (f": {verdict.error}" if verdict.error else ""))
        return unmet


def _analyze(audit: CheckpointAudit, tokenizer_config: dict) -> CheckpointAudit:
    audit.tokenizer_config = tokenizer_config
    if checkpoint_files.MODEL_CONFIG in audit.file_paths:
        try:
            audit.model_type = checkpoint_files.read_model_type(audit.file_paths[checkpoint_files.MODEL_CONFIG])
        except checkpoint_files.FetchError as exc:  # the tokenizer's files still say what they say
            audit.warnings.append(f"{exc}: its model_type is not known")
    try:
        chat_template = chat_template_of(tokenizer_config, audit.file_paths)
    except checkpoint_files.FetchError:  # a chat template file that cannot be read names no format
        chat_template = None
    if (form := record_of_chat_template(chat_template)) is not None:
        audit.known_format = form.name
    try:
        audit.template = analyze_template(tokenizer_config, model_type=audit.model_type)
    except TemplateAnalysisTimeout as exc:
        audit.status, audit.error = TEMPLATE_TIMEOUT, str(exc)
    except TemplateTooExpensive as exc:
        audit.status, audit.error = TEMPLATE_TOO_EXPENSIVE, str(exc)
    except RuntimeError as exc:
        audit.status, audit.error = ANALYSIS_ERROR, str(exc)
    return audit


def audit_local(directory: Path) -> CheckpointAudit:
    """Audit a checkpoint directory on disk (e.g. a model about to be uploaded)."""
    directory = Path(directory)
    audit = CheckpointAudit(id=str(directory), source="local", revision=None, commit=None, status=OK)
    try:
        # what exists, of any kind: reading refuses a FIFO or a directory by name (it is not "missing")
        audit.files = [name for name in (checkpoint_files.TOKENIZER_CONFIG, *hub.OPTIONAL_FILES, *LOCAL_ONLY_FILES)
                       if (directory / name).exists() or (directory / name).is_symlink()]
    except OSError as exc:  # a directory that cannot be listed
        audit.status, audit.error = checkpoint_files.UNREADABLE, f"{directory}: cannot read: {exc.strerror or exc}"
        return audit
    config_path = directory / checkpoint_files.TOKENIZER_CONFIG
    if checkpoint_files.TOKENIZER_CONFIG not in audit.files:
        audit.status, audit.error = checkpoint_files.NOT_FOUND, f"{config_path}: no such file"
        return audit
    try:
        audit.file_paths = {name: directory / name for name in audit.files}
        tokenizer_config = hub.read_checkpoint_files(audit.file_paths)
    except checkpoint_files.FetchError as exc:
        audit.status, audit.error, audit.startup_error = exc.kind, f"{directory}/{exc}", exc.startup_error
        return audit
    return _analyze(audit, tokenizer_config)


def _audit_fetched(fetched: hub.FetchedCheckpoint, entry: CheckpointEntry, position: int) -> CheckpointAudit:
    audit = CheckpointAudit(
        id=entry.repo, source="hub", revision=entry.revision, commit=fetched.commit, status=fetched.status,
        error=fetched.error, files=list(fetched.files), expect=dict(entry.expect), position=position,
        startup_error=fetched.startup_error, file_paths=dict(fetched.files),
        warnings=[warning] if (warning := revision_warning(entry)) else [],
    )
    if fetched.tokenizer_config is None:
        return audit
    return _analyze(audit, fetched.tokenizer_config)


def audit_checkpoints(
    entries: Iterable[CheckpointEntry], settings: hub.HubSettings, workers: int = hub.DEFAULT_WORKERS
) -> Iterator[CheckpointAudit]:
    """Audit Hub checkpoints, one audit per entry, yielded in completion order. Fetching is concurrent, and
    a repo@revision listed more than once (say with different `expect`) is fetched once."""
    entries = list(entries)
    positions: dict[tuple[str, str], list[int]] = {}
    for index, entry in enumerate(entries):
        positions.setdefault((entry.repo, entry.revision), []).append(index)
    for fetched in hub.fetch_many(list(positions), settings, workers=workers):
        for position in positions[(fetched.repo, fetched.revision)]:
            yield _audit_fetched(fetched, entries[position], position)


def configuration_outcome(verdict: StartupVerdict) -> str:
    return "starts" if verdict.starts else "fails"


__all__ = ["CheckpointAudit", "audit_checkpoints", "audit_local", "configuration_outcome"]
