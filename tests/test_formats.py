"""Response formats as records: each shipped one loads, its templates agree with each other (what its chat
template prompts, its response_template parses back), and its tiny checkpoint speaks it token by token."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers.utils.chat_parsing import parse_response

from conformance.cli import main
from conformance.formats.format import Format
from conformance.formats.format_files import SHIPPED_FORMATS_DIR, FormatFileError, load_format
from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
from conformance.formats.response_template import check_serving, load_template
from conformance.formats.tiny_checkpoint import NUM_LAYERS, build_fixture
from conformance.formats.turn_text import USER_MESSAGE, Subject, render

TOOLS = [{"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
    "type": "object", "properties": {key: {"type": "string"} for key in keys}}}}
    for name, keys in (("get_weather", ("city", "days")), ("get_time", ("timezone",)))]
SHIPPED = sorted(FORMATS)


def prompt_of(form: Format) -> str:
    """The generation prompt the format's chat template writes (its start anchor where none is known)."""
    if form.chat_template is None:
        anchor = form.response_template["start_anchor"]
        return anchor[0] if isinstance(anchor, list) else anchor
    subject = Subject(form.chat_template, dict(form.response_template),
                      {"eos_token": form.eos_token, "pad_token": form.pad_token})
    return render(subject, [USER_MESSAGE], TOOLS, add_generation_prompt=True)


def test_the_registry_holds_the_default_and_every_shipped_folder_once() -> None:
    assert next(iter(FORMATS.values())) is DEFAULT_FORMAT
    folders = {path.name for path in SHIPPED_FORMATS_DIR.iterdir() if path.is_dir()}
    assert folders <= set(FORMATS) and {"qwen3-xml", "gemma4", "glm45", "gpt-oss", "cohere-command"} <= folders


@pytest.mark.parametrize("name", SHIPPED)
def test_each_response_template_loads_and_serves_under_the_formats_rules(name: str) -> None:
    check_serving(load_template(dict(FORMATS[name].response_template)))


@pytest.mark.parametrize("name", SHIPPED)
def test_the_probe_text_parses_as_reasoning_after_the_formats_own_prompt(name: str) -> None:
    form = FORMATS[name]
    parsed = parse_response(form.probe_text, dict(form.response_template), prefix=prompt_of(form))
    assert parsed["thinking"].strip() == "ok"
    assert parsed.get("content", "ok").strip() == "ok" and form.eos_token not in form.probe_text


@pytest.mark.parametrize("name", [name for name in SHIPPED if FORMATS[name].sample_raw])
def test_the_sample_turn_parses_into_its_calls_after_the_formats_own_prompt(name: str) -> None:
    form = FORMATS[name]
    parsed = parse_response(form.sample_raw, dict(form.response_template), prefix=prompt_of(form))
    calls = [call["function"] for call in parsed["tool_calls"]]
    assert calls[0]["name"] == "get_weather" and calls[0]["arguments"]["city"] == "Paris"
    assert {call["name"] for call in calls} <= {"get_weather", "get_time"}
    assert parsed["thinking"].strip() == "The user wants the weather and the time."


@pytest.mark.parametrize("name", SHIPPED)
def test_the_tiny_checkpoint_of_each_format_spells_every_token_of_it_as_one(name: str, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    form = FORMATS[name]
    directory = build_fixture(tmp_path / name, "full", form)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    for token in (*form.special_tokens, *form.delimiter_tokens):
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["response_template"] == form.response_template and config["eos_token"] == form.eos_token
    assert json.loads((directory / "generation_config.json").read_text())["eos_token_id"] == [
        tokenizer.convert_tokens_to_ids(token) for token in form.end_tokens]
    assert json.loads((directory / "config.json").read_text())["model_type"] == form.model_type
    # transformers reads the same body under the format's model_type: every layer full attention, as vLLM's Qwen3
    # body needs (a gpt_oss configuration left to its defaults alternates sliding layers: vLLM stops at load)
    body = AutoConfig.from_pretrained(directory)
    assert body.layer_types == ["full_attention"] * NUM_LAYERS and body.sliding_window is None
    assert body.rope_parameters["rope_type"] == "default"
    assert (directory / "chat_template.jinja").is_file() == (form.chat_template is not None)


def test_a_broken_format_folder_is_refused_naming_its_file_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "gemma4"
    shutil.copytree(SHIPPED_FORMATS_DIR / "gemma4", folder)
    record = json.loads((folder / "format.json").read_text())
    (folder / "format.json").write_text(json.dumps({**record, "stop_tokens": []}))
    with pytest.raises(FormatFileError, match=r"gemma4/format.json: stop_tokens: \[\] should be non-empty"):
        load_format(folder)
    (folder / "format.json").write_text(json.dumps({**record, "name": "gemma5"}))
    with pytest.raises(FormatFileError, match="name: 'gemma5' is not its folder's name"):
        load_format(folder)
    (folder / "format.json").write_text(json.dumps(record))
    (folder / "response_template.json").write_text("{")
    with pytest.raises(FormatFileError, match="response_template.json: not valid JSON"):
        load_format(folder)


def test_the_formats_verb_lists_every_record_and_fixture_build_takes_one(tmp_path: Path, capsys) -> None:
    assert main(["formats"]) == 0
    listed = capsys.readouterr().out
    assert all(f"{name}" in listed for name in FORMATS) and "VLLM_ENFORCE_STRICT_TOOL_CALLING=0" in listed
    assert main(["fixture", "build", str(tmp_path / "g"), "--format", "gemma4"]) == 0
    assert json.loads((tmp_path / "g" / "tokenizer_config.json").read_text())["eos_token"] == "<turn|>"
    assert main(["fixture", "build", str(tmp_path / "x"), "--format", "gemma4", "--variant", "tools-only"]) == 2
    assert "invalid choice: 'tools-only' (the gemma4 format has: 'full', 'no-template')" in capsys.readouterr().err
