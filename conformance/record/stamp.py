"""The stamp every run and gate record carries: server version, model, checkpoint revision, profile,
suite version, when it was recorded and whether the run finished."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from conformance import __version__


def make_stamp(server: Mapping[str, Any], recorded_at: str | None = None, completion: str = "complete") -> dict[str, Any]:
    """A report stamp from a `ServerStamp` (as a dict) or anything with the same keys; `recorded_at`
    is when the transcripts were recorded (default: now); `completion` says whether the run finished."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "suite_version": __version__,
        "profile": server.get("profile"),
        "server_version": server.get("version"),
        "server_build": server.get("build"),
        "model": server.get("model"),
        "checkpoint_revision": server.get("checkpoint_revision"),
        "response_format": server.get("format"),  # None: recorded before formats (the default one's)
        "base_url": server.get("base_url"),
        "server_args": list(server.get("args") or ()),
        "launch_note": server.get("launch_note"),
        "recorded_at": recorded_at or now,
        "time": now,
        "completion": completion,
    }


def stamp_of_recording(transcripts: Sequence[Any], completion: str = "complete") -> dict[str, Any]:
    """The stamp of a recorded run (non-empty `Transcript`s): its server, and when its first request started."""
    recorded = min((t.started_at for t in transcripts if t.started_at), default=None)
    return make_stamp(transcripts[0].server.__dict__, recorded_at=recorded, completion=completion)
