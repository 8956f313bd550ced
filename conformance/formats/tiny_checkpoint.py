"""The tiny deterministic checkpoint that real vLLM serves in our tests (`conformance fixture build`).

A Qwen3-architecture model (2 layers, head_dim 64: the CPU attention backend refuses 16) with a
byte-level BPE tokenizer carrying a response format's delimiter and special tokens (each one token),
the format record's chat template and, depending on the variant, its `response_template` (a
`conformance.formats.format.Format`; the default is Qwen3/Hermes, `conformance.formats.qwen3_hermes`,
whose `response_template` has literal delimiters only: vLLM's Rust frontend refuses regex delimiters,
which its `non-literal-pattern` variant has).

The weights are random from a fixed seed except for one shape that makes forced outputs come out
canonically tokenized: embedding dimension 0 holds each token's length in bytes, every layer's
`o_proj` and `down_proj` are zero (the layers pass the embedding through), and the final norm
keeps only dimension 0, so with tied embeddings the logits grow with token length. Under a regex
constraint the engine then picks the longest allowed token at each step, which spells each marker
(`<think>`, `</tool_call>`, ...) as its own single token. The BPE is trained on text without `<`
or `>`, so no ordinary token can straddle the start or end of a marker.

Building needs numpy, safetensors, tokenizers and transformers (for saving the tokenizer), no torch.
Building the same variant twice gives identical bytes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.formats.format import Format
from conformance.formats.registry import DEFAULT_FORMAT

if TYPE_CHECKING:
    import numpy as np

VARIANTS: tuple[str, ...] = DEFAULT_FORMAT.variant_names

HIDDEN_SIZE = 128
INTERMEDIATE_SIZE = 256
NUM_LAYERS = 2
NUM_HEADS = 2
NUM_KV_HEADS = 1
HEAD_DIM = 64
MAX_POSITIONS = 2048
BPE_VOCAB_SIZE = 400
SEED = 20261130
LENGTH_DIMENSION = 0
FINAL_NORM_GAIN = 100.0
NOISE_SCALE = 0.02
EXTRA_TEMPLATES = "additional_chat_templates"  # transformers' folder of a tokenizer's further named chat templates
# The model types vLLM 0.32 decides by (a clone keeps its source's where the tiny body still loads).
SERVER_MODEL_TYPES = {
    "gpt_oss": "harmony rendering and parsing (vllm/entrypoints/openai/chat_completion/serving.py)",
    **{name: "tool-call ids `functions.NAME:INDEX` (vllm/renderers/chat_utils.py)"
       for name in ("kimi_k2", "kimi_k25", "kimi_k3")},
}
_BODY_SETTINGS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                  "layer_types", "sliding_window", "rope_parameters")

# The BPE training text: no "<" or ">" anywhere (see the module docstring).
TRAINING_TEXT = (
    "The user wants weather. Let me check the forecast for the city.",
    "Hello there. Just an answer. Done. I will call a tool to get the weather.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "metric": true}}',
    '{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}',
    "Weather in Paris? It is sunny and warm; tomorrow it will rain in Berlin and London.",
    "You may call one or more functions to assist with the user query.",
    "plan: first think, then answer the question with a short sentence.",
)




def response_template_for(variant: str, form: Format = DEFAULT_FORMAT) -> dict | None:
    """The `response_template` that `variant` of format `form` ships (None: the key is absent)."""
    return form.response_template_for(variant)


def check_variant(variant: str, form: Format = DEFAULT_FORMAT) -> None:
    form.variant(variant)


def build_fixture(directory: Path, variant: str = "full", form: Format = DEFAULT_FORMAT) -> Path:
    """Write the checkpoint of `variant` of format `form` into `directory` (created; existing files are replaced).

    Returns the directory. With the same library versions the bytes depend on nothing else (not on
    time, randomness or what the directory held before).
    """
    check_variant(variant, form)
    return build_checkpoint(directory, form, response_template_for(variant, form))


def build_checkpoint(directory: Path, form: Format, response_template: dict | None,
                     tokenizer_settings: Mapping[str, Any] | None = None) -> Path:
    """Write the tiny checkpoint of `form`'s tokens, templates and end tokens with `response_template` (None:
    none) into `directory`; `tokenizer_settings` are further settings of the saved tokenizer (a `bos_token`,
    a `chat_template` of several named templates)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(form)
    _save_tokenizer(tokenizer, directory, form, response_template, tokenizer_settings or {})
    token_lengths = _token_byte_lengths(tokenizer)
    vocab_size = len(token_lengths)
    _write_json(directory / "config.json", _model_config(tokenizer, vocab_size, form))
    _write_json(
        directory / "generation_config.json",
        {"eos_token_id": [tokenizer.token_to_id(token) for token in form.end_tokens]},
    )
    _save_weights(directory / "model.safetensors", token_lengths)
    return directory


def model_type_refused(model_type: str) -> str | None:
    """Why a checkpoint's `model_type` cannot be kept in its tiny clone (None: it can): kept are `qwen3` and
    the model types a server decides by (SERVER_MODEL_TYPES) whose transformers configuration reads the tiny
    Qwen3 body's settings unchanged."""
    from transformers import AutoConfig

    if model_type == "qwen3":
        return None
    if model_type not in SERVER_MODEL_TYPES:
        return "no server the suite runs decides by it"
    body = {key: value for key, value in _model_config(None, 1, DEFAULT_FORMAT).items() if key in _BODY_SETTINGS}
    try:
        config = AutoConfig.for_model(model_type, **body)
    except (ValueError, KeyError, TypeError) as exc:
        return f"transformers cannot configure it: {exc}"
    changed = sorted(key for key, value in body.items() if getattr(config, key, None) != value)
    return f"its transformers configuration changes the tiny body's {', '.join(changed)}" if changed else None


def _build_tokenizer(form: Format):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in form.special_tokens])
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in form.delimiter_tokens])
    return tokenizer


def _save_tokenizer(tokenizer, directory: Path, form: Format, response_template: dict | None,
                    settings: Mapping[str, Any]) -> None:
    """Save through transformers, as a checkpoint author would (tokenizer_config.json and
    chat_template.jinja come out in transformers' own layout)."""
    from transformers import PreTrainedTokenizerFast

    extra = {} if response_template is None else {"response_template": response_template}
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=form.eos_token,
        pad_token=form.pad_token,
        model_max_length=MAX_POSITIONS,
        **{"chat_template": form.chat_template, **settings},
        **extra,
    )
    # Save into a scratch directory and move the files, so stale files of a previous variant
    # (e.g. a response_template) cannot survive and nothing depends on the target's contents.
    with tempfile.TemporaryDirectory() as scratch:
        wrapped.save_pretrained(scratch)
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
            target = directory / name
            source = Path(scratch) / name
            if source.exists():
                shutil.copyfile(source, target)
            elif target.exists():
                target.unlink()
        shutil.rmtree(directory / EXTRA_TEMPLATES, ignore_errors=True)
        if (Path(scratch) / EXTRA_TEMPLATES).is_dir():
            shutil.copytree(Path(scratch) / EXTRA_TEMPLATES, directory / EXTRA_TEMPLATES)


def _token_byte_lengths(tokenizer) -> np.ndarray:
    """Length in bytes of every token's text, indexed by token id (a byte-level BPE token is
    spelled with one character per byte; added tokens are plain text)."""
    import numpy as np

    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    lengths = np.zeros(len(vocab), dtype=np.float32)
    for token, token_id in vocab.items():
        lengths[token_id] = len(token.encode()) if token in added else len(token)
    return lengths


def _model_config(tokenizer: Any, vocab_size: int, form: Format) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": form.model_type,
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "use_sliding_window": False,
        # Every layer full attention, stated rather than left to the configuration class `model_type` names: a
        # gpt_oss one would alternate sliding and full layers, which vLLM's Qwen3 body refuses at load.
        "layer_types": ["full_attention"] * NUM_LAYERS,
        "max_window_layers": NUM_LAYERS,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": tokenizer.token_to_id(form.eos_token) if tokenizer else None,
        "pad_token_id": tokenizer.token_to_id(form.pad_token) if tokenizer else None,
    }


def _save_weights(path: Path, token_lengths: np.ndarray) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(SEED)
    vocab_size = len(token_lengths)

    def noise(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * NOISE_SCALE).astype(np.float32)

    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32)

    def ones(*shape: int) -> np.ndarray:
        return np.ones(shape, dtype=np.float32)

    embedding = noise(vocab_size, HIDDEN_SIZE)
    embedding[:, LENGTH_DIMENSION] = token_lengths
    final_norm = zeros(HIDDEN_SIZE)
    final_norm[LENGTH_DIMENSION] = FINAL_NORM_GAIN
    tensors = {"model.embed_tokens.weight": embedding, "model.norm.weight": final_norm}
    for layer in range(NUM_LAYERS):
        prefix = f"model.layers.{layer}."
        tensors |= {
            prefix + "input_layernorm.weight": ones(HIDDEN_SIZE),
            prefix + "post_attention_layernorm.weight": ones(HIDDEN_SIZE),
            prefix + "self_attn.q_proj.weight": noise(NUM_HEADS * HEAD_DIM, HIDDEN_SIZE),
            prefix + "self_attn.k_proj.weight": noise(NUM_KV_HEADS * HEAD_DIM, HIDDEN_SIZE),
            prefix + "self_attn.v_proj.weight": noise(NUM_KV_HEADS * HEAD_DIM, HIDDEN_SIZE),
            prefix + "self_attn.o_proj.weight": zeros(HIDDEN_SIZE, NUM_HEADS * HEAD_DIM),
            prefix + "self_attn.q_norm.weight": ones(HEAD_DIM),
            prefix + "self_attn.k_norm.weight": ones(HEAD_DIM),
            prefix + "mlp.gate_proj.weight": noise(INTERMEDIATE_SIZE, HIDDEN_SIZE),
            prefix + "mlp.up_proj.weight": noise(INTERMEDIATE_SIZE, HIDDEN_SIZE),
            prefix + "mlp.down_proj.weight": zeros(HIDDEN_SIZE, INTERMEDIATE_SIZE),
        }
    save_file(tensors, str(path), metadata={"format": "pt"})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
