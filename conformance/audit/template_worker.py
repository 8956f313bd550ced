"""The template analysis in a worker process, bounded in time and memory (`conformance.util.bounded_worker`):
its address space capped at WORKER_MEMORY_BYTES, killed and replaced when an analysis overruns its time
limit."""

from __future__ import annotations

from conformance.audit.predictors.vllm_032 import StartupVerdict
from conformance.audit.template_rules import (
    ANALYSIS_TIMEOUT_S,
    TemplateAnalysis,
    TemplateAnalysisTimeout,
    TemplateTooExpensive,
)
from conformance.util.bounded_worker import BoundedWorker, CallFailed, CallTimeout, CallTooExpensive

WORKER_MEMORY_BYTES = 1024 * 1024 * 1024  # the worker's address space (a regex can ask for gigabytes)
WORKER = BoundedWorker(WORKER_MEMORY_BYTES)


def analyze_template(tokenizer_config: dict, timeout: float = ANALYSIS_TIMEOUT_S,
                     model_type: str | None = None) -> TemplateAnalysis:
    """Analyse the metadata of one tokenizer_config.json (and config.json's `model_type`), bounded in time
    (raises TemplateAnalysisTimeout) and memory (raises TemplateTooExpensive), in a worker process."""
    try:
        return WORKER.call("conformance.audit.template_rules:analyze_template_unbounded",
                           (tokenizer_config, model_type), timeout)
    except CallTimeout as exc:
        raise TemplateAnalysisTimeout(f"analysing the response_template {exc} "
                                      "(a regex too expensive to compile or search)") from None
    except CallTooExpensive as exc:
        raise TemplateTooExpensive(f"analysing the response_template needed {exc} "
                                   "(a regex too expensive to compile)") from None
    except CallFailed as exc:
        raise RuntimeError(f"template analysis failed: {exc}") from None


def predict_vllm_startup(tokenizer_config: dict) -> dict[str, StartupVerdict]:
    """vLLM 0.32's startup outcome for each configuration in CONFIGURATIONS, with vLLM's own message."""
    return analyze_template(tokenizer_config).vllm_0_32
