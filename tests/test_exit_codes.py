"""An interrupted verb exits as the shell reports a process stopped by the signal: 130 for Ctrl-C (SIGINT),
143 for SIGTERM; `conformance --help` says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.commands import formats
from conformance.util import exit_codes


@pytest.mark.parametrize(("stop", "code"), [(KeyboardInterrupt, 130), (exit_codes.Terminated, 143)])
def test_a_verb_stopped_by_a_signal_exits_128_plus_its_number(monkeypatch, capsys, stop, code):
    def interrupted(args):
        raise stop

    monkeypatch.setattr(formats, "run", interrupted)  # any verb: registered when main builds the parser
    assert main(["formats"]) == code
    assert capsys.readouterr().err == "interrupted\n"


def test_a_sigterm_handler_raises_what_ctrl_c_raises_and_names_its_signal():
    with pytest.raises(KeyboardInterrupt) as stopped:
        exit_codes.raise_terminated(15, None)
    assert exit_codes.signal_of(stopped.value) == "SIGTERM" and exit_codes.signal_of(KeyboardInterrupt()) == "SIGINT"
    assert [exit_codes.stopped_by(name) for name in ("SIGINT", "SIGTERM")] == [130, 143]


def test_help_names_the_interrupted_exit_codes(capsys):
    assert main(["--help"]) == 0
    assert "130 = interrupted by Ctrl-C" in capsys.readouterr().out


ABANDONED_JOB = """
import asyncio, sys, time
from pydantic import BaseModel, field_validator
from conformance.cli import exit_process
from conformance.util.side_requests import in_daemon_thread

class Call(BaseModel):  # a client library's model: pydantic-core calls back into Python for each validation
    arguments: list[int]

    @field_validator("arguments", mode="before")
    @classmethod
    def slowly(cls, value):
        time.sleep(0.001)
        return value

def rebuild_forever():
    while True:
        Call(arguments=[1, 2, 3])

async def abandon():
    try:
        await in_daemon_thread(0.3, rebuild_forever)
    except TimeoutError:
        print("abandoned", flush=True)

asyncio.run(abandon())
exit_process(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 130])
def test_a_job_abandoned_in_native_code_does_not_abort_the_exit(code):
    """A second turn's client library still validating in its daemon thread when the verb ends (Ctrl-C came):
    the process leaves with the verb's code, not SIGABRT ("FATAL: exception not rethrown") from the
    interpreter's shutdown ending that thread inside pydantic-core."""
    for _ in range(3):  # the abort needs the thread inside native code at shutdown: nearly always, not always
        done = subprocess.run([sys.executable, "-c", ABANDONED_JOB, str(code)], capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).parents[1])
        assert (done.returncode, done.stdout, "FATAL" in done.stderr) == (code, "abandoned\n", False), done.stderr


def test_a_crash_with_a_job_abandoned_in_native_code_exits_1_with_its_traceback():
    crashing = ABANDONED_JOB.replace("exit_process(int(sys.argv[1]))", "import conformance.cli as cli\n\n\n"
                                     "def crash():\n    raise RuntimeError('boom')\n\n\ncli.main = crash\ncli.run()")
    done = subprocess.run([sys.executable, "-c", crashing, "0"], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[1])
    assert (done.returncode, "FATAL" in done.stderr) == (1, False) and "RuntimeError: boom" in done.stderr
