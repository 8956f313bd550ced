"""The stamp every report carries: server version, model, checkpoint revision, profile, suite version, time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STAMP_FIELDS = (
    ("suite_version", "suite version"),
    ("profile", "profile"),
    ("server_version", "server version"),
    ("server_build", "server build"),
    ("model", "model"),
    ("checkpoint_revision", "checkpoint revision"),
    ("response_format", "response format"),
    ("base_url", "server"),
    ("server_args", "server flags"),
    ("launch_note", "flags chosen"),
    ("recorded_at", "recorded"),
    ("time", "report time"),
    ("completion", "run"),
)


OPTIONAL_STAMP_KEYS = frozenset({"server_build", "launch_note"})


def stamp_lines(stamp: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs for display; unknown values shown as `unknown`, lists joined by spaces;
    the server build and the launch note only when there is one (a launched combination no one ships, flags
    chosen for the checkpoint)."""
    return [(label, _display(stamp.get(key))) for key, label in STAMP_FIELDS
            if key not in OPTIONAL_STAMP_KEYS or stamp.get(key)]


def _display(value: Any) -> str:
    text = " ".join(map(str, value)) if isinstance(value, list) else str(value or "")
    return text or "unknown"
