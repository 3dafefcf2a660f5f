"""Run the matrix: every static cap once per (profile, workload), scored under each target; then per cell
the per-phase oracle, the current law and the new law (when importable)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

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


def new_law_policy(law: Law, tpot_s: float, ttft_s: float | None, ceiling: int, gpu: str | None) -> LawPolicy:
    cfg = LawConfig(slo_target_s=tpot_s, ceiling=ceiling, gpu_type=gpu, ttft_bound_s=ttft_s)
    return LawPolicy(NEW, cfg, law=law)


@dataclass(frozen=True)
class Task:
    scenario: Scenario
    profile: EngineProfile
    policy: Policy
    judge: tuple[tuple[str, float, float], ...]  # (target name, TPOT target, TTFT bound)
    seed: int = 0


def run_task(task: Task) -> dict[str, CellScore]:
    res = run(task.scenario, task.policy, seed=task.seed, profile=task.profile)
    return {name: score(res, tpot, ttft) for name, tpot, ttft in task.judge}


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
        base = self.scores[self.best_static].goodput_rps
        if policy not in self.scores:
            return float("nan")
        return self.scores[policy].goodput_rps / base if base > 0 else float("nan")


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
) -> list[Cell]:
    mapper, pool = _mapper(jobs)
    try:
        cells: list[Cell] = []
        static_tasks: list[Task] = []
        plans = []
        for prof, tg in profiles:
            judge = tuple((n, v, tg.ttft_s) for n, v in tg.items() if n in targets)
            caps = static_caps(prof.ceiling, cap_limit)
            for w in workloads:
                scenario = build(prof, w, Slo(target_s=tg.medium_s, ttft_s=tg.ttft_s), phase_s, shared)
                work, scenario = generate(scenario, seed)  # trace phases get their durations
                offered = work.sent_s.size / scenario.duration_s
                static_tasks += [Task(scenario, prof, StaticPolicy(c), judge, seed) for c in caps]
                plans.append((prof, judge, caps, scenario, w, offered))
        static_scores = iter(mapper(static_tasks))
        second: list[Task] = []
        for prof, judge, caps, scenario, w, offered in plans:
            per_cap = [next(static_scores) for _ in caps]
            for name, tpot, ttft in judge:
                cell = Cell(prof.name, name, tpot, ttft, w, offered_rps=offered)
                cell.scores = {f"static {c}": s[name] for c, s in zip(caps, per_cap, strict=True)}
                one = ((name, tpot, ttft),)
                sc = replace(scenario, slo=Slo(target_s=tpot, ttft_s=ttft))
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
