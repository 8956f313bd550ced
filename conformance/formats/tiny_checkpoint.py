"""The tiny deterministic checkpoint that real vLLM serves in our tests (`conformance fixture build`).

A Qwen3-architecture model (2 layers, head_dim 64: the CPU attention backend refuses 16) with a
byte-level BPE tokenizer carrying Qwen's markers, a Hermes/Qwen3-style chat template and, depending
on the variant, a `response_template` (contract section 6, literal delimiters only: vLLM's Rust
frontend refuses regex delimiters, which the `non-literal-pattern` variant has).

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

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

VARIANTS: tuple[str, ...] = ("full", "no-template", "thinking-only", "tools-only", "reasoning-content",
                             "non-literal-pattern", "eos-closes-content", "closer-ends-with-anchor")
# The content field's closing delimiter as a pattern that does not start with a literal (the shape
# transformers ships as its qwen3 fallback): vLLM's Python frontend serves it, the Rust frontend
# starts and then refuses every chat request with HTTP 500 ("must start with a literal prefix").
NON_LITERAL_CLOSE_PATTERN = r"\s*(?:<\|im_end\|>|<\|endoftext\|>)"

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKER_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
"""Added, not special (as Qwen3 does): they stay in decoded text."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

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

RESPONSE_TEMPLATE_FULL: dict = {
    "version": 1,
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {},
    },
}

CHAT_TEMPLATE = """\
{%- macro render_content(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- elif content -%}{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages and messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + render_content(message.content) + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- set reasoning = message.reasoning or message.reasoning_content %}
        {%- if reasoning %}
            {{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- render_content(message.content) }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- set call = tool_call.function if tool_call.function else tool_call %}
            {%- if loop.first and message.content %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}
            {{- '<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
            {%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""
"""Hermes/Qwen3 style. The generation prompt does not pre-write `<think>` (the observed outcomes
were taken that way); `enable_thinking=false` writes an empty reasoning block, as Qwen3 does."""


def response_template_for(variant: str) -> dict | None:
    """The `response_template` that `variant` ships (None: the key is absent)."""
    check_variant(variant)
    if variant == "no-template":
        return None
    template = copy.deepcopy(RESPONSE_TEMPLATE_FULL)
    fields = template["fields"]
    if variant == "thinking-only":
        del fields["tool_calls"]
    elif variant == "tools-only":
        del fields["thinking"]
    elif variant == "reasoning-content":
        # vLLM 0.32 serves only thinking/content/tool_calls: this name is refused at startup.
        renamed = {"thinking": "reasoning_content"}
        template["fields"] = {renamed.get(name, name): spec for name, spec in fields.items()}
    elif variant == "non-literal-pattern":
        fields["content"] = {"close_pattern": NON_LITERAL_CLOSE_PATTERN}
    elif variant == "eos-closes-content":
        # `transformers serve` hands the decoded end token to the parser, which puts it in the
        # implicit content field; a content field closing on it keeps it out (the server under test
        # then parses what vLLM parses: vLLM drops the end token before its parser sees it).
        fields["content"] = {"close": EOS_TOKEN}
    elif variant == "closer-ends-with-anchor":
        # `</tool_call>` then the next assistant turn's start anchor (Gemma 4's closers end with its
        # next turn's start anchor): an output that stops right after `</tool_call>` stopped inside
        # the closer, which vLLM 0.33 completes and vLLM 0.32 does not.
        fields["tool_calls"]["close"] = "</tool_call>" + template["start_anchor"]
    return template


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown fixture variant {variant!r}; choose one of: {', '.join(VARIANTS)}")


def build_fixture(directory: Path, variant: str = "full") -> Path:
    """Write the checkpoint of `variant` into `directory` (created; existing files are replaced).

    Returns the directory. With the same library versions the bytes depend on nothing else (not on
    time, randomness or what the directory held before).
    """
    check_variant(variant)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer()
    _save_tokenizer(tokenizer, directory, response_template_for(variant))
    token_lengths = _token_byte_lengths(tokenizer)
    vocab_size = len(token_lengths)
    _write_json(directory / "config.json", _model_config(tokenizer, vocab_size))
    _write_json(
        directory / "generation_config.json",
        {"eos_token_id": [tokenizer.token_to_id(EOS_TOKEN), tokenizer.token_to_id(PAD_TOKEN)]},
    )
    _save_weights(directory / "model.safetensors", token_lengths)
    return directory


def _build_tokenizer():
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in MARKER_TOKENS])
    return tokenizer


def _save_tokenizer(tokenizer, directory: Path, response_template: dict | None) -> None:
    """Save through transformers, as a checkpoint author would (tokenizer_config.json and
    chat_template.jinja come out in transformers' own layout)."""
    from transformers import PreTrainedTokenizerFast

    extra = {} if response_template is None else {"response_template": response_template}
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
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


def _model_config(tokenizer, vocab_size: int) -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
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
        "tie_word_embeddings": True,
        "dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
        "pad_token_id": tokenizer.token_to_id(PAD_TOKEN),
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
