"""The hf-rust-0.33 set-up without its server: vLLM 0.33's `vllm-rs` is the overlay's own copy of the
wheel's binary, made executable where the managed engine looks for it (`<overlay>/site/vllm/vllm-rs`),
run with the overlay as its engine; a wheel without the binary is a set-up error naming the path."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.servers.launch import ServerStartError, launch
from conformance.servers.profiles import PROFILES
from conformance.servers.runtimes import SetupError
from conformance.servers.runtimes.vllm_033 import MARKER_FILE, VllmRustOverlay, overlay_path, rust_frontend_binary
from conformance.servers.runtimes.vllm_rs import BINARY_MEMBER
from tests.test_vllm_033_setup import _wheel, local_index  # noqa: F401 (a fixture)

FAKE_BINARY = b"#!/bin/sh\necho fake vllm-rs 0.33 \"$@\"\n"


@pytest.fixture
def index_with_binary(local_index: Path, tmp_path: Path) -> Path:
    """The fake index's vllm 0.33.0 wheel, now also carrying `vllm/vllm-rs` (stored without an exec bit)."""
    _wheel(tmp_path / "wheels", "vllm", "0.33.0", {"vllm/__init__.py": b"RELEASE = '0.33'\n", BINARY_MEMBER: FAKE_BINARY})
    return local_index


def test_the_binary_is_the_overlays_own_copy_made_executable(index_with_binary: Path) -> None:
    binary = rust_frontend_binary("0.33.0", sys.executable, announce=lambda line: None)
    assert binary == overlay_path("0.33.0") / "site" / "vllm" / "vllm-rs"  # beside vllm/envs.py, where `auto` looks
    assert os.access(binary, os.X_OK)
    assert subprocess.run([binary, "serve"], capture_output=True, text=True, check=True).stdout == "fake vllm-rs 0.33 serve\n"
    binary.chmod(0o644)  # an overlay unpacked before this step existed: the exec bit is added again
    assert rust_frontend_binary("0.33.0", sys.executable, announce=lambda line: pytest.fail(line)) == binary
    assert os.access(binary, os.X_OK)


def test_the_runtime_runs_the_binary_over_the_overlays_engine(index_with_binary: Path) -> None:
    resolved = VllmRustOverlay("0.33.0").resolve(None)
    overlay = overlay_path("0.33.0")
    assert resolved.placeholders == {"binary": str(overlay / "site" / "vllm" / "vllm-rs"), "python": sys.executable}
    assert resolved.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # its engine's python3
    assert resolved.env["PYTHONPATH"].split(os.pathsep)[:2] == [str(overlay / "site"), str(overlay / "deps")]
    assert str(index_with_binary) in resolved.env["PYTHONPATH"].split(os.pathsep)[2:]


def test_a_wheel_without_the_binary_is_a_start_error_naming_where_it_should_be(local_index: Path) -> None:
    expected = overlay_path("0.33.0") / "site" / "vllm" / "vllm-rs"
    with pytest.raises(SetupError, match=f"{expected} is missing: the vllm==0.33.0 wheel"):
        rust_frontend_binary("0.33.0", sys.executable, announce=lambda line: None)
    with pytest.raises(ServerStartError, match=f"cannot set up the hf-rust-0.33 server: {expected} is missing"):
        with launch("hf-rust-0.33", "some/model", timeout=5):
            pytest.fail("the block must not run")
    assert (overlay_path("0.33.0") / MARKER_FILE).is_file()  # the Python overlay itself is fine (hf-0.33 can use it)


def test_the_033_rust_record_is_hf_rusts_flags_on_the_033_engine_checked_and_stamped() -> None:
    record = PROFILES["hf-rust-0.33"]
    assert record.server_args == PROFILES["hf-rust"].server_args
    assert record.launch.common_flags == PROFILES["hf-rust"].launch.common_flags
    assert record.expected_version == "0.33.0" and PROFILES["hf-rust"].expected_version is None
    fields = [asyncio.run(forcing.request_fields("x", {}, lambda: None)) for forcing in (record.forcing,
                                                                                      PROFILES["hf"].forcing)]
    assert fields[0] == fields[1]
    assert "Rust frontend" in record.build_note and "not a shipped combination" in record.build_note
    legacy = PROFILES["legacy-0.33"]
    assert legacy.server_args == PROFILES["legacy"].server_args and legacy.expected_version == "0.33.0"
    assert legacy.build_note == PROFILES["hf-0.33"].build_note
