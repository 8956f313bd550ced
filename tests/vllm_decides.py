"""vLLM's own startup decision for a tokenizer_config's `response_template`, from vLLM's functions (no server).

Whichever vLLM is importable decides: the 0.32 differential test calls it in-process; for another
release (0.33's overlay) `python -m tests.vllm_decides` runs as a worker under that release's
PYTHONPATH (`DecisionWorker`): each line in is a JSON list of tokenizer_configs, each line out the
list of their decisions (and, under `ENGINE`, the engine configuration's alone, for the Rust
frontend's managed engine), so a whole corpus costs one line and one process.

The tokenizer is a minimal stand-in (`response_template` attribute and `init_kwargs`, as transformers
exposes them); the decision follows vLLM's start-up order: the engine configuration (with a reasoning
parser only: `ReasoningConfig.initialize_token_ids` instantiates it and reads its start and end strings),
then the frontend (`ParserManager.get_parser` -> `_compose_parser` -> `validate_tokenizer_response_template`,
then the parser instantiation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from conformance.audit.predictors.vllm_032 import StartupVerdict

# configuration -> (--tool-call-parser, --reasoning-parser, --enable-auto-tool-choice), as CONFIGURATIONS
Startup = tuple[str | None, str | None, bool]
STARTUPS: dict[str, Startup] = {
    "tool_call_parser_hf": ("hf", None, True),
    "reasoning_parser_hf": (None, "hf", False),
    "both": ("hf", "hf", True),
}


ENGINE = "engine configuration, --reasoning-parser hf"


class TokenizerStandIn:
    """What vLLM reads from a transformers tokenizer for the hf parser, and little else."""

    def __init__(self, tokenizer_config: dict) -> None:
        self.response_template = tokenizer_config.get("response_template")
        self.init_kwargs = dict(tokenizer_config)

    def get_vocab(self) -> dict[str, int]:
        return {}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(character) for character in text]

    def decode(self, token_ids, **kwargs) -> str:
        return "".join(map(chr, token_ids))


def vllm_engine_error(tokenizer: object, reasoning: str = "hf") -> str | None:
    """The engine configuration's error with `--reasoning-parser <reasoning>` (None: it accepts it)."""
    from vllm.reasoning import ReasoningParserManager

    try:
        parser = ReasoningParserManager.get_reasoning_parser(reasoning)(tokenizer)
        parser.reasoning_start_str, parser.reasoning_end_str  # noqa: B018 (what the engine reads next)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def vllm_errors_for(tokenizer: object, startups: dict[str, Startup] = STARTUPS) -> dict[str, str | None]:
    """vLLM's first error per start-up (None: it starts)."""
    from vllm.parser.parser_manager import ParserManager

    def frontend(tool: str | None, reasoning: str | None, auto_tools: bool) -> str | None:
        try:
            ParserManager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                     enable_auto_tools=auto_tools, model_name="checkpoint", tokenizer=tokenizer)
        except TypeError as exc:
            return str(exc)
        return None

    return {name: (reasoning and vllm_engine_error(tokenizer, reasoning)) or frontend(tool, reasoning, auto_tools)
            for name, (tool, reasoning, auto_tools) in startups.items()}


def as_verdicts(errors: dict[str, str | None]) -> dict[str, StartupVerdict]:
    return {name: StartupVerdict(starts=error is None, error=error) for name, error in errors.items()}


def vllm_decides_for(tokenizer: object) -> dict[str, StartupVerdict]:
    return as_verdicts(vllm_errors_for(tokenizer))


def vllm_decides(tokenizer_config: dict) -> dict[str, StartupVerdict]:
    return vllm_decides_for(TokenizerStandIn(tokenizer_config))


class DecisionWorker:
    """`python -m tests.vllm_decides` under `python_path` (first on PYTHONPATH, then this checkout);
    `version` is the vLLM it imports."""

    def __init__(self, python_path: str, startups: dict[str, Startup] = STARTUPS) -> None:
        root = str(Path(__file__).resolve().parents[1])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.vllm_decides", json.dumps(startups)], cwd=root, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([python_path, root])})
        self.version = self.process.stdout.readline().strip()  # the worker's vllm.__version__ comes first
        if not self.version:
            raise RuntimeError(f"the decision worker exited with {self.process.wait()} before answering")

    def errors(self, tokenizer_configs: list[dict]) -> list[dict[str, str | None]]:
        self.process.stdin.write(json.dumps(tokenizer_configs) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the decision worker exited with {self.process.wait()}")
        answers = json.loads(line)
        if isinstance(answers, dict):
            raise RuntimeError(f"the decision worker failed: {answers['exception']}")
        return answers

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def overlay_worker(release: str = "0.33.0", startups: dict[str, Startup] = STARTUPS) -> DecisionWorker:
    """A worker over vLLM `release`'s overlay, as the hf-0.33 profile runs it (built on first use)."""
    from conformance.servers.runtimes.vllm_033 import VllmCpuOverlay

    worker = DecisionWorker(VllmCpuOverlay(release).resolve(None).env["PYTHONPATH"], startups)
    if worker.version != release:
        worker.close()
        raise RuntimeError(f"the worker over the {release} overlay imports vLLM {worker.version}")
    return worker


def _serve(startups: dict[str, Startup]) -> None:
    protocol, sys.stdout = sys.stdout, sys.stderr  # vLLM logs to "sys.stdout": keep its lines out of the answers
    import vllm

    print(vllm.__version__, file=protocol, flush=True)
    for line in sys.stdin:
        try:
            tokenizers = [TokenizerStandIn(config) for config in json.loads(line)]
            answer: object = [{**vllm_errors_for(tokenizer, startups), ENGINE: vllm_engine_error(tokenizer)}
                              for tokenizer in tokenizers]
        except Exception:  # noqa: BLE001 (vLLM raising anything else is a finding for the caller)
            answer = {"exception": traceback.format_exc()}
        print(json.dumps(answer), file=protocol, flush=True)


if __name__ == "__main__":
    _serve({name: tuple(startup) for name, startup in json.loads(sys.argv[1]).items()})
