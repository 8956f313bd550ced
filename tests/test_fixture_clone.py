"""`conformance fixture build DIR --from CHECKPOINT` (fast tier: no vLLM): the tiny clone of a checkpoint keeps its
templates byte for byte, its added tokens, each literal delimiter of its templates as one token and its end
tokens; a source it cannot read is exit 2 naming the file and the field."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.formats.registry import FORMATS
from conformance.formats.tiny_checkpoint import build_fixture
from conformance.util import exit_codes
from tests.hub_server import HubServer

# A format no record ships: <reason> reasoning, <calls>[{json}, ...]</calls> calls, <|begin|>/<|end|> turns.
INVENTED = Path(__file__).parent / "data" / "calls_reason_checkpoint"
DELIMITERS = ("<reason>", "</reason>", "<calls>", "</calls>", "<tools>", "</tools>")
SPECIAL = ("<|begin|>", "<|end|>", "<|pad|>")


def build(source: Path | str, out: Path, *extra: str) -> int:
    return main(["fixture", "build", str(out), "--from", str(source), *extra])


def tokenizer_of(directory: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


@pytest.fixture(scope="module")
def invented_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clone") / "invented"
    assert build(INVENTED, out) == exit_codes.OK
    return out


def test_the_clone_keeps_templates_tokens_and_end_token(invented_clone: Path) -> None:
    source = json.loads((INVENTED / "tokenizer_config.json").read_text())
    config = json.loads((invented_clone / "tokenizer_config.json").read_text())
    assert (invented_clone / "chat_template.jinja").read_text() == source["chat_template"]
    assert json.dumps(config["response_template"]) == json.dumps(source["response_template"])
    tokenizer = tokenizer_of(invented_clone)
    for token in DELIMITERS + SPECIAL:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    special = {token.content: token.special for token in tokenizer.added_tokens_decoder.values()}
    assert {token: special[token] for token in SPECIAL + DELIMITERS} == {  # delimiters stay in decoded text
        **dict.fromkeys(SPECIAL, True), **dict.fromkeys(DELIMITERS, False)}
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|pad|>"
    end_ids = json.loads((invented_clone / "generation_config.json").read_text())["eos_token_id"]
    assert tokenizer.convert_ids_to_tokens(end_ids) == ["<|end|>"]
    assert json.loads((invented_clone / "config.json").read_text())["model_type"] == "qwen3"


def test_the_clone_renders_and_its_template_is_predicted_to_serve(invented_clone: Path) -> None:
    from conformance.audit.template_worker import predict_vllm_startup

    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    text = tokenizer_of(invented_clone).apply_chat_template(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning": "plan", "tool_calls": [call]}],
        tokenize=False)
    assert text.endswith('<|begin|>assistant\n<reason>plan</reason><calls>[{"name": "get_weather", "arguments": '
                         '{"city": "Paris"}}]</calls><|end|>\n')
    verdicts = predict_vllm_startup(json.loads((invented_clone / "tokenizer_config.json").read_text()))
    assert all(verdict.starts for verdict in verdicts.values()), verdicts


def test_building_twice_gives_identical_bytes(invented_clone: Path, tmp_path: Path) -> None:
    assert build(INVENTED, tmp_path / "again") == exit_codes.OK
    assert {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()} == {
        p.name: p.read_bytes() for p in invented_clone.iterdir()}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_shipped_formats_clone_has_its_records_tokens(name: str, tmp_path: Path) -> None:
    """From tokenizer_config.json alone, the clone has every token the format's turns are written with that its
    templates write (the record lists its delimiters by hand) and its eos; with tokenizer.json, all its tokens
    and end tokens."""
    form = FORMATS[name]
    written = (form.chat_template or "") + json.dumps(dict(form.response_template)).replace("\\\\", "")
    source = build_fixture(tmp_path / "source", "full", form)
    (source / "model.safetensors").unlink()
    assert build(source, tmp_path / "clone") == exit_codes.OK
    (source / "tokenizer.json").unlink()
    assert build(source, tmp_path / "bare") == exit_codes.OK
    for clone, tokens, ends in ((tmp_path / "clone", (*form.delimiter_tokens, *form.special_tokens), form.end_tokens),
                                (tmp_path / "bare", [t for t in form.marker_tokens if t in written], (form.eos_token,))):
        tokenizer = tokenizer_of(clone)
        for token in (*tokens, *ends):
            assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, (clone.name, token)
        assert (clone / "chat_template.jinja").exists() == (form.chat_template is not None)
        config = json.loads((clone / "config.json").read_text())
        assert config["model_type"] == form.model_type  # gpt_oss is kept: vLLM decides harmony by it
        end_ids = json.loads((clone / "generation_config.json").read_text())["eos_token_id"]
        assert tokenizer.convert_ids_to_tokens(end_ids) == list(ends)


def source_copy(tmp_path: Path, **changes: object) -> Path:
    """The invented checkpoint with tokenizer_config.json's keys changed (a value None: removed)."""
    directory = tmp_path / "source"
    shutil.copytree(INVENTED, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    for key, value in changes.items():
        config.pop(key) if value is None else config.__setitem__(key, value)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_end_tokens_named_by_the_generation_config_and_the_tokenizer(tmp_path: Path, capsys) -> None:
    source = source_copy(tmp_path)
    (source / "generation_config.json").write_text(json.dumps({"eos_token_id": [501, 7, 9]}))
    (source / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 7, "content": "<|stop|>"}]}))
    (source / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert build(source, tmp_path / "clone") == exit_codes.OK
    out = capsys.readouterr().out
    assert "eos_token_id 9 not kept" in out and "model_type 'llama' not kept" in out
    tokenizer = tokenizer_of(tmp_path / "clone")
    ends = json.loads((tmp_path / "clone" / "generation_config.json").read_text())["eos_token_id"]
    assert tokenizer.convert_ids_to_tokens(ends) == ["<|end|>", "<|stop|>"]


def test_named_chat_templates_are_kept_by_name(tmp_path: Path) -> None:
    source = source_copy(tmp_path, chat_template=[{"name": "default", "template": "A"},
                                                  {"name": "tool_use", "template": "<tool_use>B"}])
    assert build(source, tmp_path / "clone") == exit_codes.OK
    assert (tmp_path / "clone" / "chat_template.jinja").read_text() == "A"
    assert (tmp_path / "clone" / "additional_chat_templates" / "tool_use.jinja").read_text() == "<tool_use>B"
    assert len(tokenizer_of(tmp_path / "clone").encode("<tool_use>", add_special_tokens=False)) == 1


@pytest.mark.parametrize(("change", "message"), [
    ({"response_template": ["x"]}, "tokenizer_config.json: response_template: a JSON list"),
    ({"chat_template": 7}, "tokenizer_config.json: chat_template: neither a string nor a list"),
    ({"added_tokens_decoder": {"5": {"content": 3}}}, "tokenizer_config.json: added_tokens_decoder.5.content"),
    ({"added_tokens_decoder": {"x": {"content": "a"}}}, "tokenizer_config.json: added_tokens_decoder.x: "),
    ({"eos_token": None}, "tokenizer_config.json: eos_token: missing"),
    ({"eos_token": {"content": ""}}, "tokenizer_config.json: eos_token.content: not a token"),
])
def test_a_bad_tokenizer_config_is_exit_2_naming_the_field(change: dict, message: str, tmp_path: Path,
                                                           capsys) -> None:
    assert build(source_copy(tmp_path, **change), tmp_path / "clone") == exit_codes.ERROR
    assert message in capsys.readouterr().err
    assert not (tmp_path / "clone").exists()


@pytest.mark.parametrize(("name", "text", "message"), [
    ("tokenizer_config.json", "{oops", "tokenizer_config.json: invalid JSON at line 1"),
    ("generation_config.json", '{"eos_token_id": "x"}', "generation_config.json: eos_token_id: neither"),
    ("config.json", '{"model_type": 5}', "config.json: model_type: not a name"),
    ("config.json", "[1]", "config.json: the top level: a JSON list"),
    ("chat_template.json", "{}", "chat_template.json: chat_template: missing"),
    ("chat_template.jinja", b"\xff", "chat_template.jinja: line 1: not UTF-8"),
])
def test_a_bad_source_file_is_exit_2_naming_the_file(name: str, text: str | bytes, message: str, tmp_path: Path,
                                                     capsys) -> None:
    source = source_copy(tmp_path)
    (source / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    assert build(source, tmp_path / "clone") == exit_codes.ERROR
    assert message in capsys.readouterr().err


def test_an_unusable_from_is_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert build(tmp_path / "empty", tmp_path / "a") == exit_codes.ERROR
    assert "no tokenizer_config.json" in capsys.readouterr().err
    assert build("./not-here", tmp_path / "b") == exit_codes.ERROR
    assert "neither a checkpoint directory nor a Hub repo id" in capsys.readouterr().err
    assert build(INVENTED, tmp_path / "c", "--variant", "full") == exit_codes.ERROR
    assert "--from takes neither --format nor --variant" in capsys.readouterr().err


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with HubServer() as server:
        server.add_repo("t/invented", {"tokenizer_config.json": (INVENTED / "tokenizer_config.json").read_text(),
                                       "generation_config.json": '{"eos_token_id": 501}'})
        server.add_repo("t/broken", {"tokenizer_config.json": "[1]"})
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
        yield server


def test_a_hub_repo_is_fetched_with_the_audits_bounds(hub: HubServer, tmp_path: Path, invented_clone: Path,
                                                      capsys) -> None:
    assert build("t/invented", tmp_path / "clone") == exit_codes.OK
    assert f"t/invented@{hub.repos['t/invented'].commit}" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in (tmp_path / "clone").iterdir()} == {
        p.name: p.read_bytes() for p in invented_clone.iterdir()}
    assert build("t/broken", tmp_path / "broken") == exit_codes.ERROR
    assert "tokenizer_config.json: top level is a JSON list" in capsys.readouterr().err
    assert build("t/missing", tmp_path / "missing") == exit_codes.ERROR
    assert "t/missing@main: not_found" in capsys.readouterr().err
