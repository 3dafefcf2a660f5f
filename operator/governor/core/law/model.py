"""The law's vocabulary: its configuration, the state it keeps between ticks, one tick's reading, and its
decision. LawState is stored as-is in the InferenceService status (status.law): its JSON is an interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from governor.core.levers.fit import LeverFit
from governor.core.levers.steps import StepCostFit, StepCosts, StepRates
from governor.core.signals import LatencyKind

Mode = Literal["normal", "long-tail", "burst"]


class LawConfig(BaseModel):
    """Everything the law needs to know about one governed service. Built from the spec or the CLI flags.

    Each knob's "Matrix" line is measured (`python -m governor_twin.matrix.knobs`, KNOBS.md under
    benchmarks/results/matrix): the levers law on the twin matrix with that knob below and above its default
    and every other at its default, as its mean goodput over the served cells against each cell's best
    static cap, on draws 0/1/2, where the defaults score 0.912/0.912/0.913 (the ninth session's law). "At
    a27fa93" is the same study of the law as it is now, draw 0 only (KNOBS.md); knobs inert then are inert
    there too, and no alternative value raises the mean by more than 0.01 but `window_s` 15 s (0.942 against
    0.918; on draws 1-3 too, its docstring says why it stays 30 s). The values are the seed law's
    or an early session's, chosen, then measured; none was changed on these figures (an alternative that
    wins there wins on one or two cells, and it acts on the H200 and demo runs too). "Inert" means no
    served cell moved by more than 0.05 at either value on any draw, or one cell on one draw (said where
    so): the matrix cannot tell, and the reason given is the one the knob stands on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    slo_target_s: float = Field(gt=0)
    latency_kind: LatencyKind = LatencyKind.TPOT
    quantile: float = Field(default=0.99, gt=0, lt=1)
    min_cap: int = Field(default=1, ge=1)
    ceiling: int = Field(default=256, ge=1, description="startup max_num_seqs, or the user's lower max cap")
    initial_cap: int | None = Field(default=None, ge=1)
    gpu_type: str | None = None
    model_class: str | None = None
    decrease_factor: float = Field(default=0.8, gt=0, lt=1)
    """Rule 4's gentlest cut (the seed law's x0.8). Matrix: 0.7 0.911/0.912/0.922, 0.9 0.905/0.915/0.915 (the
    CPU medium 2x step -0.09, +0.14, +0.06: cells both ways). At a27fa93, draw 0 (defaults 0.918): 0.7 0.912,
    0.9 0.916."""
    strongest_decrease: float = Field(default=0.5, gt=0, lt=1, description="factor for a P99 far above SLO")
    """Rule 4's deepest cut, for a P99 far above the SLO; also the deepest a model cut goes in one move.
    Matrix: 0.35 0.910/0.905/0.900, 0.65 0.910/0.912/0.901: never higher then. At a27fa93, draw 0 (defaults
    0.918): 0.35 0.921 (4 cells down, 3 up), 0.65 0.902."""
    increase_factor: float = Field(default=1.15, gt=1, le=4)
    """Rule 4's raise (the seed law's x1.15). Matrix: 1.08 0.910/0.907/0.909, 1.3 0.918/0.915/0.916 (nearly
    all of it one cell, the H200 8B medium 2x step, +0.25/+0.08/+0.12: the climb after the step). At a27fa93,
    draw 0 (defaults 0.918): 1.08 0.916, 1.3 0.924."""
    band_low: float = Field(default=0.9, gt=0, le=1)
    """Rule 3's band around the SLO, lower edge. Matrix: 0.8 0.907/0.912/0.912, 0.95 0.915/0.912/0.913. At
    a27fa93, draw 0 (defaults 0.918): 0.8 0.918, 0.95 0.921."""
    band_high: float = Field(default=1.1, ge=1)
    """Rule 3's band, upper edge. Matrix: 1.05 0.911/0.912/0.913, 1.2 0.910/0.916/0.915 (cells both ways). At
    a27fa93, draw 0 (defaults 0.918): 1.05 0.918, 1.2 0.920."""
    alpha: float = Field(default=0.5, gt=0, le=1, description="EWMA weight of the newest P99")
    """Rule 1's smoothing. Matrix: 0.25 0.900/0.907/0.902 (the H200 8B medium bursts -0.16/-0.22/-0.20: a
    burst is seen late), 1.0 0.902/0.914/0.913. At a27fa93, draw 0 (defaults 0.918): 0.25 0.912, 1 0.921."""
    max_step: int | None = Field(default=None, ge=1)
    """Rule 4's optional limit (none: the factors bound a step). Matrix: 4 0.903/0.908/0.912 (4-8 cells down a
    draw), 16 0.911/0.912/0.912. At a27fa93, draw 0 (defaults 0.918): 4 0.910, 16 0.918."""
    cooldown_s: float = Field(default=10.0, ge=0)
    """Rule 5: no move this long after a cut (a lower cap bites only as running requests finish). Matrix: 5
    0.908/0.915/0.909, 20 0.909/0.917/0.916 (cells both ways at either). At a27fa93, draw 0 (defaults 0.918):
    5 0.915, 20 0.916."""
    raise_after_ticks: int = Field(default=2, ge=1)
    """Rule 3: comfortable ticks in a row before a raise. Matrix: 1 0.910/0.911/0.913, 4 0.909/0.911/0.910. At
    a27fa93, draw 0 (defaults 0.918): 1 0.917, 4 0.918."""
    tick_s: float = Field(default=5.0, gt=0)
    """The control period (the operator's default; Prometheus scrapes every 5 s). Matrix: 2.5
    0.899/0.918/0.915 (cells both ways, 4-5 down on two draws), 10 0.905/0.900/0.905 (lower on every draw). At
    a27fa93, draw 0 (defaults 0.918): 2.5 0.903, 10 0.907."""
    window_s: float = Field(default=30.0, gt=0)
    """The window the P99 and the rates are read over. Matrix: 15 0.907/0.937/0.908 (draw 1 +0.025 with no
    cell down, draws 0 and 2 lower), 60 0.901/0.898/0.899 (lower on every draw: the P99 lags the batch). At
    a27fa93 (knobs_window/ for draws 1-3), draws 0/1/2/3 with defaults 0.918/0.934/0.929/0.932: 15
    0.942/0.962/0.908/0.942 (worst cell 0.72 and 0.70 on draws 1 and 3; draw 2 seven cells down), 60
    0.899/0.912/0.908/0.924. It stays 30 s: 15 s wins on three draws of four and loses on the fourth, and
    the operator reads this window from Prometheus, where a rate needs two scrapes inside it and the chart
    scrapes every 15 s (the InferenceService's own default, adaptive.windowSeconds, is 60 s: four scrapes);
    the twin reads exact 5 s samples."""
    binding_fraction: float = Field(default=0.9, gt=0, le=1)
    """Rule 7: running at this share of the cap binds it. Inert on the matrix (0.8, 0.97); rule 7 says why."""
    queue_binding_fraction: float = Field(
        default=0.85, gt=0, le=1, description="busy share that binds when a queue waits beside it"
    )
    """Inert on the matrix (0.7, 0.95; at a27fa93 one cell, -0.05, at 0.7); rule 7: 0.5 cost the twin 30
    points of steady SLO windows."""
    queue_min: float = Field(default=1.0, ge=0, description="waiting requests that count as a queue")
    """Inert on the matrix (0.5, 4): one waiting request is a queue."""
    queue_growth_fraction: float = Field(default=0.1, gt=0, description="arrivals above completions, share")
    """Rule 9. Matrix: 0.05 0.912/0.913/0.918, 0.2 0.905/0.911/0.911 (cuts into a growing queue: a CPU cell
    -0.10 on every draw). At a27fa93, draw 0 (defaults 0.918): 0.05 0.918, 0.2 0.919."""
    queue_growth_min: float = Field(default=0.2, ge=0, description="req/s of queue growth that always counts")
    """Rule 9's absolute floor of growth. Matrix: 0.1 0.911/0.912/0.909 (one cell, -0.10 on draw 2), 0.5
    unchanged."""
    replica_after_ticks: int = Field(default=3, ge=1)
    """Rule 10's replica wish. Inert on the matrix by construction (one engine, no planner); the fleet
    benchmark measures the wish path (its "law's wish only" rows)."""
    queue_growth_ticks: int = Field(default=2, ge=1, description="ticks of queue growth that stop decreases")
    """Rule 9, and the levers law's test of a queue without end. Matrix: 1 0.914/0.922/0.913 (up on two draws,
    cells both ways on the third), 4 0.901/0.909/0.910 (the H200 8B tight long tail -0.22). At a27fa93, draw 0
    (defaults 0.918): 1 0.920, 4 0.902."""
    idle_after_ticks: int = Field(default=12, ge=1)
    """Rule 10's scale-in wish. Inert on the matrix by construction, as replica_after_ticks."""
    idle_fraction: float = Field(default=0.5, gt=0, lt=1)
    """Rule 10: an engine at most this full is idle. Inert on the matrix by construction."""
    long_tail_fraction: float = Field(default=0.01, ge=0)
    """Rule 11 (long-tail mode, this and the six below): the rule table only. The levers law runs without it,
    which the matrix confirms (a control: nothing moves at 0.005 or 0.02)."""
    long_tail_cap_fraction: float = Field(default=0.25, gt=0, le=1)
    long_tail_hold_s: float = Field(default=60.0, ge=0)
    long_tail_base: float = Field(default=0.08, ge=0, description="long share, stationary traffic")
    long_tail_shift: float = Field(default=1.3, gt=1, description="prompt P95 / its slow EWMA: a shift")
    long_tail_alpha: float = Field(default=0.05, gt=0, le=1, description="EWMA weight, slow prompt P95")
    long_tail_baseline_s: float = Field(
        default=120.0, ge=0, description="prompt P95 history first: the runtime's 60 s window filled, twice"
    )
    burst_slope: float = Field(default=0.15, gt=0)
    """Rule 12 (burst pre-emption, this and the four below). Inert on the matrix, every knob at both values
    (but for one cell, -0.05, at 0.08 on draw 2): its reason is the H200 trace replayed on the twin (without
    the rule 0.925 against 0.997, caps up to 109 where it held 97 at most)."""
    burst_ticks: int = Field(default=3, ge=1)
    burst_min_rate: float = Field(default=0.5, ge=0)
    burst_hold_s: float = Field(default=30.0, ge=0)
    burst_baseline_ticks: int = Field(default=7, ge=0, description="ticks above burst_min_rate first")
    cautious_fraction: float = Field(default=0.85, gt=0, le=1, description="of the last violation cap")
    """Rule 14 (the violation memory, this and the two below): the rule table only; a control on the matrix
    (nothing moves at 0.7 or 0.95)."""
    cautious_step: int = Field(default=2, ge=1, description="additive raise near the last violation cap")
    memory_decay: float = Field(default=0.003, ge=0, description="per-tick rise of the violation cap")
    # The computed law (governor.core.law.computed) reads these; the rule-table law ignores them.
    ttft_bound_s: float | None = Field(
        default=None, gt=0, description="the TTFT bound a request must also meet to count as goodput"
    )
    plan_margin: float = Field(
        default=0.9, gt=0, le=1, description="aim the per-token quantile at this share of the target"
    )
    """Room for the fitted line's error (levers.plan.PlanSettings.margin). Matrix: 0.8 0.909/0.908/0.910,
    1.0 0.917/0.913/0.913 (the H200 8B medium 2x step +0.14 on draw 0, a cell down on draws 1 and 2). At
    a27fa93, draw 0 (defaults 0.918): 0.8 0.923, 1.0 0.924 (two cells up at each, none down)."""

    @model_validator(mode="after")
    def _coherent(self) -> LawConfig:
        if self.min_cap > self.ceiling:
            raise ValueError(f"min_cap {self.min_cap} is above the ceiling {self.ceiling}")
        if self.band_low >= self.band_high:
            raise ValueError("band_low must be below band_high")
        return self

    @property
    def step_limit_fraction(self) -> float:
        return max(1 - min(self.decrease_factor, self.strongest_decrease), self.increase_factor - 1)


class LawState(BaseModel):
    """What the law remembers between ticks; stored as-is in status.law."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cap: int = Field(ge=1)
    p99_smoothed: float | None = None
    mode: Mode = "normal"
    mode_until_s: float = 0.0
    cooldown_until_s: float = 0.0
    comfortable_ticks: int = 0
    pressure_ticks: int = 0
    idle_ticks: int = 0
    rate_ewma: float | None = None
    burst_ticks: int = 0
    baseline_ticks: int = 0
    prompt_p95_slow: float | None = None
    violation_cap: float | None = None
    cut_p99: float | None = None
    shift_ticks: int = 0
    cut_s: float = 0.0
    waiting_prev: float | None = None
    waiting_prev_s: float | None = None
    growth_ticks: int = 0
    ticks: int = 0
    # The computed law's memory: the two fitted lines and the windows they are fed from.
    quantile_fit: LeverFit | None = None
    mean_fit: LeverFit | None = None
    running_recent: tuple[float, ...] = ()  # the running batch of the ticks the quantile's window spans
    held_recent: tuple[float, ...] = ()  # running + waiting over the same ticks (the arrivals' balance)
    # Its standing verdict on the cap ("lever-inert", "infeasible"), kept while its fits re-learn (a raise
    # back to the throughput is a new regime, and forgetting makes them unconfident for a while): without
    # it the table's cuts resumed and walked the cap to the floor (real CPU engine, tests/loop).
    verdict: str | None = None
    # The cap from which the levers law last raised for the queue with no per-token cap known: one such
    # step per episode while the queue does not grow (a raise that then misses the per-token bound must not
    # license the next one; on the H200 at 12 ms it climbed 58 -> 112 that way).
    queue_raised_from: int | None = None
    # A probe below the queue floor (computed._probe): the cap it left and when (None: none under way), and
    # the cap a probe's measured service fell short at: no other probe until a confident fit names a cap.
    probe_from: int | None = None
    probe_s: float | None = None
    probe_failed: int | None = None
    # When the levers law last raised the cap: a per-token miss within a window of it is the raise's own
    # doing (the window's P99 lags the batch), not a license for the queue's next raise.
    raised_s: float | None = None
    # The largest running batch held through a whole window (the window's smallest), its excess forgotten
    # at the quantile fit's rate: what a raise for headroom is vouched by (computed._paced). The fit's own
    # support counts a batch from the first tick it is reached, before its window's P99 has seen it.
    held_support: float = 0.0
    # The token budget (governor.core.law.budget, levers law only): the budget the law holds (None: it has
    # never moved it, the engine keeps its own), the largest the engine has reported (its startup value),
    # the line of the per-token quantile in the budget, when the budget last moved, and its verdict.
    budget: int | None = None
    budget_ceiling: int | None = None
    budget_fit: LeverFit | None = None
    budget_moved_s: float | None = None
    budget_verdict: str | None = None
    budget_missed: int | None = None  # the budget of the last per-token miss it cut from (rule 14's memory)
    # What the engine's steps cost, fitted on the runtime's step counters (levers law only).
    step_fit: StepCostFit | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One tick's reading. None means unknown (no data, NaN, stale): the law never guesses it."""

    now_s: float
    p99_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemption_rate: float | None = None
    request_rate: float | None = None
    prompt_p95: float | None = None
    long_prompt_rate: float | None = None
    queue_growth: float | None = None  # d(waiting)/dt in req/s over the window; else derived from `waiting`
    # The lever model's inputs (governor.core.levers), means over the window of finished requests.
    tpot_mean_s: float | None = None  # mean time per output token
    ttft_mean_s: float | None = None  # mean time to first token
    queue_time_mean_s: float | None = None  # mean time in the waiting queue
    output_tokens_mean: float | None = None  # mean generated tokens per finished request
    inference_time_mean_s: float | None = None  # mean time a request held a slot: scheduled to last token
    ttft_p99_s: float | None = None  # TTFT at the SLO's quantile: the goodput bound is judged on it
    token_budget: float | None = None  # the per-step token budget the engines hold (the lowest)
    step_rates: StepRates | None = None  # the runtime's step counters' rates: what the steps cost


@dataclass(frozen=True, slots=True)
class Outlook:
    """What the levers law's models said at this tick, for the operator's series and log (None: not known).
    The two caps bracket its choice: above the per-token cap the fits say the per-token SLO is missed, below
    the queue floor the queue model says arrivals outgrow the service (or, with a TTFT bound, the backlog
    waits past it a window ahead)."""

    per_token_cap: int | None = None  # the largest cap a confident fit says meets the per-token aim
    queue_floor: int | None = None  # the smallest cap the queue model says carries the arrivals (None: none)
    arrivals_rps: float | None = None  # requests per second reaching the engine (completions + growth)
    service_rps: float | None = None  # the queue model's service at the cap decided
    step_costs: StepCosts | None = None  # what a step costs, learned from the runtime's step counters

    def describe(self) -> str:
        """One phrase for a log line ("" when the models say nothing)."""
        parts = [
            f"{label} {value}"
            for label, value in (("per-token cap", self.per_token_cap), ("queue floor", self.queue_floor))
            if value is not None
        ]
        if self.arrivals_rps is not None and self.service_rps is not None:
            parts.append(f"{self.arrivals_rps:.3g} req/s arriving, {self.service_rps:.3g} served at the cap")
        if self.step_costs is not None and (step := self.step_costs.describe()):
            parts.append(step)
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Decision:
    cap: int
    reason: str  # short code, a metric label
    detail: str  # a sentence for Events and status
    mode: Mode
    replica_wish: Literal[-1, 0, 1]
    state: LawState
    previous_cap: int
    token_budget: int | None = None  # the budget to hold beside the cap; None: leave the engine's own
    outlook: Outlook | None = None  # the levers law's model at this tick; None from the rule table

    @property
    def direction(self) -> Literal["up", "down", "hold"]:
        return "up" if self.cap > self.previous_cap else "down" if self.cap < self.previous_cap else "hold"
