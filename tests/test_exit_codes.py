"""An interrupted verb exits as the shell reports a process stopped by the signal: 130 for Ctrl-C (SIGINT),
143 for SIGTERM; `conformance --help` says so."""

from __future__ import annotations

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
