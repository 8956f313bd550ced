"""A checkpoint whose chat template is a shipped format's: the response_template vLLM 0.32 serves for it.

Of the families people serve, only Gemma 4 ships `response_template` in its checkpoints; Qwen, GLM and
gpt-oss checkpoints carry none, and the templates TRL vendors for them name reasoning `reasoning_content`,
which vLLM 0.32 refuses. A checkpoint's chat template that is, byte for byte but for surrounding whitespace,
the chat template of a shipped format record (`conformance.formats.checkpoint_format.record_of_chat_template`: templates copied verbatim
from the published checkpoints, as TRL keeps them for identity matching) names the format; when the
checkpoint has no response_template, or one vLLM 0.32 refuses, the format's own is the one to add
(`conformance audit --local DIR --write-template FILE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from conformance.audit.template_rules import Finding
from conformance.formats.format import Format

TEMPLATE_KEY = "response_template"


def known_format_finding(form: Format) -> Finding:
    """What the audit says about a checkpoint of a known format that vLLM 0.32's hf parsers cannot start on:
    where the response_template they serve comes from."""
    return Finding("known-format", f"its chat template is the {form.name} format's ({form.description}); its "
                   "response_template is missing or refused by vLLM 0.32: `conformance audit --local DIR "
                   f"--write-template FILE` writes its tokenizer_config.json with the {form.name} format's, which "
                   "vLLM 0.32 serves")


def with_format_template(tokenizer_config: Mapping[str, Any], form: Format) -> str:
    """The checkpoint's tokenizer_config.json text with the format's response_template in place of its own."""
    return json.dumps({**tokenizer_config, TEMPLATE_KEY: dict(form.response_template)}, indent=2,
                      ensure_ascii=False) + "\n"
