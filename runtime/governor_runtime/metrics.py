"""The runtime's metrics on vLLM's own /metrics, and the finer histogram buckets it starts vLLM with.

The names equal ``governor.signals.RUNTIME_*`` (a test holds them together); the runtime does not import the
operator package because GPU images install only the runtime.

The metrics are plain prometheus_client metrics in the API server process, so vLLM's /metrics shows them
both from its single-process registry and in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): gauges use
the ``mostrecent`` mode, as vLLM's own gauges do, and only API server 0 advances the counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge

CAP = "vllm_governor:max_num_active_seqs"
CEILING = "vllm_governor:max_num_seqs"
TOKEN_BUDGET = "vllm_governor:max_num_scheduled_tokens"
PROMPT_P95 = "vllm_governor:prompt_tokens_p95"
LONG_PROMPTS = "vllm_governor:long_prompts_total"

LABELS = ("model_name", "engine")

# Finer buckets than vLLM's defaults (equal to governor.signals; a test holds them together). vLLM's bucket
# families: "inter_token_latency" feeds both inter-token latency and TPOT, "request_latency" feeds e2e (and
# queue,
# prefill, decode, inference time), "time_to_first_token" feeds TTFT.
PER_TOKEN_BUCKETS: tuple[float, ...] = (
    0.0005, 0.00075, 0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025, 0.003, 0.0035, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
REQUEST_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5,
    3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
DEFAULT_BUCKETS: Mapping[str, tuple[float, ...]] = {
    "inter_token_latency": PER_TOKEN_BUCKETS,
    "time_to_first_token": REQUEST_BUCKETS,
    "request_latency": REQUEST_BUCKETS,
}


class RuntimeMetrics:
    """The governor's series for one API server process. Create once per process."""

    def __init__(self, publish_counter: bool = True) -> None:
        self.publish_counter = publish_counter
        self.cap = Gauge(
            CAP,
            "Admission cap the engine holds (max_num_active_seqs)",
            LABELS,
            multiprocess_mode="mostrecent",
        )
        self.ceiling = Gauge(
            CEILING, "Startup max_num_seqs: the cap's ceiling", LABELS, multiprocess_mode="mostrecent"
        )
        self.token_budget = Gauge(
            TOKEN_BUDGET, "Per-step token budget the engine holds", LABELS, multiprocess_mode="mostrecent"
        )
        self.prompt_p95 = Gauge(
            PROMPT_P95,
            "P95 of prompt lengths over the last 60 s (tokens)",
            LABELS,
            multiprocess_mode="mostrecent",
        )
        # prometheus_client appends _total to a counter's samples; the family is named without it.
        self.long_prompts = Counter(
            LONG_PROMPTS.removesuffix("_total"), "Prompts longer than 1.3 x the windowed prompt P95", LABELS
        )
        self._long_seen: dict[str, int] = {}

    def publish_limits(self, model_name: str, engine: Mapping[str, Any]) -> None:
        labels = (model_name, str(engine["engine"]))
        self.cap.labels(*labels).set(engine["cap"])
        self.ceiling.labels(*labels).set(engine["ceiling"])
        self.token_budget.labels(*labels).set(engine["token_budget"])

    def publish_snapshot(self, model_name: str, engine: Mapping[str, Any]) -> None:
        """Limits plus the prompt window; the engine's long-prompt total becomes counter increments."""
        self.publish_limits(model_name, engine)
        key = str(engine["engine"])
        self.prompt_p95.labels(model_name, key).set(engine["prompt_tokens_p95"])
        total = int(engine["long_prompts_total"])
        counter = self.long_prompts.labels(model_name, key)
        if not self.publish_counter:
            return
        seen = self._long_seen.get(key, 0)
        if total > seen:
            counter.inc(total - seen)
        self._long_seen[key] = total
