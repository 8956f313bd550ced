"""The `transformers-serve` profile without its server: the virtual environment set-up (made once,
a failed install a clear start error and exit 2), the sequence-bias keys, the command version
probe, its log-error finder and the stream framing it is recorded with."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conformance.cli import main
from conformance.formats.qwen3_hermes import EOS_TOKEN
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.record.transcript import ServerStamp, SseLine, Transcript
from conformance.record.wire import read_stream
from conformance.run.checks.contract import check_stream_framing
from conformance.servers.launch import ServerStartError, start
from conformance.servers.profile import CommandVersionProbe
from conformance.servers.profiles import PROFILES
from conformance.servers.runtimes import CurrentInterpreter, SetupError
from conformance.servers.runtimes.transformers_serve import MARKER_FILE, ManagedVirtualEnv, ensure_venv
from conformance.servers.sequence_bias import (
    FIRST_CONTEXT_WIDTH,
    CheckpointTokenizer,
    bias_keys,
    forced_ids,
    forced_text_of,
    generation_config_field,
    served_messages,
    verify_answer,
)
from conformance.servers.transformers_serve import find_transformers_serve_error

NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}  # nothing from the network in these tests


# --- the virtual environment -----------------------------------------------------------------------


def test_the_venv_is_made_once_and_a_second_resolve_installs_nothing(tmp_path, monkeypatch) -> None:
    for name, value in NO_INDEX.items():
        monkeypatch.setenv(name, value)
    calls: list[list[str]] = []
    real_run = __import__("subprocess").run

    def counting_run(command, *args, **kwargs):
        calls.append(list(command))
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr("conformance.servers.runtimes.transformers_serve.subprocess.run", counting_run)
    requirements = ("pip",)  # already in a fresh venv: "Requirement already satisfied", no download
    venv = ensure_venv("probe-venv", requirements, cache=tmp_path, announce=lambda line: None)
    assert (venv / "bin" / "python").exists()
    assert json.loads((venv / MARKER_FILE).read_text())["requirements"] == ["pip"]
    assert [c[1:3] for c in calls] == [["-m", "venv"], ["-m", "pip"]]
    assert ensure_venv("probe-venv", requirements, cache=tmp_path, announce=lambda line: None) == venv
    assert len(calls) == 2  # the second resolve ran nothing
    (venv / MARKER_FILE).unlink()  # an install that did not finish: made again
    ensure_venv("probe-venv", requirements, cache=tmp_path, announce=lambda line: None)
    assert len(calls) == 4


def test_a_failed_install_is_a_setup_error_naming_pips_error_and_the_log(tmp_path, monkeypatch) -> None:
    for name, value in NO_INDEX.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SetupError, match=r"pip install no-such-package-xyz==1 failed \(exit 1\): ERROR: "
                                         r".*no-such-package-xyz.*\(log: .*broken\.install\.log\)"):
        ensure_venv("broken", ("no-such-package-xyz==1",), cache=tmp_path, announce=lambda line: None)
    assert not (tmp_path / "venvs" / "broken" / MARKER_FILE).exists()


def test_a_failed_set_up_is_a_start_error_and_exit_2_for_serve_and_run(tmp_path, monkeypatch, capsys) -> None:
    for name, value in NO_INDEX.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CONFORMANCE_CACHE", str(tmp_path / "cache"))
    broken = replace(PROFILES["transformers-serve"], launch=replace(
        PROFILES["transformers-serve"].launch, runtime=ManagedVirtualEnv("broken", ("no-such-package-xyz==1",))))
    monkeypatch.setitem(PROFILES, "transformers-serve", broken)
    with pytest.raises(ServerStartError, match="cannot set up the transformers-serve server: pip install"):
        start("transformers-serve", tmp_path, log_dir=tmp_path / "logs")
    assert main(["serve", "--profile", "transformers-serve", "--model", str(tmp_path)]) == 2
    assert "cannot set up the transformers-serve server" in capsys.readouterr().err
    assert main(["run", "--launch", "transformers-serve", "--out", str(tmp_path / "run")]) == 2
    assert "cannot set up the transformers-serve server" in capsys.readouterr().err


# --- the record's other data -----------------------------------------------------------------------


def test_the_command_version_probe_runs_in_the_runtime_and_reads_the_first_line() -> None:
    probe = CommandVersionProbe(("{python}", "-c", "import sys; print('7.1.2'); print(sys.executable)"))
    assert probe.version(lambda path: pytest.fail("no route is asked"), CurrentInterpreter()) == "7.1.2"
    assert CommandVersionProbe(("{python}", "-c", "raise SystemExit(3)")).version(None, CurrentInterpreter()) is None
    assert CommandVersionProbe(("{nowhere}",)).version(None, CurrentInterpreter()) is None


def test_the_log_finder_reads_a_traceback_and_the_command_lines_own_errors() -> None:
    traceback = "INFO: started\nTraceback (most recent call last):\n  File x\nOSError: /m does not appear to have a file named config.json\n"
    assert find_transformers_serve_error(traceback) == "OSError: /m does not appear to have a file named config.json"
    usage = "Usage: transformers serve [OPTIONS]\n╭─ Error ─╮\n│ No such option: --bogus │\n╰──────╯\n"
    assert find_transformers_serve_error(usage) == "No such option: --bogus"
    assert find_transformers_serve_error("INFO: Uvicorn running\n") is None


def _stream(lines: list[str]) -> Transcript:
    return Transcript("c", "stream", "transformers-serve", "chat", ServerStamp("u", "m", "transformers-serve", None, ()),
                      {}, status=200, sse=[SseLine(line, 0.0) for line in lines])


ROLE = json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
FINISH = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})


def test_a_stream_without_done_is_judged_on_the_records_statement_and_fails_for_others() -> None:
    closed = read_stream(_stream([ROLE, FINISH]))
    assert check_stream_framing(closed, "chat").reason == "no data: [DONE]"  # the contract, for vLLM's records
    recorded = check_stream_framing(closed, "chat", ends_with_done=False)
    assert recorded.outcome == "pass" and "no data: [DONE]" in recorded.reason
    with_done = check_stream_framing(read_stream(_stream([ROLE, FINISH, "[DONE]"])), "chat", ends_with_done=False)
    assert with_done.outcome == "fail" and "[DONE] arrived" in with_done.reason
    assert PROFILES["transformers-serve"].ends_stream_with_done is False and PROFILES["hf"].ends_stream_with_done


# --- sequence-bias forcing -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> CheckpointTokenizer:
    return CheckpointTokenizer(str(build_fixture(tmp_path_factory.mktemp("ckpt") / "eos", "eos-closes-content")))


REQUEST = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 200}


def test_each_key_is_the_contexts_width_of_tokens_then_the_wanted_one_unambiguous(tokenizer) -> None:
    text = "<think>\nplan\n</think>\n\nHello there."
    prompt, target = tokenizer.prompt_ids(REQUEST), forced_ids(tokenizer, text)
    width, keys = bias_keys(prompt, target)
    assert width == FIRST_CONTEXT_WIDTH and len(keys) == len(target)  # a text without repeats: 8 everywhere
    sequence = [*prompt, *target]
    for step, (key, bias) in enumerate(keys):
        at = len(prompt) + step
        assert key == sequence[at - width:at + 1] and bias == 1e6
    assert keys[0][0][:-1] == prompt[-width:]  # the first step's context is the prompt's tail
    assert target[-1] == tokenizer.tokenize(EOS_TOKEN)[0]


def test_the_context_widens_until_no_other_step_wanting_another_token_follows_it() -> None:
    prompt = list(range(100, 120))
    target = [5] * 9 + [6]  # a context of eight 5s precedes a 5 and the 6
    width, keys = bias_keys(prompt, target)
    sequence = [*prompt, *target]
    for step, (key, _) in enumerate(keys):
        at = len(prompt) + step
        context = key[:-1]
        assert key[-1] == sequence[at] and context == sequence[at - len(context):at]
        for other in range(len(prompt), len(sequence)):  # the key fires at no step wanting another token
            if sequence[other] != key[-1]:
                assert sequence[other - len(context):other] != context
    assert width > FIRST_CONTEXT_WIDTH and len(keys[0][0]) == FIRST_CONTEXT_WIDTH + 1
    with pytest.raises(ValueError, match="tells it apart"):
        bias_keys([7] * 3, [7] * 8 + [8] + [7] * 8 + [9])


def test_the_forced_request_field_and_its_text_read_back(tokenizer) -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>'
    field = generation_config_field(tokenizer, text, REQUEST)
    config = json.loads(field["generation_config"])
    assert config["do_sample"] is False and config["max_new_tokens"] == len(forced_ids(tokenizer, text)) + 4
    assert config["eos_token_id"] == [tokenizer.end_token_id]
    assert forced_text_of({"model": tokenizer.model, **field}) == text  # two equal calls: one key per step
    assert forced_text_of({"model": tokenizer.model}) is None


def test_verification_counts_the_prompt_and_the_generated_tokens(tokenizer) -> None:
    text = "Hello there."
    prompt, wanted = len(tokenizer.prompt_ids(REQUEST)), len(forced_ids(tokenizer, text))
    assert verify_answer(tokenizer, text, REQUEST, {"prompt_tokens": prompt, "completion_tokens": wanted}) == []
    longer = verify_answer(tokenizer, text, REQUEST, {"prompt_tokens": prompt, "completion_tokens": wanted + 4})
    assert longer == [f"{wanted + 4} tokens were generated, {wanted} forced (the text and its end token)"]
    other_prompt = verify_answer(tokenizer, text, REQUEST, {"prompt_tokens": prompt + 1, "completion_tokens": wanted})
    assert "the server's prompt has" in other_prompt[0]
    cut = {**REQUEST, "max_tokens": 2}
    assert verify_answer(tokenizer, text, cut, {"prompt_tokens": prompt, "completion_tokens": 2}) == []
    assert verify_answer(tokenizer, text, REQUEST, None) == ["the answer has no usage to count its tokens"]


def test_messages_are_rendered_as_transformers_serve_hands_them_to_the_template() -> None:
    messages = [{"role": "user", "content": "hi", "name": "x"},
                {"role": "assistant", "content": "ignored", "reasoning": "r",
                 "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                {"role": "tool", "tool_call_id": "1", "content": [{"type": "text", "text": "ok"}, {"type": "image_url"}]}]
    assert served_messages(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [],
         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": [{"type": "text", "text": "ok"}], "tool_call_id": "1"},
    ]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'  # the case is not changed


def test_a_model_that_is_not_a_local_checkpoint_cannot_be_forced(tmp_path) -> None:
    from conformance.servers.forcing import ForcingUnsupported

    with pytest.raises(ForcingUnsupported, match="not a local directory"):
        PROFILES["transformers-serve"].forcing.tokenizer("http://127.0.0.1:1", str(tmp_path / "absent"), None, 1)
