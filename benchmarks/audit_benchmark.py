"""Benchmark: audit N generated checkpoints served by the loopback Hub, cold cache then warm cache.

    .venv/bin/python benchmarks/audit_benchmark.py [--count 200] [--workers 16] [--latency 0.05]

Checkpoints are pinned to their commits, so the warm run must not touch the network (the request count is
printed). `--latency` makes the Hub wait before every answer, which shows that the cold run is limited
by concurrency rather than by fetching one file after another. Targets: warm < 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.audit.checkpoint_audit import audit_checkpoints  # noqa: E402
from conformance.audit.checkpoint_list import CheckpointEntry  # noqa: E402
from conformance.audit.hub import HubSettings  # noqa: E402
from conformance.report.audit.report import AuditReportWriter  # noqa: E402
from tests import hub_server  # noqa: E402
from tests.audit_helpers import BASES, MUTATIONS  # noqa: E402


def generated_tokenizer_config(index: int) -> dict:
    """A different template per checkpoint: the bases, one mutation each, or no metadata at all."""
    base = list(BASES.values())[index % len(BASES)]()
    mutations = sorted(MUTATIONS)
    if index % 5 == 4:
        return {"chat_template": "{{ messages }}", "model_max_length": index}
    if index % 5 in (2, 3):
        template = MUTATIONS[mutations[index % len(mutations)]](copy.deepcopy(base))
        return {"response_template": template, "model_max_length": index}
    return {"response_template": base, "model_max_length": index}


def timed_run(entries: list[CheckpointEntry], settings: HubSettings, workers: int, out: Path) -> tuple[float, int]:
    started = time.perf_counter()
    writer = AuditReportWriter(out / "audit.json", out / "audit.md")
    for audit in audit_checkpoints(entries, settings, workers=workers):
        writer.add(audit)
    report = writer.finish()
    return time.perf_counter() - started, report["summary"]["ok"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the Hub waits before each answer")
    args = parser.parse_args()

    with hub_server.HubServer() as hub, tempfile.TemporaryDirectory() as scratch:
        entries = []
        for index in range(args.count):
            repo = f"bench/model-{index:04d}"
            files = {"tokenizer_config.json": json.dumps(generated_tokenizer_config(index))}
            if index % 2:
                files["chat_template.jinja"] = "{{ messages }}"
            options = {"mode": hub_server.SLOW, "delay_s": args.latency} if args.latency else {}
            entries.append(CheckpointEntry(repo=repo, revision=hub.add_repo(repo, files, **options).commit))
        settings = HubSettings(endpoint=hub.url, cache_dir=str(Path(scratch) / "hub"), offline=False, timeout=30.0)
        out = Path(scratch) / "reports"

        cold, ok = timed_run(entries, settings, args.workers, out)
        cold_requests = len(hub.log)
        hub.clear_log()
        warm, warm_ok = timed_run(entries, settings, args.workers, out)
        print(f"{args.count} checkpoints, {args.workers} workers, Hub latency {args.latency * 1000:.0f} ms per answer")
        print(f"cold cache: {cold:6.2f} s  ({cold_requests} HTTP requests, {ok} audited ok)")
        print(f"warm cache: {warm:6.2f} s  ({len(hub.log)} HTTP requests, {warm_ok} audited ok)")
        sequential = cold_requests * args.latency
        if args.latency:
            print(f"one request after another would wait at least {sequential:.1f} s for the Hub alone")
    return 0 if warm_ok == ok == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
