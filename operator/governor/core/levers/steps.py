"""What one engine step costs, learned online from the runtime's step counters.

A continuous-batching step costs a fixed part (weights read, launch, scheduling), a part per sequence in the
batch (sampling, per-request bookkeeping), a part per token of context its decoding sequences read
(attention over the KV cache) and a part per prefill token computed. The runtime counts, per engine, the
seconds its steps took and, summed over them, the steps, sequences, context tokens and prefill tokens
(governor_runtime.contract.STEP_COUNTERS). Over any interval the seconds are then one linear function of the
four others, with these four costs as coefficients and no intercept: an idle interval costs nothing. The H200
calibration's measured steps fit this form (../shared/calibration/h200_llama8b_step_fits.json); the twin's
engine is this form.

How: exponentially weighted least squares on each tick's rates, kept as sufficient statistics (XᵀWX, XᵀWy,
yᵀWy) so the state is small and JSON-able. The costs are solved with non-negativity (no step is faster for
holding more), by trying every set of active costs: there are four. A cost the ticks never excited (no
prefill seen yet) stays unknown rather than zero. Each tick every old sample's weight is multiplied by λ.
Standard errors treat the weights as reliability weights, as governor.core.levers.fit does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

COSTS = ("base_s", "per_sequence_s", "per_context_token_s", "per_prefill_token_s")
_DIMS = len(COSTS)
_SINGULAR = 1e-12
# A part is reported once its standard error explains at most this share of the mean step: told apart from
# the others. With one batch size alone, steps and sequences move together and neither is; the sum is.
IDENTIFIED = 0.05
# The smallest residual scale the fit believes, as a share of the busy time: timers and float counters do
# not resolve better, and a fit that is exact by construction (collinear columns) must not read as certain.
RESOLUTION = 1e-3
_RIDGE = 1e-9  # on the unit-scaled normal equations: keeps collinear columns solvable for their errors


class StepRates(NamedTuple):
    """One interval's step counters as rates per second (per engine): the fit's sample."""

    seconds: float  # busy seconds per second: the share of time the engine was stepping
    steps: float
    sequences: float
    context_tokens: float
    prefill_tokens: float

    @property
    def regressors(self) -> tuple[float, float, float, float]:
        return (self.steps, self.sequences, self.context_tokens, self.prefill_tokens)


class StepCosts(BaseModel):
    """The fitted costs, seconds each, with their standard errors. None: not learned yet, either never shown
    (no prefill yet) or not told apart from another part (one batch size alone: steps and sequences in one
    ratio), which then carries both; a step that needs an unknown part is not predicted."""

    model_config = ConfigDict(frozen=True)

    base_s: float | None = None
    per_sequence_s: float | None = None
    per_context_token_s: float | None = None
    per_prefill_token_s: float | None = None
    stderr_s: tuple[float | None, ...] = ()  # in COSTS' order
    relative_error: float | None = None  # residual scale over the mean busy share: how well the form fits
    samples: float = 0.0  # effective samples (Kish)
    mean_step_s: float | None = None  # the mean step over the fit's memory: known before its parts are

    def describe(self) -> str:
        """E.g. "a step 9 ms on average: 6.1 ms + 0.15 ms/seq + 0.2 ms/1k context + 30 ms/1k prefill"."""
        parts = [
            f"{cost * scale * 1e3:.3g} ms{unit}"
            for cost, scale, unit in (
                (self.base_s, 1, ""),
                (self.per_sequence_s, 1, "/seq"),
                (self.per_context_token_s, 1000, "/1k context"),
                (self.per_prefill_token_s, 1000, "/1k prefill"),
            )
            if cost is not None
        ]
        if self.mean_step_s is None:
            return ""
        mean = f"a step {self.mean_step_s * 1e3:.3g} ms on average"
        return f"{mean}: {' + '.join(parts)}" if parts else f"{mean}, its parts not told apart yet"

    def step_s(self, sequences: float, context_tokens: float, prefill_tokens: float) -> float | None:
        """A step's predicted duration; None while a cost it needs is unknown."""
        parts = (
            (self.base_s, 1.0),
            (self.per_sequence_s, sequences),
            (self.per_context_token_s, context_tokens),
            (self.per_prefill_token_s, prefill_tokens),
        )
        if any(cost is None and amount > 0 for cost, amount in parts):
            return None
        return sum((cost or 0.0) * amount for cost, amount in parts)


class StepCostFit(BaseModel):
    """The sufficient statistics of the weighted fit; `update` folds one tick in, `costs` solves them."""

    model_config = ConfigDict(frozen=True)

    forgetting: float = Field(default=0.995, gt=0.0, le=1.0)
    xx: tuple[float, ...] = (0.0,) * (_DIMS * _DIMS)  # XᵀWX, row-major
    xy: tuple[float, ...] = (0.0,) * _DIMS  # XᵀWy
    yy: float = 0.0
    weight: float = 0.0  # Σw
    weight_sq: float = 0.0  # Σw²
    y_sum: float = 0.0  # Σw·y
    x_sum: tuple[float, ...] = (0.0,) * _DIMS  # Σw·x: the mean step's make-up

    def update(self, rates: StepRates | None) -> StepCostFit:
        """Fold one tick in. An idle or unknown tick says nothing about a step's cost: it is skipped."""
        if rates is None or not all(math.isfinite(v) and v >= 0 for v in rates) or rates.steps <= 0:
            return self
        lam, x, y = self.forgetting, rates.regressors, rates.seconds
        return self.model_copy(
            update={
                "xx": tuple(lam * v + x[i // _DIMS] * x[i % _DIMS] for i, v in enumerate(self.xx)),
                "xy": tuple(lam * v + xi * y for v, xi in zip(self.xy, x, strict=True)),
                "yy": lam * self.yy + y * y,
                "weight": lam * self.weight + 1.0,
                "weight_sq": lam * lam * self.weight_sq + 1.0,
                "y_sum": lam * self.y_sum + y,
                "x_sum": tuple(lam * v + xi for v, xi in zip(self.x_sum, x, strict=True)),
            }
        )

    def costs(self) -> StepCosts:
        """The non-negative least-squares costs over the excited columns; a part is reported only where the
        data tell it apart from the others (IDENTIFIED), with its standard error."""
        if self.weight <= 0 or self.x_sum[0] <= 0:
            return StepCosts()
        scale = [math.sqrt(max(self.xx[i * _DIMS + i], 0.0)) for i in range(_DIMS)]
        excited = [i for i in range(_DIMS) if scale[i] > 0]  # a column never seen (no prefill yet) is unknown
        best: tuple[float, list[int], list[float]] | None = None
        for size in range(len(excited), 0, -1):
            for subset in itertools.combinations(excited, size):
                solved = self._solve(subset, scale)
                if solved is None or any(t < 0 for t in solved[0]):
                    continue
                rss = self._rss(subset, solved[0])
                if best is None or rss < best[0] - 1e-15 * max(self.yy, 1e-300):
                    best = (rss, list(subset), solved[0])
        mean_step = self.y_sum / self.x_sum[0]
        if best is None:
            return StepCosts(mean_step_s=mean_step)
        rss, active, theta = best
        dof = self.weight - len(active) * self.weight_sq / self.weight
        mean_y = self.y_sum / self.weight
        residual2 = max(rss, 0.0) / dof if dof > 0 else math.inf
        sigma2 = max(residual2, (RESOLUTION * mean_y) ** 2)
        # How well each part is told apart: its standard error in the full model (a ridge keeps collinear
        # columns solvable, and their errors then show it), as a share of the mean step it would explain.
        full = self._solve(excited, scale, ridge=_RIDGE)
        values: list[float | None] = [None] * _DIMS
        errors: list[float | None] = [None] * _DIMS
        for k, i in enumerate(excited):
            variance = (
                sigma2 * (self.weight_sq / self.weight) * full[1][k][k] if full is not None else math.inf
            )
            if not math.isfinite(variance):
                continue
            error = errors[i] = math.sqrt(max(variance, 0.0))
            per_step = self.x_sum[i] / self.x_sum[0]  # this part's regressor in a mean step
            if error * per_step <= IDENTIFIED * mean_step:
                values[i] = theta[active.index(i)] if i in active else 0.0  # 0: held there by the constraint
        relative = math.sqrt(residual2) / mean_y if mean_y > 0 and math.isfinite(residual2) else None
        return StepCosts(
            **dict(zip(COSTS, values, strict=True)),
            stderr_s=tuple(errors),
            relative_error=relative,
            samples=self.weight**2 / self.weight_sq,
            mean_step_s=mean_step,
        )

    def _solve(
        self, active: Sequence[int], scale: Sequence[float], ridge: float = 0.0
    ) -> tuple[list[float], list[list[float]]] | None:
        """θ and (XᵀWX)⁻¹ over the active columns, solved on the scaled system (columns of unit energy)."""
        n = len(active)
        a = [
            [self.xx[i * _DIMS + j] / (scale[i] * scale[j]) + (ridge if i == j else 0.0) for j in active]
            for i in active
        ]
        inverse = _invert(a)
        if inverse is None:
            return None
        b = [self.xy[i] / scale[i] for i in active]
        theta = [sum(inverse[r][c] * b[c] for c in range(n)) / scale[active[r]] for r in range(n)]
        unscaled = [
            [inverse[r][c] / (scale[active[r]] * scale[active[c]]) for c in range(n)] for r in range(n)
        ]
        return theta, unscaled

    def _rss(self, active: Sequence[int], theta: Sequence[float]) -> float:
        """yᵀWy - 2θᵀXᵀWy + θᵀXᵀWXθ over the active columns."""
        cross = sum(t * self.xy[i] for t, i in zip(theta, active, strict=True))
        quad = sum(
            theta[r] * theta[c] * self.xx[i * _DIMS + j]
            for r, i in enumerate(active)
            for c, j in enumerate(active)
        )
        return self.yy - 2 * cross + quad


def _invert(a: list[list[float]]) -> list[list[float]] | None:
    """Gauss-Jordan with partial pivoting on a small symmetric matrix; None when (nearly) singular."""
    n = len(a)
    m = [[*row, *(1.0 if r == c else 0.0 for c in range(n))] for r, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < _SINGULAR:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        head = m[col][col]
        m[col] = [v / head for v in m[col]]
        for r in range(n):
            if r != col and m[r][col] != 0.0:
                factor = m[r][col]
                m[r] = [v - factor * w for v, w in zip(m[r], m[col], strict=True)]
    return [row[n:] for row in m]
