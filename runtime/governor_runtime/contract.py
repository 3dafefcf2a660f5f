"""The contract between the runtime, the operator and the twin: one definition of each name they share.

vLLM-free and dependency-free on purpose: the runtime image (vLLM's), the operator image (no vLLM) and the
twin all import it. It holds vLLM's own metric names (read from vLLM 0.32 source), the series the runtime
adds, the histogram buckets the runtime starts vLLM with, and the admin route.
"""

from __future__ import annotations

from collections.abc import Mapping

# The runtime's admin route: GET answers the limits an engine holds, PUT {"cap": N, "token_budget": M}
# moves them.
LIMITS_PATH = "/governor/v1/limits"

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
INFERENCE_TIME = "vllm:request_inference_time_seconds"  # first scheduled to the last token
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
METRIC_LABELS = ("model_name", "engine")

# Exported by the runtime plugin on vLLM's /metrics (same labels).
RUNTIME_CAP = "vllm_governor:max_num_active_seqs"
RUNTIME_CEILING = "vllm_governor:max_num_seqs"
RUNTIME_TOKEN_BUDGET = "vllm_governor:max_num_scheduled_tokens"
RUNTIME_PROMPT_P95 = "vllm_governor:prompt_tokens_p95"
RUNTIME_LONG_PROMPTS = "vllm_governor:long_prompts_total"
# What the engine's steps did, as counters: the seconds its steps took (from a step's scheduling, or the
# previous step's end where batches overlap, to its output), the steps that ran, and over those steps the
# sequences scheduled, the context tokens the decoding sequences held, and the prefill tokens computed. Their
# rates over a few seconds fit the step's costs (governor.core.levers.steps): what one more sequence, one
# more token of context and one more prefill token add to a step.
RUNTIME_STEP_SECONDS = "vllm_governor:engine_step_seconds_total"
RUNTIME_STEPS = "vllm_governor:engine_steps_total"
RUNTIME_STEP_SEQUENCES = "vllm_governor:engine_step_sequences_total"
RUNTIME_STEP_CONTEXT_TOKENS = "vllm_governor:engine_step_context_tokens_total"
RUNTIME_STEP_PREFILL_TOKENS = "vllm_governor:engine_step_prefill_tokens_total"
# The snapshot's key for each (the EngineCore utility's answer), in the counters' order.
STEP_COUNTERS: Mapping[str, str] = {
    "step_seconds_total": RUNTIME_STEP_SECONDS,
    "steps_total": RUNTIME_STEPS,
    "step_sequences_total": RUNTIME_STEP_SEQUENCES,
    "step_context_tokens_total": RUNTIME_STEP_CONTEXT_TOKENS,
    "step_prefill_tokens_total": RUNTIME_STEP_PREFILL_TOKENS,
}
# A prompt longer than this x the windowed prompt P95 counts as long (the seed's 1.3); the operator sets the
# variable from spec.adaptive.longTail.promptFactor only when it differs, so pods of a default spec keep
# their template (an operator upgrade restarts no engine).
LONG_PROMPT_FACTOR = 1.3
LONG_PROMPT_FACTOR_ENV = "GOVERNOR_LONG_PROMPT_FACTOR"

# Finer buckets the runtime starts vLLM with (vLLM's defaults are 0.01, 0.025, 0.05 … for per-token and
# 0.3, 0.5, 0.8 … for e2e, too coarse to place a P99 near a 20 ms or 1 s target). A quarter of a
# millisecond under 2 ms: a small model's whole cap range can sit between 1 and 2 ms per token.
PER_TOKEN_BUCKETS: tuple[float, ...] = (
    0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
REQUEST_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5,
    3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# vLLM's bucket families: "inter_token_latency" feeds both inter-token latency and TPOT, "request_latency"
# feeds e2e (and queue, prefill, decode, inference time), "time_to_first_token" feeds TTFT.
VLLM_BUCKET_FAMILIES: Mapping[str, tuple[float, ...]] = {
    "inter_token_latency": PER_TOKEN_BUCKETS,
    "time_to_first_token": REQUEST_BUCKETS,
    "request_latency": REQUEST_BUCKETS,
}
