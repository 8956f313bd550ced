"""The tiny checkpoint: deterministic bytes, canonical markers, a chat template and response_template
that fit together, and weights that make the longest allowed token win (fast tier: no vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from conformance.formats.qwen3_hermes import MARKER_TOKENS, SPECIAL_TOKENS
from conformance.formats.tiny_checkpoint import VARIANTS, build_fixture
from conformance.util import exit_codes
from tests.server_helpers import WEATHER_TOOL

ASSISTANT_TURN = {
    "role": "assistant",
    "reasoning": "The user wants weather.",
    "content": "",
    "tool_calls": [{"id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fixtures")
    return {variant: build_fixture(root / variant, variant) for variant in VARIANTS}


@pytest.fixture(scope="module")
def tokenizer(checkpoints):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoints["full"])


def file_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_building_twice_gives_identical_bytes(checkpoints, tmp_path: Path) -> None:
    for variant in ("full", "tools-only"):
        assert file_bytes(build_fixture(tmp_path / f"again-{variant}", variant)) == file_bytes(checkpoints[variant])


def test_rebuilding_over_another_variant_leaves_nothing_stale(checkpoints, tmp_path: Path) -> None:
    target = build_fixture(tmp_path / "reused", "full")
    build_fixture(target, "no-template")
    assert file_bytes(target) == file_bytes(checkpoints["no-template"])


def test_variants_differ_only_in_the_response_template(checkpoints) -> None:
    full = file_bytes(checkpoints["full"])
    for variant in VARIANTS:
        files = file_bytes(checkpoints[variant])
        assert {name for name in files if files[name] != full[name]} <= {"tokenizer_config.json"}, variant
        config = json.loads(files["tokenizer_config.json"])
        fields = set(config["response_template"]["fields"]) if "response_template" in config else None
        assert fields == {
            "full": {"thinking", "content", "tool_calls"},
            "no-template": None,
            "thinking-only": {"thinking", "content"},
            "tools-only": {"tool_calls", "content"},
            "reasoning-content": {"reasoning_content", "content", "tool_calls"},
            "non-literal-pattern": {"thinking", "content", "tool_calls"},
            "eos-closes-content": {"thinking", "content", "tool_calls"},
            "closer-ends-with-anchor": {"thinking", "content", "tool_calls"},
        }[variant]
        if variant == "eos-closes-content":  # the one difference: content closes on the end token
            assert config["response_template"]["fields"]["content"] == {"close": "<|im_end|>"}


def test_model_config_is_a_small_qwen3_the_cpu_backend_accepts(checkpoints, tokenizer) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoints["full"])
    assert config.model_type == "qwen3" and config.architectures == ["Qwen3ForCausalLM"]
    assert config.head_dim == 64
    assert config.vocab_size == len(tokenizer)
    assert config.tie_word_embeddings
    weights = load_file(checkpoints["full"] / "model.safetensors")
    assert weights["model.embed_tokens.weight"].shape == (len(tokenizer), config.hidden_size)
    assert "lm_head.weight" not in weights


def test_markers_are_single_tokens_and_only_the_im_tokens_are_special(tokenizer) -> None:
    for token in MARKER_TOKENS + SPECIAL_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, (token, ids)
    text = "<think>\nplan\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=True) == text.removesuffix(
        "<|im_end|>"
    )
    assert tokenizer.eos_token == "<|im_end|>"


def test_ordinary_tokens_never_contain_angle_brackets(tokenizer) -> None:
    """So no ordinary token can straddle a marker's edge, and the longest-token rule spells markers whole."""
    markers = set(MARKER_TOKENS + SPECIAL_TOKENS)
    spelled = [tokenizer.convert_tokens_to_string([token]) for token in tokenizer.get_vocab() if token not in markers]
    assert [token for token in spelled if ("<" in token or ">" in token) and len(token) > 1] == []


def test_chat_template_renders_tools_reasoning_tool_calls_and_tool_results(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        ASSISTANT_TURN,
        {"role": "tool", "tool_call_id": "call-1", "content": "sunny"},
    ]
    prompt = tokenizer.apply_chat_template(messages, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(WEATHER_TOOL) + "\n</tools>" in prompt
    assert (
        "<|im_start|>assistant\n<think>\nThe user wants weather.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
    ) in prompt
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")  # <think> is not pre-written


def test_enable_thinking_false_writes_an_empty_reasoning_block(tokenizer) -> None:
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_response_template_parses_what_the_chat_template_writes(tokenizer) -> None:
    """The response_template is the inverse of the chat template's assistant turn (transformers' parser)."""
    conversation = [{"role": "user", "content": "Weather in Paris?"}]
    prefix = tokenizer.apply_chat_template(conversation, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(conversation + [ASSISTANT_TURN], tools=[WEATHER_TOOL], tokenize=False)
    generated = full.removeprefix(prefix).removesuffix("<|im_end|>\n")
    parsed = tokenizer.parse_response(generated, prefix=prefix)
    assert parsed["thinking"] == ASSISTANT_TURN["reasoning"]
    assert parsed["tool_calls"] == [{"type": "function", "function": ASSISTANT_TURN["tool_calls"][0]["function"]}]
    assert not parsed.get("content")


def test_vllm_0_32_would_start_the_full_variant_with_either_hf_flag(checkpoints) -> None:
    from conformance.audit.template_worker import predict_vllm_startup

    verdicts = predict_vllm_startup(json.loads((checkpoints["full"] / "tokenizer_config.json").read_text()))
    assert {name: verdict.starts for name, verdict in verdicts.items()} == {
        "tool_call_parser_hf": True,
        "reasoning_parser_hf": True,
        "both": True,
    }


def test_weights_make_the_longest_token_win(checkpoints, tokenizer) -> None:
    """With the layers passing the embedding through, the next-token logits rank tokens by byte length."""
    weights = load_file(checkpoints["full"] / "model.safetensors")
    for name, tensor in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert not tensor.any(), f"{name} must be zero so the layers pass the embedding through"
    embedding = weights["model.embed_tokens.weight"].astype(np.float64)
    norm = weights["model.norm.weight"].astype(np.float64)
    texts = [tokenizer.convert_tokens_to_string([tokenizer.convert_ids_to_tokens(i)]) for i in range(len(tokenizer))]
    # Lone bytes of multi-byte characters decode to U+FFFD; leave them out of the comparison.
    whole = np.array(["\ufffd" not in text for text in texts])
    byte_lengths = np.array([len(text.encode()) for text in texts])
    for last_token in tokenizer.encode("Paris</think>\n\n<tool_call>", add_special_tokens=False):
        hidden = embedding[last_token]
        logits = (hidden / np.sqrt(np.mean(hidden**2) + 1e-6) * norm) @ embedding.T
        longer = (byte_lengths[:, None] > byte_lengths[None, :]) & whole[:, None] & whole[None, :]
        assert (logits[:, None] > logits[None, :])[longer].all()


def test_fixture_command_builds_and_rejects_bad_input(tmp_path: Path) -> None:
    def conformance(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=120)

    built = conformance("fixture", "build", str(tmp_path / "tools"), "--variant", "tools-only")
    assert built.returncode == exit_codes.OK, built.stderr
    assert "response_template" in json.loads((tmp_path / "tools" / "tokenizer_config.json").read_text())

    unknown = conformance("fixture", "build", str(tmp_path / "x"), "--variant", "nope")
    assert unknown.returncode == exit_codes.ERROR and "invalid choice: 'nope'" in unknown.stderr

    (tmp_path / "a-file").write_text("")
    blocked = conformance("fixture", "build", str(tmp_path / "a-file" / "sub"))
    assert blocked.returncode == exit_codes.ERROR and str(tmp_path / "a-file" / "sub") in blocked.stderr
