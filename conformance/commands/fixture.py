"""`conformance fixture build DIR [--format NAME] [--variant NAME]`: write the tiny deterministic checkpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.commands import add_verb
from conformance.util import exit_codes

DESCRIPTION = """\
Write the tiny deterministic checkpoint that real vLLM serves in this project's tests: a Qwen3
model (random weights shaped so forced outputs come out canonically tokenized), a byte-level BPE
tokenizer with <think>/<tool_call> markers, a Hermes/Qwen3 chat template and, per variant, a
response_template. Building the same variant twice gives identical bytes. With --format NAME (see
`conformance formats`), the same model speaks another response format: that format's special and
delimiter tokens (each one token), its chat template, its response_template and end tokens; its
variants are `full` and `no-template`.

With --from CHECKPOINT (a local directory, or a Hub repo id `owner/name[@revision]` fetched through
huggingface_hub with the audit's bounds: HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE apply), the same model
clones any checkpoint: its chat template and response_template byte for byte, every token of its
added_tokens_decoder, every literal delimiter of both templates as one token, its end tokens
(eos_token, generation_config.json's eos_token_id) and its model_type where a server decides by it
and the tiny body still loads (else the output says why not). Only tokenizer_config.json is needed;
chat_template.jinja/.json, config.json, generation_config.json and tokenizer.json are read when
present (a Hub source: all but tokenizer.json), weights never. The token ids are the clone's own.

variants:
  full               thinking + content + tool_calls (vLLM starts with the hf parser)
  no-template        no response_template (hf refuses to start)
  thinking-only      no tool_calls field (--tool-call-parser hf refuses)
  tools-only         no thinking field (--reasoning-parser hf refuses)
  reasoning-content  the reasoning field named reasoning_content (vLLM 0.32 refuses it)
  eos-closes-content full, with the content field closing on <|im_end|> (for transformers serve,
                     which hands the end token to its parser)
  closer-ends-with-anchor  full, with the tool-call closer `</tool_call>` followed by the start
                     anchor `<|im_start|>assistant\\n` (the closer shape vLLM 0.33 completes)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
    from conformance.formats.tiny_checkpoint import VARIANTS

    parser = add_verb(
        subparsers, "fixture", "build the tiny test checkpoint", "Tiny test checkpoints for real vLLM."
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = add_verb(actions, "build", "write the tiny checkpoint into DIR", DESCRIPTION)
    build.add_argument("directory", metavar="DIR", type=Path, help="output directory (created; files replaced)")
    build.add_argument("--format", choices=sorted(FORMATS), metavar="NAME",
                       help=f"response format (default: {DEFAULT_FORMAT.name}; `conformance formats` lists them)")
    build.add_argument("--variant", metavar="NAME",
                       help=f"which checkpoint (default: full; {DEFAULT_FORMAT.name}: {', '.join(VARIANTS)})")
    build.add_argument("--from", dest="source", metavar="CHECKPOINT",
                       help="clone this checkpoint (a directory or a Hub repo id) instead of a format's record")
    build.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from conformance.formats.registry import DEFAULT_FORMAT, FORMATS
    from conformance.formats.tiny_checkpoint import build_fixture

    if args.source is not None:
        if args.format is not None or args.variant is not None:
            print("conformance fixture build: error: --from takes neither --format nor --variant", file=sys.stderr)
            return exit_codes.ERROR
        return _build_clone(args.source, args.directory)
    form = FORMATS[args.format or DEFAULT_FORMAT.name]
    args.variant = args.variant or "full"
    if args.variant not in form.variant_names:  # worded as argparse words an unknown choice
        choices = ", ".join(repr(name) for name in form.variant_names)
        print(f"conformance fixture build: error: argument --variant: invalid choice: {args.variant!r} "
              f"(the {form.name} format has: {choices})", file=sys.stderr)
        return exit_codes.ERROR
    try:
        directory = build_fixture(args.directory, args.variant, form)
    except OSError as error:
        print(f"error: cannot write the fixture into {args.directory}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"built the {args.variant!r} fixture of the {form.name} format in {directory}")
    return exit_codes.OK


def _build_clone(source: str, directory: Path) -> int:
    from conformance.formats.checkpoint_clone import CloneInputError, clone_checkpoint

    try:
        files, name = _source(source)
        clone = clone_checkpoint(files, directory, name)
    except CloneInputError as error:
        print(f"conformance fixture build: error: {error}", file=sys.stderr)
        return exit_codes.ERROR
    except OSError as error:
        print(f"error: cannot write the clone into {directory}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"built a tiny clone of {name} in {clone.directory}")
    print(f"  special tokens: {' '.join(clone.special_tokens) or 'none'}")
    print(f"  delimiter tokens: {' '.join(clone.delimiter_tokens) or 'none'}")
    print(f"  end tokens: {' '.join(clone.stop_tokens)}; model_type: {clone.model_type}")
    for note in clone.notes:
        print(f"  note: {note}")
    return exit_codes.OK


def _source(source: str) -> tuple[dict[str, Path], str]:
    """The source checkpoint's files (name -> path) and its name in messages: a local directory, else a Hub
    repo id fetched (CloneInputError when it is neither, or the fetch fails)."""
    from conformance.audit.checkpoint_list import CheckpointsError, parse_spec
    from conformance.audit.hub import HubSettings, fetch_checkpoint
    from conformance.formats.checkpoint_clone import CloneInputError, source_files
    from conformance.formats.checkpoint_files import OK

    path = Path(source)
    if path.is_dir():
        return source_files(path), str(path)
    if path.exists() or source.startswith((".", "/", "~")) or source.partition("@")[0].count("/") != 1:
        raise CloneInputError(f"--from: {source!r} is neither a checkpoint directory nor a Hub repo id (owner/name)")
    try:
        entry = parse_spec(source)
    except CheckpointsError as error:
        raise CloneInputError(f"--from: {error}") from error
    fetched = fetch_checkpoint(entry.repo, entry.revision, HubSettings.from_env())
    name = f"{entry.repo}@{fetched.commit or entry.revision}"
    if fetched.status != OK:
        raise CloneInputError(f"{name}: {fetched.status}: {fetched.error}")
    return dict(fetched.files), name
