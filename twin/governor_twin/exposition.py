"""vLLM's /metrics series for one twin engine (governor.core.signals names, the runtime's buckets and its
own `vllm_governor:*` series), read from the engine at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from governor.core import signals
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from governor_twin.histogram import Histogram
from governor_twin.live import TwinEngine


def _histogram(name: str, doc: str, hist: Histogram, labels: list[str]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["model_name", "engine"])
    cumulative = hist.cumulative()
    buckets = [
        (repr(float(edge)), float(count)) for edge, count in zip(hist.edges, cumulative[:-1], strict=True)
    ]
    buckets.append(("+Inf", float(cumulative[-1])))
    family.add_metric(labels, buckets, hist.total)
    return family


class TwinCollector:
    """vLLM's series for one engine, read from the engine at scrape time."""

    def __init__(self, twin: TwinEngine) -> None:
        self.twin = twin

    def collect(self) -> Iterator[Metric]:
        twin, e = self.twin, self.twin.engine
        e.flush()
        labels = [twin.model_name, str(twin.index)]
        names = ["model_name", "engine"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=names)
            family.add_metric(labels, value)
            return family

        yield gauge(signals.RUNNING, "Number of requests in model execution batches.", e.num_running)
        yield gauge(signals.WAITING, "Number of requests waiting to be processed.", e.num_waiting)
        by_reason = GaugeMetricFamily(
            signals.WAITING_BY_REASON, "Waiting requests by reason.", labels=[*names, "reason"]
        )
        by_reason.add_metric([*labels, "capacity"], e.num_waiting)
        by_reason.add_metric([*labels, "deferred"], 0.0)
        yield by_reason
        yield gauge(signals.KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.", e.kv_usage)
        yield counter(signals.PREEMPTIONS, "Cumulative number of preemptions.", e.preemptions)
        yield counter(signals.PROMPT_TOKENS, "Number of prefill tokens processed.", e.prompt_tokens_total)
        yield counter(
            signals.GENERATION_TOKENS, "Number of generation tokens processed.", e.generation_tokens_total
        )
        success = CounterMetricFamily(
            signals.REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        success.add_metric([*labels, "length"], e.success_total)
        yield success
        yield _histogram(signals.E2E_LATENCY, "End-to-end request latency in seconds.", e.e2e_hist, labels)
        yield _histogram(signals.TTFT, "Time to first token in seconds.", e.ttft_hist, labels)
        yield _histogram(signals.INTER_TOKEN_LATENCY, "Inter-token latency in seconds.", e.itl_hist, labels)
        yield _histogram(
            signals.TPOT, "Time per output token (mean decode gap) per request.", e.tpot_hist, labels
        )
        yield _histogram(signals.QUEUE_TIME, "Time spent in the waiting queue.", e.queue_hist, labels)
        yield _histogram(
            signals.INFERENCE_TIME, "Time from first scheduling to the last token.", e.inference_hist, labels
        )
        yield _histogram(signals.REQUEST_PROMPT_TOKENS, "Prompt tokens per request.", e.prompt_hist, labels)
        yield _histogram(
            signals.REQUEST_GENERATION_TOKENS, "Generated tokens per request.", e.generation_hist, labels
        )
        yield gauge(signals.RUNTIME_CAP, "The live admission cap (max_num_active_seqs).", e.cap)
        yield gauge(signals.RUNTIME_CEILING, "The startup max_num_seqs.", e.ceiling)
        yield gauge(signals.RUNTIME_TOKEN_BUDGET, "The live per-step token budget.", e.token_budget)
        yield gauge(signals.RUNTIME_PROMPT_P95, "Prompt tokens P95 over the last 60 s.", twin.prompt_p95)
        yield counter(
            signals.RUNTIME_LONG_PROMPTS, "Prompts above 1.3 x the windowed P95.", twin.long_prompts
        )
        steps = e.stats
        yield counter(signals.RUNTIME_STEP_SECONDS, "Seconds the engine's steps took.", steps.busy_s)
        yield counter(signals.RUNTIME_STEPS, "Engine steps that ran a batch.", steps.steps)
        yield counter(
            signals.RUNTIME_STEP_SEQUENCES, "Sequences scheduled, summed over steps.", steps.sequences
        )
        yield counter(
            signals.RUNTIME_STEP_CONTEXT_TOKENS,
            "Context tokens held by the decoding sequences, summed over steps.",
            steps.context_tokens,
        )
        yield counter(
            signals.RUNTIME_STEP_PREFILL_TOKENS,
            "Prefill tokens computed, summed over steps.",
            steps.prefill_tokens,
        )


def metrics_text(twin: TwinEngine) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TwinCollector(twin))
    return generate_latest(registry).decode()
