"""Metric names the operator reads and exports, and the latency kinds an SLO can govern.

vLLM's names, the runtime's and the buckets come from `governor_runtime.contract` (one definition shared
with the runtime and the twin); the operator's own series are named here.
"""

from __future__ import annotations

from enum import StrEnum

# vLLM's names and the runtime's, and the buckets: one definition, in the contract the runtime owns.
from governor_runtime.contract import (  # re-exported for the operator's modules
    E2E_LATENCY,
    GENERATION_TOKENS,
    INFERENCE_TIME,
    INTER_TOKEN_LATENCY,
    KV_CACHE_USAGE,
    LONG_PROMPT_FACTOR,
    LONG_PROMPT_FACTOR_ENV,
    PER_TOKEN_BUCKETS,
    PREEMPTIONS,
    PROMPT_TOKENS,
    QUEUE_TIME,
    REQUEST_BUCKETS,
    REQUEST_GENERATION_TOKENS,
    REQUEST_PROMPT_TOKENS,
    REQUEST_SUCCESS,
    RUNNING,
    RUNTIME_CAP,
    RUNTIME_CEILING,
    RUNTIME_LONG_PROMPTS,
    RUNTIME_PROMPT_P95,
    RUNTIME_STEP_CONTEXT_TOKENS,
    RUNTIME_STEP_PREFILL_TOKENS,
    RUNTIME_STEP_SECONDS,
    RUNTIME_STEP_SEQUENCES,
    RUNTIME_STEPS,
    RUNTIME_TOKEN_BUDGET,
    TPOT,
    TTFT,
    WAITING,
    WAITING_BY_REASON,
)

# Exported by the operator (labels: namespace, name) on its own /metrics.
OP_CAP = "governor_cap"
OP_CEILING = "governor_cap_ceiling"
OP_CAP_FLOOR = "governor_cap_floor"
OP_P99 = "governor_latency_p99_seconds"
OP_P99_SMOOTHED = "governor_latency_p99_smoothed_seconds"
OP_SLO_TARGET = "governor_slo_target_seconds"
OP_DECISIONS = "governor_decisions_total"
OP_DESIRED_REPLICAS = "governor_desired_replicas"
# The levers law's models at each tick (absent from the rule table): the caps bracketing its choice, and the
# queue model's arrivals and service at the cap decided.
OP_MODEL_PER_TOKEN_CAP = "governor_model_per_token_cap"
OP_MODEL_QUEUE_FLOOR = "governor_model_queue_floor"
OP_MODEL_ARRIVALS = "governor_model_arrivals_rps"
OP_MODEL_SERVICE = "governor_model_service_rps"
# What one engine step costs, as the levers law fits it on the runtime's step counters (label: part).
OP_MODEL_STEP_COST = "governor_model_step_cost_seconds"
OP_RECONCILES = "governor_reconciles_total"
OP_RECONCILE_ERRORS = "governor_reconcile_errors_total"
OP_MANAGED = "governor_managed_objects"
OP_CHILD_WRITES = "governor_child_writes_total"


class LatencyKind(StrEnum):
    """Which latency the SLO is about. TPOT is the per-token signal the cap governs (DESIGN.md)."""

    TPOT = "tpot"
    INTER_TOKEN = "interToken"
    TTFT = "ttft"
    E2E = "e2e"

    @property
    def histogram(self) -> str:
        return _HISTOGRAMS[self]

    @property
    def per_token(self) -> bool:
        """Per-token latencies are answered by the cap; queue-driven ones by replicas."""
        return self in (LatencyKind.TPOT, LatencyKind.INTER_TOKEN)


_HISTOGRAMS = {
    LatencyKind.TPOT: TPOT,
    LatencyKind.INTER_TOKEN: INTER_TOKEN_LATENCY,
    LatencyKind.TTFT: TTFT,
    LatencyKind.E2E: E2E_LATENCY,
}

__all__ = [
    "E2E_LATENCY",
    "GENERATION_TOKENS",
    "INFERENCE_TIME",
    "INTER_TOKEN_LATENCY",
    "KV_CACHE_USAGE",
    "LONG_PROMPT_FACTOR",
    "LONG_PROMPT_FACTOR_ENV",
    "OP_CAP",
    "OP_CAP_FLOOR",
    "OP_CEILING",
    "OP_CHILD_WRITES",
    "OP_DECISIONS",
    "OP_DESIRED_REPLICAS",
    "OP_MANAGED",
    "OP_MODEL_ARRIVALS",
    "OP_MODEL_PER_TOKEN_CAP",
    "OP_MODEL_QUEUE_FLOOR",
    "OP_MODEL_SERVICE",
    "OP_MODEL_STEP_COST",
    "OP_P99",
    "OP_P99_SMOOTHED",
    "OP_RECONCILES",
    "OP_RECONCILE_ERRORS",
    "OP_SLO_TARGET",
    "PER_TOKEN_BUCKETS",
    "PREEMPTIONS",
    "PROMPT_TOKENS",
    "QUEUE_TIME",
    "REQUEST_BUCKETS",
    "REQUEST_GENERATION_TOKENS",
    "REQUEST_PROMPT_TOKENS",
    "REQUEST_SUCCESS",
    "RUNNING",
    "RUNTIME_CAP",
    "RUNTIME_CEILING",
    "RUNTIME_LONG_PROMPTS",
    "RUNTIME_PROMPT_P95",
    "RUNTIME_STEPS",
    "RUNTIME_STEP_CONTEXT_TOKENS",
    "RUNTIME_STEP_PREFILL_TOKENS",
    "RUNTIME_STEP_SECONDS",
    "RUNTIME_STEP_SEQUENCES",
    "RUNTIME_TOKEN_BUDGET",
    "TPOT",
    "TTFT",
    "WAITING",
    "WAITING_BY_REASON",
    "LatencyKind",
]
