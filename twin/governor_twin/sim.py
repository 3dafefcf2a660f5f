"""Virtual-time runs: one scenario, one engine, one cap policy ticking as the operator would."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from governor_twin.engine import DONE, REJECTED, Engine
from governor_twin.observe import Observer
from governor_twin.policies import Policy
from governor_twin.profile import EngineProfile, load_profile
from governor_twin.scenarios import Scenario, Workload, generate


@dataclass
class RunResult:
    policy: str
    scenario: Scenario
    workload: Workload
    # per request (same order as the engine's table)
    sent: NDArray[np.float64]
    first_token: NDArray[np.float64]
    finish: NDArray[np.float64]
    output: NDArray[np.int64]
    prompt: NDArray[np.int64]
    phase: NDArray[np.int64]
    done: NDArray[np.bool_]
    refused: NDArray[np.bool_]  # rejected like vLLM rejects (prompt + max_tokens > max-model-len)
    rejected: int
    preemptions: int
    # per tick
    tick_t: NDArray[np.float64]
    tick_cap: NDArray[np.int64]
    tick_p99: NDArray[np.float64]  # what the policy saw (NaN = unknown)
    tick_running: NDArray[np.float64]
    tick_waiting: NDArray[np.float64]
    tick_kv: NDArray[np.float64]
    reasons: list[str]
    steps: int

    @property
    def ttft(self) -> NDArray[np.float64]:
        return self.first_token - self.sent

    @property
    def tpot(self) -> NDArray[np.float64]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(
                self.output > 1, (self.finish - self.first_token) / np.maximum(self.output - 1, 1), 0.0
            )


def run(
    scenario: Scenario,
    policy: Policy,
    seed: int = 0,
    profile: EngineProfile | None = None,
    workload: tuple[Workload, Scenario] | None = None,
) -> RunResult:
    work, resolved = workload if workload is not None else generate(scenario, seed)
    prof = profile or load_profile(resolved.profile)
    engine = Engine(prof)
    watch = getattr(policy, "watch", None)
    if watch is not None:  # a benchmark's oracle policy reads the engine itself (governor_twin.known)
        watch(engine)
    engine.set_cap(policy.start(prof.ceiling))
    engine.submit_many(work.sent_s, work.prompt, work.output)
    observer = Observer(engine, resolved.slo.latency, policy.window_s)
    end = resolved.duration_s
    ticks = math.floor(end / policy.tick_s)
    t_list, cap_list, p99_list, run_list, wait_list, kv_list, reasons = [], [], [], [], [], [], []
    for k in range(1, ticks + 1):
        now = k * policy.tick_s
        engine.advance(now)
        obs = observer.observe(now)
        cap = engine.set_cap(policy.decide(obs))
        if policy.token_budget is not None:
            engine.set_token_budget(policy.token_budget)
        t_list.append(now)
        cap_list.append(cap)
        p99_list.append(math.nan if obs.p99_s is None else obs.p99_s)
        run_list.append(obs.running or 0.0)
        wait_list.append(obs.waiting or 0.0)
        kv_list.append(obs.kv_usage or 0.0)
        reasons.append(policy.last_reason)
    engine.advance(end)
    n = engine.n
    return RunResult(
        policy=policy.name,
        scenario=resolved,
        workload=work,
        sent=engine.sent[:n].copy(),
        first_token=engine.first_token[:n].copy(),
        finish=engine.finish[:n].copy(),
        output=engine.max_tokens[:n].copy(),
        prompt=engine.prompt[:n].copy(),
        phase=work.phase[np.argsort(work.sent_s, kind="stable")],
        done=engine.state[:n] == DONE,
        refused=engine.state[:n] == REJECTED,
        rejected=engine.rejected,
        preemptions=engine.preemptions,
        tick_t=np.array(t_list),
        tick_cap=np.array(cap_list, dtype=np.int64),
        tick_p99=np.array(p99_list),
        tick_running=np.array(run_list),
        tick_waiting=np.array(wait_list),
        tick_kv=np.array(kv_list),
        reasons=reasons,
        steps=engine.stats.steps,
    )
