"""SGLang 0.5.23's own decisions about a checkpoint's `response_template`, by calling its code.

Run as a child process with SGLang's whole wheel (installed without dependencies,
`registry.sglang_install()`) first on PYTHONPATH, on this project's interpreter (torch 2.13 CPU and
transformers 5.19, SGLang's pin). It reads one JSON list of tokenizer_config dicts on standard input and
writes the decisions, one per input, keyed like `audit_sglang.SGLANG_CONFIGURATIONS`, with the parser names
its `--tool-call-parser` and `--reasoning-parser` accept (their argparse choices). An
input `{"directory": PATH}` is a checkpoint directory read with transformers' real tokenizer instead.

What is SGLang's and what is not: every decision is an SGLang function called with the arguments its
server passes (source references below, files of the 0.5.23 wheel); only the order of the calls and what
the server does with an exception are read from the server's code, which cannot run here (its kernels
are CUDA-only). The one module stubbed is `IPython` (imported at module level by `sglang/utils.py` for
notebook helpers, absent from this environment); its stand-ins raise if the validation ever calls them.
The tokenizer is a stand-in exposing what SGLang reads from a transformers tokenizer for this parser
(`response_template` / `init_kwargs`, `encode`); the fixture test also uses the real one, transformers'
`AutoTokenizer` (which SGLang's `get_tokenizer` wraps; the wrapper's package imports torchvision through
the multimodal model configurations, which this environment does not have).
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

PARSER = "response_template"


def _stub_ipython() -> None:
    def unavailable(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("IPython is stubbed: SGLang's validation was not expected to call it")

    package, display = types.ModuleType("IPython"), types.ModuleType("IPython.display")
    display.HTML = display.display = unavailable
    package.display = display
    sys.modules.setdefault("IPython", package)
    sys.modules.setdefault("IPython.display", display)


class TokenizerStandIn:
    """What SGLang reads from a transformers tokenizer for the response_template parsers, and little else."""

    def __init__(self, tokenizer_config: dict) -> None:
        self.response_template = tokenizer_config.get("response_template")
        self.init_kwargs = dict(tokenizer_config)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(character) for character in text]

    def decode(self, token_ids: list[int], **_kwargs: Any) -> str:
        return "".join(map(chr, token_ids))


def _failure(error: BaseException) -> dict[str, Any]:
    return {"type": type(error).__name__, "message": str(error)}


def decide(tokenizer: Any) -> dict[str, dict[str, Any]]:
    """SGLang 0.5.23's outcome per configuration, in its start-up order, then a chat request with tools."""
    from sglang.srt.entrypoints.openai.protocol import Function, Tool
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser
    from sglang.srt.parser.response_template import tool_close_token_ids

    def scheduler() -> dict | None:
        """`Scheduler.init_tokenizer` (managers/scheduler.py:940-975), with --reasoning-parser set: not
        guarded, so an exception ends the scheduler (`run_scheduler_process`: "Scheduler hit an
        exception", SIGQUIT to the server)."""
        try:
            parser = ReasoningParser(model_type=PARSER, stream_reasoning=False, tokenizer=tokenizer)
            if parser.detector.get_think_end_token_ids(tokenizer):
                parser.detector.get_self_opened_think_start_token_ids(tokenizer)
            for end_token in getattr(parser.detector, "request_selectable_think_end_tokens", ()):
                if not tokenizer.encode(end_token, add_special_tokens=False):
                    raise ValueError(f"think end token {end_token!r} encodes to no tokens")
        except Exception as error:  # noqa: BLE001 - any exception stops the scheduler
            return _failure(error)
        return None

    def detokenizer() -> dict | None:
        """`DetokenizerManager.init_running_status` (managers/detokenizer_manager.py:160), with
        --tool-call-parser set: `tool_close_tokens` swallows ValueError; anything else ends the
        detokenizer ("DetokenizerManager hit an exception", SIGQUIT to the server)."""
        try:
            tool_close_token_ids(PARSER, tokenizer)
        except Exception as error:  # noqa: BLE001
            return _failure(error)
        return None

    def tool_request() -> dict | None:
        """A chat request with tools and tool_choice auto: `OpenAIServingChat._process_messages`
        (entrypoints/openai/serving_chat.py:1873-1882) builds the FunctionCallParser and its constraint;
        `OpenAIServingBase.handle_request` answers a ValueError 400, anything else 500."""
        tools = [Tool(type="function", function=Function(
            name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}}))]
        try:
            parser = FunctionCallParser(tools, PARSER, tokenizer=tokenizer)
            parser.get_structure_constraint("auto", parallel_tool_calls=True, thinking_mode=False)
        except Exception as error:  # noqa: BLE001
            return _failure(error)
        return None

    reasoning_start, tools_start, request = scheduler(), detokenizer(), tool_request()
    return {
        "tool_call_parser_hf": _verdict(tools_start, request),
        "reasoning_parser_hf": _verdict(reasoning_start, None),
        "both": _verdict(reasoning_start or tools_start, request),
    }


def _verdict(start: dict | None, tool_request: dict | None) -> dict[str, Any]:
    """What the server does with those outcomes (`audit_sglang.SGLangVerdict`'s fields)."""
    if start is not None:
        return {"outcome": "refuses_to_start", "error": start["message"], "http_status": None}
    if tool_request is None:
        return {"outcome": "starts", "error": None, "http_status": None}
    if tool_request["type"] == "ValueError":
        return {"outcome": "starts_but_refuses_tool_requests", "error": tool_request["message"], "http_status": 400}
    return {"outcome": "starts_but_refuses_tool_requests", "http_status": 500,
            "error": f"Internal server error: {tool_request['message']}"}


def _tokenizer(entry: dict) -> Any:
    if set(entry) == {"directory"}:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(entry["directory"])
    return TokenizerStandIn(entry)


def main() -> None:
    _stub_ipython()
    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    decisions = [decide(_tokenizer(entry)) for entry in json.load(sys.stdin)]
    json.dump({"decisions": decisions, "tool_call_parsers": sorted(TOOL_CALL_PARSER_NAMES),
               "reasoning_parsers": sorted(REASONING_PARSER_NAMES)}, sys.stdout)


if __name__ == "__main__":
    main()
