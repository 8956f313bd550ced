"""Every predicted server release, one line each, in the order of the audit report's keys."""

from __future__ import annotations

from conformance.audit.predictors import sglang, vllm_032, vllm_033
from conformance.audit.predictors.predictor import Predictor

PREDICTORS: tuple[Predictor, ...] = (*vllm_032.PREDICTORS, *vllm_033.PREDICTORS, sglang.PREDICTOR)
PREDICTOR_BY_KEY = {predictor.key: predictor for predictor in PREDICTORS}
PREDICTOR_KEYS = tuple(PREDICTOR_BY_KEY)
