"""Online line fit y ≈ a + b·running (+ c·prefill tokens per step), with exponential forgetting.

Why a line: across all 17 serving points of the H200 calibration the TPOT P99 is one line in the mean running
batch (≈ 6.3 ms + 0.153 ms × running, mean |error| 1.1 ms); the decode step itself is linear in the batch.

How: exponentially weighted least squares, kept recursively as weighted means and centred co-moments
(West's weighted update of Welford's algorithm). Its estimate equals recursive least squares with forgetting
factor λ started from a diffuse prior, but centring keeps it exact at large running/prefill values, and
without excitation the co-moments shrink together, so the slope is remembered instead of the RLS covariance
winding up. Each tick every old sample's weight is multiplied by λ; the memory is 1 / (1 - λ) ticks.

Robustness: a sample whose residual against the current line exceeds `clip_k` residual scales is moved to
the clip boundary before it enters (Huber); non-finite or missing values are skipped. A run of clipped
residuals of one sign is a new regime, not a string of outliers: the old statistics are then discounted.

Support: the largest and the smallest running batch at which the line has actually been measured, for
callers that must not trust it far beyond either (TRUST). A clipped sample does not extend them (its y was
replaced by the line's own value, so it says nothing about the line there); the distance to the newest batch
is forgotten at the samples' rate λ, and a new regime starts them afresh.

Standard errors treat the weights as reliability weights: Var(θ) ≈ σ² (Σw²/Σw) (XᵀWX)⁻¹, with σ² from the
weighted residual sum of squares over Σw - d·Σw²/Σw; the effective sample count is Kish's (Σw)² / Σw².
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

_MEAN_ABS_TO_SIGMA = math.sqrt(math.pi / 2)  # E|r| = σ·√(2/π) for normal residuals
# How far past its support a fitted line is trusted: a quarter of the largest batch it was measured at, on
# either side. Measured on the H200 calibration (17 serving points): a line fitted on the points up to a
# batch B under-predicts the TPOT P99 at 1.25 B by at most 10 % (what the plan's margin absorbs) at 10 of 11
# supports (-14 % at B = 127), but at 1.5 B by up to 16 % and at 2 B by up to 24 % (B = 16, where the P99 is
# still flat). benchmarks/levers_trust.py prints the table. Below the support the same distance holds: the
# twin's 70B shape, whose P99 is steep at small batches and flatter later, fitted at batches 57..132 put one
# sequence at 142 ms where batch 8 gives under 62 ms. On the twin matrix (KNOBS.md, draws 0/1/2, 0.912/
# 0.912/0.913 at 1.25): 1.1 0.909/0.911/0.910, 1.5 0.918/0.912/0.914 (the H200 8B medium 2x step +0.25 on
# draw 0; a cell down on draws 1 and 2). At a27fa93, draw 0 (0.918 at 1.25): 1.1 0.920, 1.5 0.924.
TRUST = 1.25
_SINGULAR = 1e-12  # relative size below which a co-moment matrix is treated as singular


class Prediction(NamedTuple):
    mean: float
    stderr: float  # of the fitted mean at x (not of one new sample); inf where the fit cannot say


class Confidence(BaseModel):
    """How far the fit can be trusted. Plain numbers; the planner draws the lines."""

    model_config = ConfigDict(frozen=True)

    samples: int  # accepted samples, all time
    effective_samples: float  # Kish's count within memory
    excitation: float  # weighted standard deviation of running within memory (sequences)
    residual_scale: float  # σ of the samples around the line
    slope: float  # per running sequence
    slope_stderr: float
    slope_t: float  # slope / stderr: above ~2 the slope is distinguishable from 0
    prefill_excitation: float | None = None
    prefill_slope: float | None = None
    prefill_slope_stderr: float | None = None
    prefill_slope_t: float | None = None


class LeverFit(BaseModel):
    """The fit's knobs and sufficient statistics; frozen, JSON-able (status), `update` returns a new one."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    with_prefill: bool = False
    """Add prefill tokens per step as a second regressor: prefills sharing a step stall decodes
    (interference)."""
    forgetting: float = Field(default=0.97, gt=0.0, le=1.0)
    """λ per sample; 0.97 ≈ a 33-tick memory: long enough to average P99 noise, short enough to follow a
    change of model, prompt mix or hardware within minutes at a 5 s tick."""
    clip_k: float = Field(default=3.0, gt=0.0)
    """Residuals beyond k scales are clipped (Huber): one 30 s stall must not bend the line."""
    clip_after: int = Field(default=10, ge=0)
    """Samples before clipping starts: until then the residual scale is itself unknown."""
    min_relative_scale: float = Field(default=0.01, ge=0.0)
    """Floor of the clip scale as a fraction of the predicted value: a noiseless history would otherwise clip
    every later sample to the old line and never learn a change."""
    change_run: int = Field(default=4, ge=1)
    """Clipped residuals of one sign in a row that declare a new regime: 4 in a row beyond 3σ happen by
    chance with probability ~3e-12 per sample under normal noise."""
    change_discount: float = Field(default=0.1, gt=0.0, le=1.0)
    """Weight left to the old statistics when a new regime is declared: the new samples take over at once."""

    count: int = 0
    weight: float = 0.0  # Σw
    weight_sq: float = 0.0  # Σw²
    mean_x: tuple[float, ...] = ()  # weighted means of the regressors (running[, prefill])
    mean_y: float = 0.0
    cov_xx: tuple[float, ...] = ()  # centred co-moments, upper triangle: (xx,) or (xx, xp, pp)
    cov_xy: tuple[float, ...] = ()
    cov_yy: float = 0.0
    abs_residual: float = 0.0  # weighted mean |clipped prediction residual|
    residual_weight: float = 0.0
    clipped: int = 0  # all time, for observability
    run: int = 0  # signed length of the current run of same-sign clipped residuals
    support: float = 0.0  # largest running batch measured (unclipped), its excess forgotten at λ; 0: none yet
    low: float = 0.0  # smallest running batch measured (unclipped), its deficit forgotten at λ; 0: none yet

    @property
    def dims(self) -> int:
        """Regressors besides the constant."""
        return 2 if self.with_prefill else 1

    # -- the line -------------------------------------------------------------------------------------------

    def _inverse(self) -> tuple[tuple[float, float, float], bool] | None:
        """(Cxx⁻¹ as (i00, i01, i11), prefill determined?) or None when running has no spread."""
        if not self.cov_xx or self.weight <= 0:
            return None
        sxx = self.cov_xx[0]
        if sxx <= _SINGULAR * self.weight * (1.0 + self.mean_x[0] ** 2):
            return None
        if self.dims == 1:
            return (1.0 / sxx, 0.0, 0.0), False
        sxp, spp = self.cov_xx[1], self.cov_xx[2]
        det = sxx * spp - sxp * sxp
        if det <= _SINGULAR * sxx * spp or spp <= 0:
            return (1.0 / sxx, 0.0, 0.0), False  # prefill collinear with running or constant: held at 0
        return (spp / det, -sxp / det, sxx / det), True

    def slopes(self) -> tuple[float, float]:
        """(per running sequence, per prefill token per step); 0 where the data cannot say."""
        inverse = self._inverse()
        if inverse is None:
            return 0.0, 0.0
        (i00, i01, i11), _ = inverse
        cxy = self.cov_xy
        if self.dims == 1:
            return i00 * cxy[0], 0.0
        return i00 * cxy[0] + i01 * cxy[1], i01 * cxy[0] + i11 * cxy[1]

    def _mean_at(self, x: Sequence[float]) -> float:
        b_run, b_pre = self.slopes()
        value = self.mean_y + b_run * (x[0] - self.mean_x[0])
        if self.dims == 2:
            value += b_pre * (x[1] - self.mean_x[1])
        return value

    def _sigma(self) -> float:
        """Residual standard deviation; inf until there are more effective samples than parameters."""
        if self.weight <= 0:
            return math.inf
        b_run, b_pre = self.slopes()
        sse = self.cov_yy - b_run * self.cov_xy[0] - (b_pre * self.cov_xy[1] if self.dims == 2 else 0.0)
        dof = self.weight - (self.dims + 1) * self.weight_sq / self.weight
        if dof <= 1e-9:
            return math.inf
        return math.sqrt(max(sse, 0.0) / dof)

    def predict(self, x: Sequence[float]) -> Prediction:
        """The fitted mean at x = (running[, prefill tokens per step]) and its standard error."""
        if self.count == 0 or len(x) != self.dims:
            return Prediction(math.nan, math.inf)
        mean = self._mean_at(x)
        sigma = self._sigma()
        inverse = self._inverse()
        dx = [x[i] - self.mean_x[i] for i in range(self.dims)]
        if inverse is None:
            spread = 0.0 if all(d == 0 for d in dx) else math.inf
        else:
            (i00, i01, i11), prefill_known = inverse
            spread = i00 * dx[0] ** 2
            if self.dims == 2:
                spread = math.inf if not prefill_known and dx[1] != 0 else spread + 2 * i01 * dx[0] * dx[1]
                spread += i11 * dx[1] ** 2
        variance = sigma**2 * (self.weight_sq / self.weight) * (1.0 / self.weight + spread)
        return Prediction(mean, math.sqrt(variance) if math.isfinite(variance) else math.inf)

    def line(self, prefill: float | None = None) -> tuple[float, float]:
        """(intercept at running 0, slope per sequence), prefill held at `prefill` or its recent mean."""
        if self.count == 0:
            return math.nan, math.nan
        at_zero = [0.0] + ([self.mean_x[1] if prefill is None else prefill] if self.dims == 2 else [])
        return self._mean_at(at_zero), self.slopes()[0]

    def confidence(self) -> Confidence:
        if self.count == 0:
            return Confidence(
                samples=0,
                effective_samples=0.0,
                excitation=0.0,
                residual_scale=math.inf,
                slope=0.0,
                slope_stderr=math.inf,
                slope_t=0.0,
            )
        b_run, b_pre = self.slopes()
        inverse = self._inverse()
        sigma = self._sigma()
        factor = sigma**2 * self.weight_sq / self.weight

        def stderr(diagonal: float | None) -> float:
            return (
                math.sqrt(factor * diagonal) if diagonal is not None and math.isfinite(factor) else math.inf
            )

        se_run = stderr(inverse[0][0] if inverse else None)
        extra: dict[str, float] = {}
        if self.dims == 2:
            se_pre = stderr(inverse[0][2] if inverse and inverse[1] else None)
            extra = {
                "prefill_excitation": math.sqrt(max(self.cov_xx[2], 0.0) / self.weight),
                "prefill_slope": b_pre,
                "prefill_slope_stderr": se_pre,
                "prefill_slope_t": _t(b_pre, se_pre),
            }
        return Confidence(
            samples=self.count,
            effective_samples=self.weight**2 / self.weight_sq,
            excitation=math.sqrt(max(self.cov_xx[0], 0.0) / self.weight),
            residual_scale=sigma,
            slope=b_run,
            slope_stderr=se_run,
            slope_t=_t(b_run, se_run),
            **extra,
        )

    # -- learning -------------------------------------------------------------------------------------------

    def update(self, x: Sequence[float | None], y: float | None) -> LeverFit:
        """A new fit with (x, y) taken in; x = (running[, prefill tokens per step]). Bad samples are
        skipped."""
        point = _finite(x, y, self.dims)
        if point is None:
            return self
        xs, y_seen = point
        fit, y_used, residual = self._screen(xs, y_seen)
        return fit._absorb(xs, y_used, residual)._supported(xs[0], fit.support, fit.low, y_used == y_seen)

    def _screen(self, xs: list[float], y: float) -> tuple[LeverFit, float, float | None]:
        """Clip y against the current line (Huber), or declare a new regime: (fit, y to use, residual)."""
        if self.count <= self.dims:  # no line yet, so no residual
            return self, y, None
        predicted = self._mean_at(xs)
        residual = y - predicted
        scale = max(_MEAN_ABS_TO_SIGMA * self.abs_residual, self.min_relative_scale * abs(predicted), 1e-300)
        bound = self.clip_k * scale
        if self.count < self.clip_after or abs(residual) <= bound:
            return self.model_copy(update={"run": 0}), y, residual
        sign = 1 if residual > 0 else -1
        run = self.run + sign if self.run * sign > 0 else sign
        if abs(run) >= self.change_run:  # a new regime: forget the old one now, keep this sample whole
            fresh = self._discounted(self.change_discount).model_copy(
                update={"run": 0, "support": 0.0, "low": 0.0}
            )
            return fresh, y, residual
        clipped = predicted + sign * bound
        return self.model_copy(update={"run": run, "clipped": self.clipped + 1}), clipped, clipped - predicted

    def _supported(self, running: float, prior: float, prior_low: float, measured: bool) -> LeverFit:
        """The support after a sample at `running`: the old distance to it forgotten at λ on both sides,
        extended by a measured sample only."""
        high = running + self.forgetting * (prior - running) if prior > running else prior
        low = running + self.forgetting * (prior_low - running) if 0 < prior_low < running else prior_low
        if measured:
            high, low = max(high, running), running if low <= 0 else min(low, running)
        return self.model_copy(update={"support": high, "low": low})

    @property
    def trusted_low(self) -> float:
        """The smallest batch the line may be read at: a quarter of its largest batch below its smallest."""
        return max(self.low - (TRUST - 1) * self.support, 0.0)

    def reaches(self, running: float) -> bool:
        """The line may be read at `running`: within TRUST of the batches it was measured at (a quarter of
        its largest batch beyond either end)."""
        return self.support > 0 and self.trusted_low <= running <= TRUST * self.support

    def _discounted(self, factor: float) -> LeverFit:
        """Every past sample's weight multiplied by `factor` (means unchanged)."""
        return self.model_copy(
            update={
                "weight": self.weight * factor,
                "weight_sq": self.weight_sq * factor**2,
                "cov_xx": tuple(c * factor for c in self.cov_xx),
                "cov_xy": tuple(c * factor for c in self.cov_xy),
                "cov_yy": self.cov_yy * factor,
                "residual_weight": self.residual_weight * factor,
            }
        )

    def _absorb(self, xs: list[float], y: float, residual: float | None) -> LeverFit:
        """Forget by λ, then add (xs, y) with weight 1 (West's weighted incremental co-moments)."""
        old = self._discounted(self.forgetting) if self.count else self
        mean_x = list(old.mean_x) if old.mean_x else [0.0] * self.dims
        cov_xx = list(old.cov_xx) if old.cov_xx else [0.0] * (1 if self.dims == 1 else 3)
        cov_xy = list(old.cov_xy) if old.cov_xy else [0.0] * self.dims
        weight = old.weight + 1.0
        keep = old.weight / weight  # dx·(x - new mean) = dx·dx·keep
        dx = [xs[i] - mean_x[i] for i in range(self.dims)]
        dy = y - old.mean_y
        pairs = [(0, 0)] if self.dims == 1 else [(0, 0), (0, 1), (1, 1)]
        for k, (i, j) in enumerate(pairs):
            cov_xx[k] += dx[i] * dx[j] * keep
        for i in range(self.dims):
            cov_xy[i] += dx[i] * dy * keep
            mean_x[i] += dx[i] / weight
        update: dict[str, object] = {
            "count": self.count + 1,
            "weight": weight,
            "weight_sq": old.weight_sq + 1.0,
            "mean_x": tuple(mean_x),
            "mean_y": old.mean_y + dy / weight,
            "cov_xx": tuple(cov_xx),
            "cov_xy": tuple(cov_xy),
            "cov_yy": old.cov_yy + dy * dy * keep,
        }
        if residual is not None:
            residual_weight = old.residual_weight + 1.0
            update["residual_weight"] = residual_weight
            update["abs_residual"] = old.abs_residual + (abs(residual) - old.abs_residual) / residual_weight
        return old.model_copy(update=update)


def _t(value: float, stderr: float) -> float:
    if stderr == 0:
        return math.inf if value > 0 else (-math.inf if value < 0 else 0.0)
    return value / stderr if math.isfinite(stderr) else 0.0


def _finite(x: Sequence[float | None], y: float | None, dims: int) -> tuple[list[float], float] | None:
    """(x, y) as floats, or None when anything is missing, not a number, infinite, or of the wrong length."""
    if y is None or len(x) != dims or not isinstance(y, int | float) or not math.isfinite(y):
        return None
    values: list[float] = []
    for v in x:
        if v is None or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        values.append(float(v))
    return values, float(y)
