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

variants:
  full               thinking + content + tool_calls (vLLM starts with the hf parser)
  no-template        no response_template (hf refuses to start)
  thinking-only      no tool_calls field (--tool-call-parser hf refuses)
  tools-only         no thinking field (--reasoning-parser hf refuses)
  reasoning-content  the reasoning field named reasoning_content (vLLM 0.32 refuses it)
  eos-closes-content full, with the content field closing on <|im_end|> (for transformers serve,
                     which hands the end token to its parser)
  closer-ends-with-anchor  full, with the tool-call closer `</tool_call>` followed by the start
                     anchor `<|im_start|>assistant\n` (the closer shape vLLM 0.33 completes)
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
    build.add_argument("--format", default=DEFAULT_FORMAT.name, choices=sorted(FORMATS), metavar="NAME",
                       help=f"response format (default: {DEFAULT_FORMAT.name}; `conformance formats` lists them)")
    build.add_argument("--variant", default="full", metavar="NAME",
                       help=f"which checkpoint (default: full; {DEFAULT_FORMAT.name}: {', '.join(VARIANTS)})")
    build.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    from conformance.formats.registry import FORMATS
    from conformance.formats.tiny_checkpoint import build_fixture

    form = FORMATS[args.format]
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
