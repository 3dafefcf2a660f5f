"""The runtime's metrics on vLLM's own /metrics, and the finer histogram buckets it starts vLLM with.

The names and buckets come from ``governor_runtime.contract``, shared with the operator and the twin (GPU
images install only the runtime, so the contract lives here).

The metrics are plain prometheus_client metrics in the API server process, so vLLM's /metrics shows them
both from its single-process registry and in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): gauges use
the ``mostrecent`` mode, as vLLM's own gauges do, and only API server 0 advances the counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge

from governor_runtime import contract

# Short local names for the contract's (tests and the launcher import these from here).
CAP, CEILING, TOKEN_BUDGET = contract.RUNTIME_CAP, contract.RUNTIME_CEILING, contract.RUNTIME_TOKEN_BUDGET
PROMPT_P95, LONG_PROMPTS = contract.RUNTIME_PROMPT_P95, contract.RUNTIME_LONG_PROMPTS
LABELS = contract.METRIC_LABELS
PER_TOKEN_BUCKETS, REQUEST_BUCKETS = contract.PER_TOKEN_BUCKETS, contract.REQUEST_BUCKETS
__all__ = ["DEFAULT_BUCKETS", "PER_TOKEN_BUCKETS", "REQUEST_BUCKETS", "RuntimeMetrics"]
DEFAULT_BUCKETS: Mapping[str, tuple[float, ...]] = contract.VLLM_BUCKET_FAMILIES
_STEP_HELP = {
    "step_seconds_total": "Seconds the engine's steps took, scheduling to output applied",
    "steps_total": "Engine steps that ran a batch",
    "step_sequences_total": "Sequences scheduled, summed over steps",
    "step_context_tokens_total": "Context tokens held by the decoding sequences, summed over steps",
    "step_prefill_tokens_total": "Prefill tokens computed, summed over steps",
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
            LONG_PROMPTS.removesuffix("_total"),
            "Prompts longer than a factor (1.3 unless set) x the windowed prompt P95",
            LABELS,
        )
        self.step_counters = {
            key: Counter(name.removesuffix("_total"), _STEP_HELP[key], LABELS)
            for key, name in contract.STEP_COUNTERS.items()
        }
        self._seen: dict[tuple[str, str], float] = {}

    def publish_limits(self, model_name: str, engine: Mapping[str, Any]) -> None:
        labels = (model_name, str(engine["engine"]))
        self.cap.labels(*labels).set(engine["cap"])
        self.ceiling.labels(*labels).set(engine["ceiling"])
        self.token_budget.labels(*labels).set(engine["token_budget"])

    def publish_snapshot(self, model_name: str, engine: Mapping[str, Any]) -> None:
        """Limits plus the prompt window; the engine's totals (long prompts, steps) become counter
        increments. A total the engine does not report (an older runtime in the EngineCore) is skipped."""
        self.publish_limits(model_name, engine)
        key = str(engine["engine"])
        self.prompt_p95.labels(model_name, key).set(engine["prompt_tokens_p95"])
        counters = {"long_prompts_total": self.long_prompts, **self.step_counters}
        for total_key, family in counters.items():
            counter = family.labels(model_name, key)
            total = engine.get(total_key)
            if not self.publish_counter or total is None:
                continue
            seen = self._seen.get((key, total_key), 0.0)
            if float(total) > seen:
                counter.inc(float(total) - seen)
            self._seen[(key, total_key)] = float(total)
