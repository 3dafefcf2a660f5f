"""Metric names: vLLM's own (read from vLLM 0.32 source) and the ones the governor adds.

One source of truth: PromQL, dashboards, alert rules, the twin and the runtime import these constants.
"""

from __future__ import annotations

from enum import StrEnum

# vLLM engine metrics (labels: model_name, engine).
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"

# Exported by the governor runtime plugin on vLLM's /metrics.
RUNTIME_CAP = "vllm_governor:max_num_active_seqs"
RUNTIME_CEILING = "vllm_governor:max_num_seqs"
RUNTIME_TOKEN_BUDGET = "vllm_governor:max_num_scheduled_tokens"
RUNTIME_PROMPT_P95 = "vllm_governor:prompt_tokens_p95"
RUNTIME_LONG_PROMPTS = "vllm_governor:long_prompts_total"

# Exported by the operator (labels: namespace, name) on its own /metrics.
OP_CAP = "governor_cap"
OP_CEILING = "governor_cap_ceiling"
OP_CAP_FLOOR = "governor_cap_floor"
OP_P99 = "governor_latency_p99_seconds"
OP_P99_SMOOTHED = "governor_latency_p99_smoothed_seconds"
OP_SLO_TARGET = "governor_slo_target_seconds"
OP_DECISIONS = "governor_decisions_total"
OP_DESIRED_REPLICAS = "governor_desired_replicas"
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

# Finer buckets the runtime starts vLLM with (vLLM's defaults are 0.01, 0.025, 0.05 … for per-token and
# 0.3, 0.5, 0.8 … for e2e, too coarse to place a P99 near a 20 ms or 1 s target). A quarter of a
# millisecond under 2 ms: a small model's whole cap range can sit between 1 and 2 ms per token.
PER_TOKEN_BUCKETS: tuple[float, ...] = (
    0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)
REQUEST_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5,
    3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
)
