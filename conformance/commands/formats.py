"""`conformance formats`: the response formats the suite speaks, one record each."""

from __future__ import annotations

import argparse

from conformance.commands import add_verb
from conformance.util import exit_codes

DESCRIPTION = """\
The response formats the suite speaks, each a record (conformance/formats/): its chat template and
response_template, its tokens, the vLLM parser flags that serve it as "legacy" and where its files come
from. `conformance fixture build DIR --format NAME` builds a tiny checkpoint of one. The live cases run in
the tiny checkpoint's format (qwen3-hermes) today.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_verb(subparsers, "formats", "list the response formats the suite speaks", DESCRIPTION)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.formats.registry import DEFAULT_FORMAT, FORMATS

    for form in FORMATS.values():
        default = " (default: the tiny checkpoint's)" if form is DEFAULT_FORMAT else ""
        print(f"{form.name}{default}: {form.description}")
        environment = " ".join(f"{key}={value}" for key, value in form.legacy_env.items())
        print(f"  legacy: {' '.join(form.legacy_flags)}" + (f" (environment: {environment})" if environment else ""))
        print(f"  chat template: {'yes' if form.chat_template else 'none known'}; model_type: {form.model_type}; "
              f"variants: {', '.join(form.variant_names)}")
        print(f"  from: {form.provenance}")
    return exit_codes.OK
