"""The token budget as the inter-token SLO's lever (governor.core.law.budget), in the levers law.

On the twin's H200 engine, long prompts among short chats make every step that carries a prefill chunk slow
for every decode in it: the inter-token P99 goes past the target at any cap. The law must answer with the
budget, not by cutting the cap (which builds a queue that breaks every TTFT), and give the budget back when
it buys nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
from governor.core.law import LAWS, Decision, LawConfig, LawState, Observation, initial_state
from governor.core.signals import LatencyKind
from governor_twin.policies import LawPolicy, StaticPolicy
from governor_twin.scenarios import Scenario
from governor_twin.sim import RunResult, run

from tests.support.status import loop_patch

TARGET_S = 0.03
SHORT = {"kind": "uniform", "low": 256, "high": 1024}
MIXED = {"kind": "mix", "parts": [{"weight": 0.9, **SHORT}, {"weight": 0.1, "low": 3000, "high": 3800}]}


def _scenario(kind: LatencyKind) -> Scenario:
    return Scenario.from_json(
        {
            "name": "long-prompts",
            "profile": "h200_llama8b",
            "slo": {"latency": kind.value, "target_s": TARGET_S, "ttft_s": 2.5},
            "phases": [
                {"name": "chats", "duration_s": 90, "arrivals": {"kind": "poisson", "rate_rps": 5}},
                {"name": "mixed", "duration_s": 360, "arrivals": {"kind": "poisson", "rate_rps": 15},
                 "prompt": MIXED},
            ],
        }
    )  # fmt: skip


def _law(kind: LatencyKind, law: str = "levers") -> LawPolicy:
    cfg = LawConfig(slo_target_s=TARGET_S, latency_kind=kind, ceiling=256, gpu_type="h200", ttft_bound_s=2.5)
    return LawPolicy(law, cfg, law=LAWS[law])


def _met(result: RunResult, start_s: float) -> float:
    """Share of the ticks after `start_s` whose governed P99 meets the target."""
    late = result.tick_t >= start_s
    return float(np.mean(result.tick_p99[late] <= TARGET_S))


def _ttft_p99(result: RunResult) -> float:
    return float(np.percentile(result.ttft[result.done], 99))


def test_an_inter_token_miss_from_prefill_chunks_is_answered_with_the_budget_not_the_cap() -> None:
    scenario = _scenario(LatencyKind.INTER_TOKEN)
    static = run(scenario, StaticPolicy(128))
    policy = _law(LatencyKind.INTER_TOKEN)
    seen: list[Decision] = []
    decide = policy.law
    policy.law = lambda s, o, c: seen.append(decide(s, o, c)) or seen[-1]
    governed = run(scenario, policy)
    late = 180.0  # a minute and a half into the mixed phase: the budget has had its windows to learn
    assert _met(static, late) < 0.6  # the chunks break the target at a fixed budget
    assert _met(governed, late) >= 0.85
    assert _met(governed, late) >= _met(static, late) + 0.3
    assert governed.tick_cap[governed.tick_t >= late].min() >= 100  # the cap was not what moved
    assert _ttft_p99(governed) < 2.5 and not governed.refused.any()  # no queue built
    budgets = [d.token_budget for d in seen if d.token_budget is not None]
    assert budgets and min(budgets) <= 1024  # the engine's 8192 came down to a chunk a step carries
    assert any(d.reason == "budget-explore" for d in seen)


def test_the_rule_table_cuts_the_cap_there_and_breaks_ttft() -> None:
    """The contrast that makes the lever matter: the rule table's cuts build the queue."""
    governed = run(_scenario(LatencyKind.INTER_TOKEN), _law(LatencyKind.INTER_TOKEN, "rules"))
    assert _ttft_p99(governed) > 10.0


def test_a_tpot_slo_leaves_the_budget_to_the_engine() -> None:
    policy = _law(LatencyKind.TPOT)
    seen: list[Decision] = []
    decide = policy.law
    policy.law = lambda s, o, c: seen.append(decide(s, o, c)) or seen[-1]
    run(_scenario(LatencyKind.TPOT), policy)
    assert seen and all(d.token_budget is None for d in seen)


def _flat_engine(cfg: LawConfig, ticks: int) -> list[Decision]:
    """An engine whose inter-token P99 does not move with the budget (nor the cap): 50 ms whatever."""
    state: LawState = initial_state(cfg)
    budget, out = 8192.0, []
    for k in range(1, ticks + 1):
        obs = Observation(
            now_s=5.0 * k,
            p99_s=0.05 + 0.001 * (k % 3),  # a little noise: a line needs residuals
            running=0.9 * state.cap,
            waiting=0.0,
            request_rate=10.0,
            prompt_p95=3500.0,
            token_budget=budget,
            tpot_mean_s=0.02,
            ttft_mean_s=0.3,
            queue_time_mean_s=0.0,
            output_tokens_mean=150.0,
            ttft_p99_s=0.5,
        )
        decision = LAWS["levers"](state, obs, cfg)
        state = decision.state
        if decision.token_budget is not None:
            budget = float(decision.token_budget)
        out.append(decision)
    return out


def test_a_budget_that_buys_nothing_is_given_back_and_the_verdict_says_so() -> None:
    kind = LatencyKind.INTER_TOKEN
    cfg = LawConfig(slo_target_s=TARGET_S, latency_kind=kind, ceiling=128, ttft_bound_s=2.5)
    decisions = _flat_engine(cfg, 120)
    explored = [d.token_budget for d in decisions if d.reason == "budget-explore"]
    assert explored and min(b for b in explored if b is not None) < 3500  # it did try the budget
    inert = [d for d in decisions if d.state.budget_verdict == "budget-inert"]
    assert inert, "the law never concluded the budget does not move the signal"
    # A confidently flat line: the budget goes back to the engine's own, and the reason is said.
    assert inert[0].token_budget == 8192 and "no engine lever reaches the SLO" in inert[0].detail
    last = decisions[-1]
    assert last.token_budget == 8192 and last.state.budget_verdict == "budget-inert"
    # Then the cap's model judges its own lever: flat too, so the cap is inert (no cut after the verdict).
    # "Infeasible" would need the line measured near one sequence; it was measured at batches 40..115.
    assert last.reason == "lever-inert" and "the cap does not move" in last.detail
    first = next(i for i, d in enumerate(decisions) if d.reason == "lever-inert")
    assert all(d.cap >= decisions[first].cap for d in decisions[first:]), [d.cap for d in decisions]


def test_the_status_shows_the_budget_the_engines_hold_once_the_law_moves_it() -> None:
    kind = LatencyKind.INTER_TOKEN
    cfg = LawConfig(slo_target_s=TARGET_S, latency_kind=kind, ceiling=128, ttft_bound_s=2.5)
    decisions = _flat_engine(cfg, 20)
    moved = next(d for d in decisions if d.token_budget is not None)
    untouched = dataclasses.replace(moved, token_budget=None)  # a law that never moved the budget

    def status(decision: Decision, held: int | None) -> dict[str, object]:
        return loop_patch(decision, cfg, ceiling=128, observed_p99_s=0.05, held_budget=held)

    assert status(moved, moved.token_budget)["tokenBudget"] == moved.token_budget
    assert "tokenBudget" not in status(untouched, 8192)  # the engine's own budget: nothing to report


def test_a_budget_lowered_for_an_inter_token_slo_comes_back_when_the_slo_turns_to_tpot() -> None:
    kind = LatencyKind.INTER_TOKEN
    cfg = LawConfig(slo_target_s=TARGET_S, latency_kind=kind, ceiling=128, ttft_bound_s=2.5)
    lowered = next(d for d in _flat_engine(cfg, 20) if d.token_budget is not None and d.token_budget < 8192)
    tpot = cfg.model_copy(update={"latency_kind": LatencyKind.TPOT})
    now = (lowered.state.budget_moved_s or 0.0) + 5.0
    obs = Observation(now_s=now, p99_s=0.02, token_budget=lowered.token_budget)
    back = LAWS["levers"](lowered.state, obs, tpot)
    assert back.token_budget == 8192 and back.state.budget == 8192


def _chunked_engine(
    cfg: LawConfig, ticks: int, wrong_verdict_at: int | None = None
) -> list[tuple[Decision, float]]:
    """An engine whose inter-token P99 is the largest chunk a step carried in the window: 10 ms + 24 us per
    token of it (the H200 at cap 64 with 6-8k-token prompts, GPU report 3e). At tick `wrong_verdict_at` the
    law's memory is given the verdict that neither lever reaches the SLO, the budget back at the engine's own:
    right for the cap, wrong for the budget, as the H200 run of 3n judged the budget (a line flattened by the
    load's first windows); None, never."""
    state: LawState = initial_state(cfg)
    budget, held, out = 8192.0, [], []
    for k in range(1, ticks + 1):
        now = cfg.tick_s * k
        if k == wrong_verdict_at:
            budget = 8192.0
            # The cap's verdict is right here (the P99 does not move with the batch); the budget's is not.
            update = {
                "verdict": "lever-inert",
                "budget_verdict": "budget-inert",
                "budget": 8192,
                "budget_moved_s": now - cfg.tick_s,
            }
            state = state.model_copy(update=update)
        held = [*held, (now, budget)]
        chunk = max(min(b, 7500.0) for t, b in held if now - t < cfg.window_s)
        p99 = (0.010 + 24e-6 * chunk) * (1.0 + 0.03 * ((k % 5) - 2) / 2)  # a little noise
        obs = Observation(
            now_s=now, p99_s=p99, running=30.0 + (k % 7), waiting=0.0, request_rate=14.5, prompt_p95=7500.0,
            token_budget=budget, tpot_mean_s=0.02, ttft_mean_s=0.3, queue_time_mean_s=0.0,
            output_tokens_mean=150.0, ttft_p99_s=0.8,
        )  # fmt: skip
        decision = LAWS["levers"](state, obs, cfg)
        state = decision.state
        if decision.token_budget is not None:
            budget = float(decision.token_budget)
        out.append((decision, p99))
    return out


def _h200_itl_config() -> LawConfig:
    return LawConfig(
        slo_target_s=0.05, latency_kind=LatencyKind.INTER_TOKEN, ceiling=256, initial_cap=128,
        ttft_bound_s=2.5, tick_s=2.0, window_s=10.0, cooldown_s=4.0,
    )  # fmt: skip


def test_the_budget_settles_under_the_target_not_at_it() -> None:
    """A P99 SLO met half the time is missed: the budget rests where the P99 is under the target (H200, GPU
    report 3n: a hold band around the target let the P99 sit at 48.5 ms against 50, and half the client's
    10-s windows missed). With the band around the target this engine's late ticks met it 0.6 of the time."""
    cfg = _h200_itl_config()
    run = _chunked_engine(cfg, 150)
    late = np.array([p99 for _, p99 in run[40:]])  # past the first minute and a half
    assert float(np.mean(late <= cfg.slo_target_s)) >= 0.95
    assert float(np.median(late)) <= 0.92 * cfg.slo_target_s
    budgets = [d.token_budget for d, _ in run[40:] if d.token_budget is not None]
    assert budgets and max(budgets) < 8192  # it did not get there by giving the lever up


def test_a_wrong_inert_verdict_is_undone_by_the_window_after_the_give_back() -> None:
    cfg = _h200_itl_config()
    wrong = 60  # two minutes in: the budget has long been answering the miss
    run = _chunked_engine(cfg, 120, wrong_verdict_at=wrong)
    before = [d.token_budget for d, _ in run[wrong - 10 : wrong - 1]]
    assert before and all(b is not None and b < 2048 for b in before)  # the lever was working
    after = run[wrong - 1 :]
    # The give-back's window put the inter-token P99 far past the target; the line, fed that window, rises
    # with the budget, so the verdict goes and the budget comes back down within a few windows.
    assert max(p99 for _, p99 in after[:8]) > 0.15
    lowered = [d.token_budget is not None and d.token_budget < 2048 for d, _ in after]
    assert any(lowered), "the budget stayed at the engine's own: the wrong verdict held"
    recovered = lowered.index(True)
    assert recovered * cfg.tick_s <= 4 * cfg.window_s
    assert all(d.state.budget_verdict != "budget-inert" for d, _ in after[recovered:])
    late = [p99 for _, p99 in after[recovered + 10 :]]
    assert late and sum(p <= cfg.slo_target_s for p in late) / len(late) >= 0.8


def test_the_budget_of_the_last_miss_is_remembered_for_a_minute_whatever_the_tick() -> None:
    """After a miss at 1816 and a cut to 908, a comfortable P99 raises half way back (1362 -> 1589), not
    straight to 2724, until a minute of comfort says the load changed; at a 2-s tick that is 30 ticks, not
    the table's 12 idle ticks (H200, GPU report 3n, run 2: the doubling re-made the miss, P99 88 ms)."""
    cfg = _h200_itl_config()

    def raise_after(comfortable_s: float) -> int | None:
        ticks = int(comfortable_s / cfg.tick_s)
        state = initial_state(cfg).model_copy(
            update={
                "budget": 1362, "budget_ceiling": 8192, "budget_missed": 1816, "budget_moved_s": 0.0,
                "p99_smoothed": 0.030, "comfortable_ticks": ticks,
            }
        )  # fmt: skip
        obs = Observation(
            now_s=100.0, p99_s=0.030, running=30.0, waiting=0.0, request_rate=14.5, prompt_p95=7500.0,
            token_budget=1362, tpot_mean_s=0.02, ttft_mean_s=0.3, queue_time_mean_s=0.0,
            output_tokens_mean=150.0, ttft_p99_s=0.8,
        )  # fmt: skip
        return LAWS["levers"](state, obs, cfg).token_budget

    assert raise_after(30.0) == 1589
    assert raise_after(70.0) == 2724
