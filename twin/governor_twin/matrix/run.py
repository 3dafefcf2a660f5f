"""Run the matrix: every static cap once per (profile, workload), scored under each target; then per cell
the per-phase oracle, the current law and the new law (when importable)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from governor.core.law import Law, LawConfig

from governor_twin.matrix.goodput import CellScore, score
from governor_twin.matrix.profiles import Targets
from governor_twin.matrix.workloads import build
from governor_twin.policies import LawPolicy, Policy, SchedulePolicy, StaticPolicy, project_law
from governor_twin.profile import EngineProfile
from governor_twin.scenarios import Scenario, Slo, generate
from governor_twin.sim import run

CURRENT, NEW, ORACLE = "current law", "new law", "oracle (per phase)"
DEFAULT_NEW_LAW = "governor.core.law:computed_decide"


def static_caps(ceiling: int, limit: int | None = None) -> list[int]:
    """Powers of two up to the ceiling (and the ceiling itself); with `limit`, the largest `limit` of them."""
    caps = sorted({1 << k for k in range(ceiling.bit_length()) if 1 << k <= ceiling} | {ceiling})
    return caps[-limit:] if limit else caps


def load_law(path: str) -> tuple[Law | None, str]:
    """The law at `module:function`, or None and why not."""
    module, _, name = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        return None, f"{path} is not importable ({exc}): the new-law rows are skipped"
    try:
        LawConfig(slo_target_s=0.025, ttft_bound_s=2.5)
    except (TypeError, ValueError) as exc:
        return None, f"LawConfig has no ttft_bound_s yet ({type(exc).__name__}): the new-law rows are skipped"
    return fn, f"new law: {path}"


def new_law_policy(
    law: Law,
    tpot_s: float,
    ttft_s: float | None,
    ceiling: int,
    gpu: str | None,
    overrides: Mapping[str, Any] | None = None,
) -> LawPolicy:
    """The new law's policy for one cell; `overrides` replace LawConfig defaults (the knob study)."""
    cfg = LawConfig(
        slo_target_s=tpot_s, ceiling=ceiling, gpu_type=gpu, ttft_bound_s=ttft_s, **dict(overrides or {})
    )
    return LawPolicy(NEW, cfg, law=law)


@dataclass(frozen=True)
class Task:
    scenario: Scenario
    profile: EngineProfile
    policy: Policy
    judge: tuple[tuple[str, float, float], ...]  # (target name, TPOT target, TTFT bound)
    seed: int = 0
    # (module, name, value): a module constant set for this run only (the knob study's constants)
    constants: tuple[tuple[str, str, float], ...] = ()


def run_task(task: Task) -> dict[str, CellScore]:
    with _constants(task.constants):
        res = run(task.scenario, task.policy, seed=task.seed, profile=task.profile)
    return {name: score(res, tpot, ttft) for name, tpot, ttft in task.judge}


@contextmanager
def _constants(values: Sequence[tuple[str, str, float]]) -> Iterator[None]:
    """Set module constants for one run in this worker, and put them back after it."""
    modules = [importlib.import_module(module) for module, _, _ in values]
    before = [getattr(m, name) for m, (_, name, _) in zip(modules, values, strict=True)]
    try:
        for m, (_, name, value) in zip(modules, values, strict=True):
            setattr(m, name, value)
        yield
    finally:
        for m, (_, name, _), old in zip(modules, values, before, strict=True):
            setattr(m, name, old)


@dataclass
class Cell:
    profile: str
    target: str
    tpot_s: float
    ttft_s: float
    workload: str
    scores: dict[str, CellScore] = field(default_factory=dict)
    oracle_caps: list[int] = field(default_factory=list)
    offered_rps: float = float("nan")  # requests arriving per second over the run

    @property
    def served_share(self) -> float:
        """The best static cap's goodput over the offered load: near 0, no cap serves the cell (its
        ratios compare noise, and only replicas would help)."""
        return self.scores[self.best_static].goodput_rps / self.offered_rps if self.offered_rps > 0 else 0.0

    @property
    def best_static(self) -> str:
        statics = [k for k in self.scores if k.startswith("static")]
        return max(statics, key=lambda k: (self.scores[k].goodput_rps, self.scores[k].slo_windows))

    def ratio(self, policy: str) -> float:
        if policy not in self.scores:
            return float("nan")
        return _over(self.scores[policy].goodput_rps, self.scores[self.best_static].goodput_rps)

    def span_ratios(self, policy: str) -> tuple[float, float]:
        """(start-up, settled): the policy's goodput over the cell's best static's (the whole cell's choice)
        in the first START_S and after it; nan where that static serves nothing in the span."""
        if policy not in self.scores:
            return float("nan"), float("nan")
        ours, base = self.scores[policy], self.scores[self.best_static]
        start = _over(ours.start_goodput, base.start_goodput)
        return start, _over(ours.settled_goodput, base.settled_goodput)


def _over(goodput: float, base: float) -> float:
    """A goodput over the best static's; nan where that static serves nothing."""
    return goodput / base if base > 0 else float("nan")


def _gpu(profile: EngineProfile) -> str | None:
    return "h200" if profile.name.startswith("h200") else None


def _mapper(
    jobs: int,
) -> tuple[Callable[[list[Task]], list[dict[str, CellScore]]], ProcessPoolExecutor | None]:
    if jobs <= 1:
        return (lambda tasks: [run_task(t) for t in tasks]), None
    pool = ProcessPoolExecutor(max_workers=jobs)
    return (lambda tasks: list(pool.map(run_task, tasks, chunksize=1))), pool


def _oracle(cell: Cell, caps: Sequence[int], scenario: Scenario) -> SchedulePolicy:
    phases = scenario.phase_bounds()
    chosen = []
    for j in range(len(phases)):
        best = max(caps, key=lambda c: (round(cell.scores[f"static {c}"].phase_goodput[j], 4), -c))
        chosen.append(best)
    cell.oracle_caps = chosen
    return SchedulePolicy([(a, c) for (_, a, _), c in zip(phases, chosen, strict=True)], name=ORACLE)


@dataclass(frozen=True)
class Plan:
    """One (profile, workload): its scenario (the medium target's SLO) and the targets it is judged on."""

    profile: EngineProfile
    workload: str
    scenario: Scenario
    judge: tuple[tuple[str, float, float], ...]
    offered_rps: float

    def judged(self, tpot_s: float, ttft_s: float) -> Scenario:
        """The scenario with one target's SLO (the arrivals and lengths are the same)."""
        return replace(self.scenario, slo=Slo(target_s=tpot_s, ttft_s=ttft_s))


def scenarios(
    profiles: Sequence[tuple[EngineProfile, Targets]],
    workloads: Sequence[str],
    phase_s: float,
    shared: str,
    targets: Sequence[str],
    seed: int,
) -> list[Plan]:
    """Every (profile, workload) the matrix runs, in its cells' order; the knob study re-runs the same."""
    plans = []
    for prof, tg in profiles:
        judge = tuple((n, v, tg.ttft_s) for n, v in tg.items() if n in targets)
        for w in workloads:
            scenario = build(prof, w, Slo(target_s=tg.medium_s, ttft_s=tg.ttft_s), phase_s, shared)
            work, scenario = generate(scenario, seed)  # trace phases get their durations
            plans.append(Plan(prof, w, scenario, judge, work.sent_s.size / scenario.duration_s))
    return plans


def evaluate(
    profiles: Sequence[tuple[EngineProfile, Targets]],
    workloads: Sequence[str],
    new_law: Law | None,
    phase_s: float,
    shared: str,
    jobs: int = 2,
    cap_limit: int | None = None,
    targets: Sequence[str] = ("tight", "medium", "loose"),
    seed: int = 0,
    plans: Sequence[Plan] | None = None,
) -> list[Cell]:
    """Every cell's statics, oracle and laws; `plans`, when given, are `scenarios` of these arguments."""
    mapper, pool = _mapper(jobs)
    try:
        cells: list[Cell] = []
        if plans is None:
            plans = scenarios(profiles, workloads, phase_s, shared, targets, seed)
        static_tasks = [
            Task(p.scenario, p.profile, StaticPolicy(c), p.judge, seed)
            for p in plans
            for c in static_caps(p.profile.ceiling, cap_limit)
        ]
        static_scores = iter(mapper(static_tasks))
        second: list[Task] = []
        for p in plans:
            prof, judge, scenario, w = p.profile, p.judge, p.scenario, p.workload
            caps = static_caps(prof.ceiling, cap_limit)
            per_cap = [next(static_scores) for _ in caps]
            for name, tpot, ttft in judge:
                cell = Cell(prof.name, name, tpot, ttft, w, offered_rps=p.offered_rps)
                cell.scores = {f"static {c}": s[name] for c, s in zip(caps, per_cap, strict=True)}
                one = ((name, tpot, ttft),)
                sc = p.judged(tpot, ttft)
                second.append(Task(sc, prof, _oracle(cell, caps, scenario), one, seed))
                law = project_law(tpot, prof.ceiling, gpu_type=_gpu(prof), law="rules")
                second.append(Task(sc, prof, replace(law, name=CURRENT), one, seed))
                if new_law is not None:
                    second.append(
                        Task(
                            sc, prof, new_law_policy(new_law, tpot, ttft, prof.ceiling, _gpu(prof)), one, seed
                        )
                    )
                cells.append(cell)
        results = mapper(second)
    finally:
        if pool is not None:
            pool.shutdown()
    by_cell = iter(results)
    for cell in cells:
        for name in [ORACLE, CURRENT] + ([NEW] if new_law is not None else []):
            cell.scores[name] = next(by_cell)[cell.target]
    return cells
