"""The control loop's PromQL: one query per signal per tick, for every governed service at once.

Each query aggregates `by` the labels that name a service, so one answer carries every service's value:
- in the operator, `namespace` and `inferenceservice` (the engine pods' label
  governor.vllm.ai/inferenceservice relabelled, see governor.observability.scrape), as the
  dashboards and alerts use them;
- in standalone mode, one target label the user names (default `job`): each value of it is one service.
Services are keyed by the tuple of those label values, in the order of `Grouping.labels`.

Per-engine quantities (running, waiting, rates) are averaged over the service's pods, because the law
compares them with the per-engine cap; the latency quantile pools every pod's histogram (sum by le), as a
client sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.core import signals
from governor.core.signals import LatencyKind
from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL


@dataclass(frozen=True)
class Grouping:
    labels: tuple[str, ...]
    selector: str  # PromQL label matchers shared by every query, without braces

    @property
    def by(self) -> str:
        return ", ".join(self.labels)


OPERATOR = Grouping((NAMESPACE_LABEL, ISVC_LABEL), f'{ISVC_LABEL}!=""')


def standalone(label: str = "job", selector: str = "") -> Grouping:
    return Grouping((label,), selector or f'{label}!=""')


def duration(seconds: float) -> str:
    """A PromQL duration; whole milliseconds, because PromQL has no fractional seconds."""
    return f"{max(1, round(seconds * 1000))}ms"


def latency_signal(kind: LatencyKind, quantile: float) -> str:
    return f"latency:{kind.value}:{quantile:g}"


def latency(kind: LatencyKind, quantile: float, g: Grouping, window_s: float) -> str:
    """The quantile of the pooled histogram. NaN (no requests in the window) reads as "unknown", not 0."""
    return (
        f"histogram_quantile({quantile:g}, sum by ({g.by}, le) "
        f"(rate({kind.histogram}_bucket{{{g.selector}}}[{duration(window_s)}])))"
    )


# Reading field -> the histogram whose mean over the window it is: rate(_sum) / rate(_count), pooled over
# the service's pods (a client's mean). The lever model (governor.core.levers) needs them, not quantiles.
MEANS: dict[str, str] = {
    "tpot_mean_s": signals.TPOT,
    "ttft_mean_s": signals.TTFT,
    "queue_time_mean_s": signals.QUEUE_TIME,
    "inference_time_mean_s": signals.INFERENCE_TIME,
    "output_tokens_mean": signals.REQUEST_GENERATION_TOKENS,
}


# Reading field -> the runtime's step counter whose rate it is (governor.core.levers.steps fits them). Over
# the gauge window, not the latency window: the fit wants many short, distinct intervals, not one long one
# that each tick shares with the last.
STEP_RATES: dict[str, str] = {
    "step_seconds_rate": signals.RUNTIME_STEP_SECONDS,
    "steps_rate": signals.RUNTIME_STEPS,
    "step_sequences_rate": signals.RUNTIME_STEP_SEQUENCES,
    "step_context_rate": signals.RUNTIME_STEP_CONTEXT_TOKENS,
    "step_prefill_rate": signals.RUNTIME_STEP_PREFILL_TOKENS,
}


def with_ttft(latencies: set[tuple[LatencyKind, float]]) -> set[tuple[LatencyKind, float]]:
    """The quantiles asked for, plus TTFT at each of their quantiles: the goodput bound is judged on it."""
    return latencies | {(LatencyKind.TTFT, q) for _, q in latencies}


def mean(histogram: str, g: Grouping, window_s: float) -> str:
    """The pooled mean of a histogram's observations in the window; 0/0 (nothing finished) is NaN: unknown."""
    w = duration(window_s)
    return (
        f"sum by ({g.by}) (rate({histogram}_sum{{{g.selector}}}[{w}]))"
        f" / sum by ({g.by}) (rate({histogram}_count{{{g.selector}}}[{w}]))"
    )


def _avg_rate(counter: str, g: Grouping, window_s: float) -> str:
    return f"avg by ({g.by}) (rate({counter}{{{g.selector}}}[{duration(window_s)}]))"


def _avg_gauge(gauge: str, g: Grouping, window_s: float) -> str:
    return f"avg by ({g.by}) (avg_over_time({gauge}{{{g.selector}}}[{duration(window_s)}]))"


def queries(
    g: Grouping, window_s: float, gauge_window_s: float, latencies: set[tuple[LatencyKind, float]]
) -> dict[str, str]:
    """Signal name -> query. `gauge_window_s` (about two ticks) smooths gauges without a window's lag."""
    out = {latency_signal(kind, q): latency(kind, q, g, window_s) for kind, q in sorted(with_ttft(latencies))}
    out.update(
        running=_avg_gauge(signals.RUNNING, g, gauge_window_s),
        waiting=_avg_gauge(signals.WAITING, g, gauge_window_s),
        # Least-squares slope of the queue over the window: >0 while arrivals outrun completions.
        queue_growth=f"avg by ({g.by}) (deriv({signals.WAITING}{{{g.selector}}}[{duration(window_s)}]))",
        kv_usage=f"max by ({g.by}) ({signals.KV_CACHE_USAGE}{{{g.selector}}})",
        preemption_rate=_avg_rate(signals.PREEMPTIONS, g, window_s),
        request_rate=_avg_rate(signals.REQUEST_SUCCESS, g, window_s),
        prompt_p95=f"max by ({g.by}) ({signals.RUNTIME_PROMPT_P95}{{{g.selector}}})",
        long_prompt_rate=_avg_rate(signals.RUNTIME_LONG_PROMPTS, g, window_s),
        cap=f"min by ({g.by}) ({signals.RUNTIME_CAP}{{{g.selector}}})",
        token_budget=f"min by ({g.by}) ({signals.RUNTIME_TOKEN_BUDGET}{{{g.selector}}})",
        **{name: mean(histogram, g, window_s) for name, histogram in MEANS.items()},
        **{name: _avg_rate(counter, g, gauge_window_s) for name, counter in STEP_RATES.items()},
        # When each service was last scraped: older than the staleness limit means every value is stale.
        last_scrape=f"max by ({g.by}) (timestamp({signals.RUNNING}{{{g.selector}}}))",
    )
    return out
