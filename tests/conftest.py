"""Shared fixtures for the real-vLLM tier.

- `tiny_checkpoint`: path of the `full` fixture checkpoint (built once per session).
- `hf_server`, `legacy_server`, `hf_rust_server`: real vLLM 0.32 servers (hf-rust: its Rust frontend) (`conformance.servers.launch.Server`: `.base_url`
  ending in /v1, `.root_url`, `.model`, `.profile`, `.version`, `.args`, `.log_path`, `.pid`,
  `.startup_seconds`) serving the tiny checkpoint; `transformers_serve_server`: `transformers serve`
  5.23 (its virtual environment made on first use) on the record's variant of it; `hf_033_server`:
  vLLM 0.33's Python frontend over the 0.32 CPU kernels (its overlay built on first use), and
  `legacy_033_server` the same with hermes + qwen3; `hf_rust_033_server`: vLLM 0.33's Rust frontend over
  that overlay's engine; `hf_closer_server`, `hf_033_closer_server`: hf and hf-0.33 on the
  `closer-ends-with-anchor` variant (the cases that need it); `hf_gemma4_server`, `legacy_gemma4_server` and
  the same for `qwen3_xml` and `glm45`: hf and legacy (the format's own parsers) on that format's tiny
  checkpoint (`conformance fixture build DIR --format NAME`). Nothing starts until a test asks for a server;
  then every server that some selected test needs starts at once, as many as the machine's available
  memory holds (SERVER_MEMORY_BYTES each; starting together halves the wait on 2 cores); each stops after
  the last selected test using it, the rest at session end, which fails loudly if a process of theirs
  is still alive. Modules needing a server on another variant than its record's run last, when the
  others have made room.

Tests using a server fixture are marked `vllm` automatically, so `pytest -m "not vllm"` runs the
fast tier alone. The terminal summary lists each server's measured start-up time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.formats.tiny_checkpoint import build_fixture
from conformance.servers.launch import Server
from conformance.servers.profiles import PROFILES
from tests.server_pool import ServerKey, ServerPool

CLOSER_VARIANT = "closer-ends-with-anchor"
FORMATS_SERVED = ("gemma4", "qwen3-xml", "glm45")
# fixture name -> profile, or (profile, fixture variant) for a server on another variant than its record's
SERVER_FIXTURES: dict[str, str | tuple[str, str]] = {
    "hf_server": "hf", "legacy_server": "legacy", "hf_rust_server": "hf-rust",
    "transformers_serve_server": "transformers-serve", "hf_033_server": "hf-0.33",
    "legacy_033_server": "legacy-0.33", "hf_rust_033_server": "hf-rust-0.33",
    "hf_closer_server": ("hf", CLOSER_VARIANT), "hf_033_closer_server": ("hf-0.33", CLOSER_VARIANT),
    # the other shipped formats vLLM 0.32 serves under both profiles, each on its own tiny checkpoint
    **{f"{profile}_{form.replace('-', '_')}_server": (profile, f"{form}:full")
       for form in FORMATS_SERVED for profile in ("hf", "legacy")},
}
_first_use: dict[ServerKey, int] = {}  # position of the first and last selected test using each server
_last_use: dict[ServerKey, int] = {}
_positions: dict[str, int] = {}
_pool: ServerPool | None = None
_pool_started: list[tuple[ServerKey, Server]] = []  # for the terminal summary


def server_key(entry: str | tuple[str, str]) -> ServerKey:
    """(profile, the fixture variant it serves) of a SERVER_FIXTURES entry."""
    return entry if isinstance(entry, tuple) else (entry, PROFILES[entry].fixture_variant)


def _profiles_used_by(item: pytest.Item) -> set[ServerKey]:
    return {server_key(SERVER_FIXTURES[name]) for name in getattr(item, "fixturenames", ()) if name in SERVER_FIXTURES}


@pytest.hookimpl(tryfirst=True)  # before -m deselection, so `-m "not vllm"` leaves these out
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _profiles_used_by(item):
            item.add_marker(pytest.mark.vllm)
    # Modules that need a server on another variant than its record's run last (in their own order):
    # by then the pool has stopped the servers no later test uses, which leaves memory for those.
    late_modules = {getattr(item, "module", None) for item in items
                    if any(variant != PROFILES[profile].fixture_variant for profile, variant in _profiles_used_by(item))}
    late_modules.discard(None)
    items.sort(key=lambda item: getattr(item, "module", None) in late_modules)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Only the selected tests decide which servers the session will need, and when each is last used."""
    for position, item in enumerate(session.items):
        for key in _profiles_used_by(item):
            _first_use.setdefault(key, position)
            _last_use[key] = position
        _positions[item.nodeid] = position


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if _pool is not None:
        _pool.stop_unused_after(_positions.get(item.nodeid, -1))


def pytest_terminal_summary(terminalreporter) -> None:
    if _pool_started:
        terminalreporter.section("servers")
        for (_, variant), server in _pool_started:
            terminalreporter.write_line(
                f"{server.profile.name} ({variant}): {server.profile.server_name} {server.version} healthy after "
                f"{server.startup_seconds:.1f} s "
                f"(log: {server.log_path})"
            )


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture(tmp_path_factory.mktemp("tiny-checkpoint") / "full")


@pytest.fixture(scope="session")
def server_pool(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    global _pool
    pool = _pool = ServerPool(tiny_checkpoint.parent, tmp_path_factory.mktemp("vllm-logs"), set(_first_use),
                              _first_use, _last_use)
    try:
        yield pool
    finally:
        _pool = None
        _pool_started.extend(pool.started)
        pool.close()


def _server_fixture(name: str, key: ServerKey):
    @pytest.fixture(scope="session", name=name)
    def server(server_pool: ServerPool) -> Server:
        return server_pool.get(key)

    server.__doc__ = f"The real {key[0]} server of the pool, serving the tiny checkpoint's {key[1]} variant."
    return server


# hf_server, legacy_server, ...: one session fixture per entry of SERVER_FIXTURES
for _name, _entry in SERVER_FIXTURES.items():
    globals()[_name] = _server_fixture(_name, server_key(_entry))
