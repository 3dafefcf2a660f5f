"""The cap for the user's objective, computed from the fitted lines instead of searched for.

Goodput counts requests that meet both the per-token bound and the TTFT bound. The cap moves the first (a line
in the running batch, `fit`) and pays in the second (queueing, `queueing`). The rules, in the order applied:
- unconfident: too few samples or too little spread of the running batch, or a slope the data cannot yet tell
  from 0 nor bound as small: no cap (the caller takes bounded exploratory steps, which create the spread);
- infeasible: one sequence alone is above the per-token target: no cap and no replica helps, so keep
  throughput (the smallest cap meeting the TTFT bound, else the ceiling);
- inert: the slope is confidently too small for the cap to move the signal across its range: hold;
- otherwise the per-token cap is the largest cap whose upper confidence bound meets margin × target. There:
  meets-both when the queue is stable and the TTFT bound is met; per-token-first when the queue is stable but
  TTFT needs more capacity (keep the per-token bound, hand the rest to replicas); ttft-first when the queue
  would be unstable (a queue that grows without bound breaks every request): the smallest cap that meets the
  TTFT bound with a stable queue, else the smallest stable cap, else the ceiling, with the replicas that would
  restore the per-token cap; at-min-cap when the aim needs a cap below min_cap (kept unless unstable).
"Replicas" counts engines like this one sharing the given arrival rate evenly.
TTFT is assumed non-increasing in the cap over stable caps (capacity c / s(c) grows with c), which lets the
smallest cap meeting a TTFT bound be found by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from governor.core.levers.fit import LeverFit
from governor.core.levers.queueing import TpotLine, Workload, service_rate, ttft_quantile_s

Reason = Literal[
    "meets-both", "per-token-first", "ttft-first", "at-min-cap", "infeasible", "inert", "unconfident"
]


class PlanSettings(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    margin: float = Field(default=0.9, gt=0.0, le=1.0)
    """Aim at margin × target: the line is a fit of a noisy quantile, and a cap set exactly on the target
    spends half its ticks above it."""
    confidence_z: float = Field(default=1.645, ge=0.0)
    """The per-token prediction used is mean + z × standard error (one-sided 95 %): an extrapolated cap is
    only as high as the evidence supports."""
    min_samples: float = Field(default=8.0, gt=0.0)
    """Effective samples below which nothing is decided: a line through a handful of noisy P99s is a guess."""
    min_excitation: float = Field(default=2.0, ge=0.0)
    """Spread (weighted standard deviation) of the running batch, in sequences, below which the slope is
    extrapolation from noise: the batch has effectively not moved."""
    significance_t: float = Field(default=2.0, gt=0.0)
    """Slope / standard error above which the slope counts as real (≈ 97.7 % one-sided)."""
    inert_fraction: float = Field(default=0.1, gt=0.0)
    """A slope whose upper bound moves the signal by less than this fraction of the target across
    [min_cap, ceiling] is inert: cutting the cap would cost queueing and buy nothing."""
    max_utilisation: float = Field(default=0.95, gt=0.0, le=1.0)
    """Planned λ / μ(cap) at most this: the capacity comes from a fit (≈ 5 % off on the calibration), and a
    queue at ρ → 1 waits without bound."""
    ttft_quantile: float = Field(default=0.99, gt=0.0, lt=1.0)
    """The TTFT quantile the bound applies to."""
    variability: float = Field(default=1.0, gt=0.0)
    """(ca² + cs²) / 2 for the queueing tail; 1 (Poisson, exponential service) is the pessimistic default."""
    max_replicas: int = Field(default=1024, ge=1)
    """Search limit for the replica count; beyond it the plan says none is enough."""


class CapPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    cap: int | None  # None: hold (inert) or explore (unconfident)
    reason: Reason
    detail: str
    per_token_met: bool = False  # the per-token aim is met at `cap` on the upper confidence side
    ttft_met: bool = False  # the queue is stable at `cap` and the TTFT bound (if any) is met
    per_token_cap: int | None = None  # largest cap meeting the per-token aim
    ttft_cap: int | None = None  # smallest cap meeting the TTFT bound with a stable queue
    predicted_per_token_s: float | None = None  # upper confidence side at `cap`
    predicted_ttft_s: float | None = None
    utilisation: float | None = None
    replicas_needed: int | None = None  # engines like this one to carry the load at the per-token cap
    explore_down: bool = False  # no verdict until the line is measured at smaller batches


@dataclass(frozen=True)
class _Model:
    """The two fits and the load, evaluated at a cap."""

    quantile: LeverFit
    prefill_level: float | None
    work: Workload
    settings: PlanSettings
    ttft_bound_s: float | None
    aim_s: float  # margin × per-token target

    def regressors(self, running: float) -> list[float]:
        return [running] if self.prefill_level is None else [running, self.prefill_level]

    def upper(self, cap: int) -> float:
        mean, stderr = self.quantile.predict(self.regressors(cap))
        return mean + self.settings.confidence_z * stderr

    def utilisation(self, cap: int, arrival_rps: float | None = None) -> float:
        rate = service_rate(cap, self.work)
        return (self.work.arrival_rps if arrival_rps is None else arrival_rps) / rate

    def stable(self, cap: int, arrival_rps: float | None = None) -> bool:
        return self.utilisation(cap, arrival_rps) <= self.settings.max_utilisation

    def ttft(self, cap: int, arrival_rps: float | None = None) -> float:
        work = self.work if arrival_rps is None else self.work._replace(arrival_rps=arrival_rps)
        return ttft_quantile_s(cap, work, self.settings.ttft_quantile)

    def serves(self, cap: int, arrival_rps: float | None = None) -> bool:
        """Stable, and the TTFT bound (if any) met."""
        if not self.stable(cap, arrival_rps):
            return False
        return self.ttft_bound_s is None or self.ttft(cap, arrival_rps) <= self.ttft_bound_s

    def replicas(self, cap: int) -> int | None:
        """Fewest engines like this one, splitting the arrivals evenly, that serve the load at `cap`."""
        rate = service_rate(cap, self.work)
        first = max(1, math.ceil(self.work.arrival_rps / (rate * self.settings.max_utilisation)))
        for count in range(first, self.settings.max_replicas + 1):
            if self.serves(cap, self.work.arrival_rps / count):
                return count
            if self.ttft_bound_s is not None and self.work.prefill_s > self.ttft_bound_s:
                return None  # prefill alone breaks the bound: no replica count helps
        return None


def plan_cap(
    quantile_fit: LeverFit,
    mean_fit: LeverFit,
    *,
    arrival_rps: float,
    out_tokens: float,
    prefill_s: float,
    target_s: float,
    ttft_bound_s: float | None,
    min_cap: int,
    ceiling: int,
    prefill_tokens: float | None = None,
    settings: PlanSettings | None = None,
) -> CapPlan:
    """The cap for goodput. Fits are of seconds per token against (running[, prefill tokens per step]):
    `quantile_fit` of the SLO's per-token quantile, `mean_fit` of the mean. `prefill_tokens` is the prefill
    work per step to plan for (default: the fits' recent mean). All times in seconds."""
    if not 1 <= min_cap <= ceiling:
        raise ValueError("need 1 <= min_cap <= ceiling")
    settings = settings or PlanSettings()
    doubt = _doubt(quantile_fit, mean_fit, settings)
    if doubt:
        return CapPlan(cap=None, reason="unconfident", detail=doubt)
    level = None
    if quantile_fit.with_prefill:
        level = quantile_fit.mean_x[1] if prefill_tokens is None else prefill_tokens
    intercept, slope = mean_fit.line(prefill_tokens)
    line = TpotLine(intercept, slope, mean_fit.trusted_low)
    work = Workload(arrival_rps, out_tokens, prefill_s, line, settings.variability)
    aim = settings.margin * target_s
    model = _Model(quantile_fit, level, work, settings, ttft_bound_s, aim)

    one = quantile_fit.predict(model.regressors(1))
    alone = one.mean
    # A line flat across the batches seen is not the batch's doing (prefill stalls, a noisy neighbour): the
    # cap is inert, and more replicas spread that load. Only a line that rises with the batch and still
    # starts above the target is the hardware's floor.
    flat = _flatness(quantile_fit, target_s, min_cap, ceiling, settings)
    if flat is not None and flat.reason == "inert":
        return flat
    # Infeasible only when even the lower confidence side is above the target: a verdict that gives up on
    # the SLO must not rest on a slope the data barely supports.
    if one.mean - settings.confidence_z * one.stderr > target_s:
        if not quantile_fit.reaches(1):
            # The confidence band measures noise around a line assumed right; read far below where it was
            # measured the line itself may be wrong (a P99 concave in the batch), and a verdict that gives
            # up on the SLO must rest on measurement: explore down first.
            return CapPlan(
                cap=None,
                reason="unconfident",
                explore_down=True,
                detail=(
                    f"one sequence alone predicts {_ms(alone)} per token, above the {_ms(target_s)} target, "
                    f"but the line was measured at batches {quantile_fit.low:.0f}.."
                    f"{quantile_fit.support:.0f} only: explore down before a verdict"
                ),
            )
        return _infeasible(model, alone, target_s, min_cap, ceiling)
    if flat is not None:
        return flat
    per_token_cap = _largest(lambda c: model.upper(c) <= aim, min_cap, ceiling)
    return _at_cap(model, per_token_cap, min_cap, ceiling)


def _doubt(quantile_fit: LeverFit, mean_fit: LeverFit, settings: PlanSettings) -> str:
    """Why the fits cannot be used yet ("" when they can)."""
    for name, fit in (("per-token quantile", quantile_fit), ("mean per-token", mean_fit)):
        report = fit.confidence()
        if report.effective_samples < settings.min_samples:
            return (
                f"the {name} fit has {report.effective_samples:.1f} effective samples "
                f"(< {settings.min_samples:g}): explore"
            )
        if report.excitation < settings.min_excitation:
            return (
                f"the running batch spread {report.excitation:.1f} sequences in the {name} fit "
                f"(< {settings.min_excitation:g}): explore to learn the slope"
            )
    return ""


def _flatness(
    fit: LeverFit, target_s: float, min_cap: int, ceiling: int, settings: PlanSettings
) -> CapPlan | None:
    """inert or unconfident when the slope is not significantly above 0; None when it is."""
    report = fit.confidence()
    if report.slope_t >= settings.significance_t:
        return None
    upper_slope = report.slope + settings.confidence_z * report.slope_stderr
    swing = upper_slope * (ceiling - min_cap)
    if swing <= settings.inert_fraction * target_s:
        return CapPlan(
            cap=None,
            reason="inert",
            detail=(
                f"slope {_ms(report.slope)}/seq (t = {report.slope_t:.1f}): the whole cap range moves the "
                f"per-token signal by at most {_ms(swing)}, under {settings.inert_fraction:.0%} of the "
                "target: hold"
            ),
        )
    return CapPlan(
        cap=None,
        reason="unconfident",
        detail=(
            f"slope {_ms(report.slope)}/seq ± {_ms(report.slope_stderr)} (t = {report.slope_t:.1f}) is "
            "neither significant nor bounded small: explore"
        ),
    )


def _infeasible(model: _Model, alone: float, target_s: float, min_cap: int, ceiling: int) -> CapPlan:
    ttft_cap = None
    if model.ttft_bound_s is not None:
        ttft_cap = _smallest(model.serves, min_cap, ceiling)
    cap = ceiling if ttft_cap is None else ttft_cap
    return _finish(
        model,
        cap,
        "infeasible",
        ttft_cap=ttft_cap,
        detail=(
            f"one sequence alone predicts {_ms(alone)} per token, above the {_ms(target_s)} target: no cap "
            f"and no replica helps; keeping throughput at cap {cap}"
        ),
    )


def _at_cap(model: _Model, per_token_cap: int | None, min_cap: int, ceiling: int) -> CapPlan:
    keep = min_cap if per_token_cap is None else per_token_cap
    aim = _ms(model.aim_s)
    kept = (
        f"the per-token aim {aim} holds up to cap {per_token_cap}"
        if per_token_cap is not None
        else f"the per-token aim {aim} needs a cap below min_cap {min_cap}"
    )
    bounded_reason: Reason = "meets-both" if per_token_cap is not None else "at-min-cap"
    if model.serves(keep):
        # A plan for the per-token side alone (no arrivals, no TTFT bound) judged no queue: say nothing of it.
        judged = model.ttft_bound_s is not None or model.work.arrival_rps > 0
        return _finish(
            model,
            keep,
            bounded_reason,
            per_token_cap=per_token_cap,
            detail=f"{kept}; queue and TTFT fine" if judged else kept,
        )
    replicas = model.replicas(keep)
    wanted = "no replica count suffices" if replicas is None else f"{replicas} replicas needed"
    if model.stable(keep):
        ttft_cap = _smallest(model.serves, keep, ceiling)
        needs = f"TTFT needs cap {ttft_cap}" if ttft_cap is not None else "no cap meets TTFT"
        reason: Reason = "per-token-first" if per_token_cap is not None else "at-min-cap"
        return _finish(
            model,
            keep,
            reason,
            per_token_cap=per_token_cap,
            ttft_cap=ttft_cap,
            replicas=replicas,
            detail=f"{kept}; {needs}: keeping the per-token bound, {wanted}",
        )
    # The smallest cap that serves (stable, TTFT met) keeps per-token latency as low as the queue allows;
    # failing that the smallest stable one; failing that the most capacity there is.
    ttft_cap = _smallest(model.serves, keep, ceiling)
    stable_cap = ttft_cap if ttft_cap is not None else _smallest(model.stable, keep, ceiling)
    cap = ceiling if stable_cap is None else stable_cap
    return _finish(
        model,
        cap,
        "ttft-first",
        per_token_cap=per_token_cap,
        ttft_cap=ttft_cap,
        replicas=replicas,
        detail=(
            f"{kept}, but the queue is unstable there ({model.utilisation(keep):.0%} load): "
            f"giving up the per-token bound at cap {cap}, {wanted}"
        ),
    )


def _finish(
    model: _Model,
    cap: int,
    reason: Reason,
    *,
    detail: str,
    per_token_cap: int | None = None,
    ttft_cap: int | None = None,
    replicas: int | None = None,
) -> CapPlan:
    """The plan with the predictions at `cap` filled in."""
    upper = model.upper(cap)
    return CapPlan(
        cap=cap,
        reason=reason,
        detail=detail,
        per_token_met=upper <= model.aim_s,
        ttft_met=model.serves(cap),
        per_token_cap=per_token_cap,
        ttft_cap=ttft_cap,
        predicted_per_token_s=upper,
        predicted_ttft_s=model.ttft(cap),
        utilisation=model.utilisation(cap),
        replicas_needed=replicas,
    )


def _largest(holds: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest c in [low, high] where `holds` is true, scanning down (the per-token bound is convex in c,
    so its feasible caps are one interval; a scan of at most `high` cheap predictions is simplest)."""
    for cap in range(high, low - 1, -1):
        if holds(cap):
            return cap
    return None


def _smallest(holds: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest c in [low, high] where a predicate that is monotone in c (false, then true) holds."""
    if not holds(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"
