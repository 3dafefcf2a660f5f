"""One tick's signals as the metrics adapters answer them: pure values, no I/O.

Prometheus (governor.adapters.prometheus) and the direct scrape (governor.adapters.scrape) both answer a
`Snapshot`: one `Reading` per service key, None wherever a value is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from governor.core import promql
from governor.core.law import Observation
from governor.core.levers.steps import StepRates
from governor.core.signals import LatencyKind

Key = tuple[str, ...]


@dataclass(frozen=True)
class Reading:
    """One service's signals for one tick; None wherever the value is unknown."""

    latency: dict[str, float | None] = field(
        default_factory=dict
    )  # promql.latency_signal(kind, q) -> seconds
    running: float | None = None
    waiting: float | None = None
    queue_growth: float | None = None
    kv_usage: float | None = None
    preemption_rate: float | None = None
    request_rate: float | None = None
    prompt_p95: float | None = None
    long_prompt_rate: float | None = None
    cap: float | None = None  # the cap the engines hold (min over pods), from the runtime's gauge
    token_budget: float | None = None  # the per-step token budget they hold (min over pods), likewise
    # Pooled means over the window (promql.MEANS): the lever model's inputs.
    tpot_mean_s: float | None = None
    ttft_mean_s: float | None = None
    queue_time_mean_s: float | None = None
    output_tokens_mean: float | None = None
    inference_time_mean_s: float | None = None
    # The runtime's step counters as rates over the gauge window (promql.STEP_RATES), per engine.
    step_seconds_rate: float | None = None
    steps_rate: float | None = None
    step_sequences_rate: float | None = None
    step_context_rate: float | None = None
    step_prefill_rate: float | None = None

    @property
    def step_rates(self) -> StepRates | None:
        """The step fit's sample; None unless the engines report every counter (an older runtime does not)."""
        values = [getattr(self, name) for name in promql.STEP_RATES]
        known = [float(v) for v in values if v is not None]
        return StepRates(*known) if len(known) == len(values) else None

    def p99(self, kind: LatencyKind, quantile: float) -> float | None:
        return self.latency.get(promql.latency_signal(kind, quantile))

    def observation(self, now_s: float, kind: LatencyKind, quantile: float) -> Observation:
        return Observation(
            now_s=now_s,
            p99_s=self.p99(kind, quantile),
            running=self.running,
            waiting=self.waiting,
            kv_usage=self.kv_usage,
            preemption_rate=self.preemption_rate,
            request_rate=self.request_rate,
            prompt_p95=self.prompt_p95,
            long_prompt_rate=self.long_prompt_rate,
            queue_growth=self.queue_growth,
            tpot_mean_s=self.tpot_mean_s,
            ttft_mean_s=self.ttft_mean_s,
            queue_time_mean_s=self.queue_time_mean_s,
            output_tokens_mean=self.output_tokens_mean,
            inference_time_mean_s=self.inference_time_mean_s,
            # the readers add TTFT at every quantile asked for (promql.with_ttft)
            ttft_p99_s=self.p99(LatencyKind.TTFT, quantile),
            token_budget=self.token_budget,
            step_rates=self.step_rates,
        )


EMPTY = Reading()


@dataclass(frozen=True)
class Snapshot:
    available: bool
    error: str | None = None
    services: dict[Key, Reading] = field(default_factory=dict)

    def get(self, key: Key) -> Reading:
        return self.services.get(key, EMPTY)
