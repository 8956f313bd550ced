"""Conformance suite for Hugging Face response_template parsers (vLLM 0.32 `hf` first)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hf-parser-conformance")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"
