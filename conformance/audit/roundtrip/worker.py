"""The round trip of one checkpoint in a child process, bounded in time and memory: its chat template
(Jinja) and its regexes are untrusted, and a search can be expensive.

`bounded_roundtrip(subject, ...)` starts `python -c "...serve()"`, sends the job as JSON on stdin and
reads the result as JSON from stdout; past `timeout` the child is killed and the result says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from conformance.audit.roundtrip.cuts import NO_TOKENIZER, TokenizerUnavailable, TokenSplitter, load_token_splitter
from conformance.audit.roundtrip.roundtrip import RoundTripResult, run_roundtrip
from conformance.formats.turn_text import RenderError, Subject, render, render_turn
from conformance.util.package_paths import SOURCE_ROOT

TIMEOUT_S = 300.0
MEMORY_BYTES = 2 * 1024 * 1024 * 1024


def bounded_roundtrip(subject: Subject, examples: int, seed: int, database: Path | None = None,
                      probes: list[dict[str, Any]] | None = None, timeout: float = TIMEOUT_S,
                      tokenizer: Path | str = NO_TOKENIZER) -> RoundTripResult:
    """`run_roundtrip` in a child process; `probes` ({messages, tools, message}) are rendered there too
    and come back as extra matrix inputs (`inputs`), e.g. each shipped case's forced output. `tokenizer`
    is the checkpoint's tokenizer.json (loaded in the child) to cut at tokens, or why there is none."""
    job = {"subject": asdict(subject), "examples": examples, "seed": seed,
           "database": str(database) if database else None, "probes": probes or [],
           "tokenizer": str(tokenizer) if isinstance(tokenizer, Path) else None,
           "no_tokenizer": tokenizer if isinstance(tokenizer, str) else None}
    source_root = str(SOURCE_ROOT)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-c", "from conformance.audit.roundtrip.worker import serve; serve()"],
                              input=json.dumps(job), capture_output=True, text=True, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return RoundTripResult(seed=seed, examples=0, error=f"the round trip took longer than {timeout:g} s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return RoundTripResult(seed=seed, examples=0, error=f"the round trip worker failed: {last}")
    return RoundTripResult(**json.loads(done.stdout))


def render_probe(subject: Subject, probe: dict[str, Any]) -> dict[str, Any] | None:
    """A probe's matrix input: a forced output (`raw`) after the prompt of its request (`messages`), or an
    assistant `message` rendered as the round trip renders it (answering `messages` when given); None when
    the chat template refuses it."""

    try:
        if "raw" in probe:
            prompt, raw = render(subject, probe["messages"], probe["tools"], add_generation_prompt=True), probe["raw"]
        else:
            prompt, raw = render_turn(subject, probe["tools"], probe["message"], probe.get("messages"))
    except RenderError:
        return None
    return {"prompt": prompt, "raw": raw, "tools": probe["tools"], "origin": probe["origin"]}


def job_tokens(job: dict[str, Any]) -> TokenSplitter | str:
    """The job's tokenizer, loaded, or why the round trip cuts no example at tokens."""
    if job["tokenizer"] is None:
        return job["no_tokenizer"]
    try:
        return load_token_splitter(Path(job["tokenizer"]))
    except TokenizerUnavailable as error:
        return str(error)


def serve() -> None:
    """Child side: read one job from stdin, write its RoundTripResult as JSON to stdout."""
    from hypothesis.configuration import set_hypothesis_home_dir

    from conformance.util.limits import limit_memory

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this ends
    limit_memory(MEMORY_BYTES)
    sys.setrecursionlimit(10_000)  # deep JSON nesting is part of the search
    job = json.loads(sys.stdin.read())
    subject = Subject(**job["subject"])
    database = Path(job["database"]) if job["database"] else None
    with tempfile.TemporaryDirectory(prefix="hypothesis-") as scratch:  # hypothesis writes nothing elsewhere
        set_hypothesis_home_dir(database or scratch)
        result = (run_roundtrip(subject, job["examples"], job["seed"], database, job_tokens(job)) if job["examples"] > 0
                  else RoundTripResult(seed=job["seed"], examples=0))
    result.inputs += [rendered for probe in job["probes"] if (rendered := render_probe(subject, probe)) is not None]
    json.dump(asdict(result), sys.stdout, ensure_ascii=True)

