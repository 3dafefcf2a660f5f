"""When the control loop writes status (governor.core.status.loop_write_due): at once when something users or
automation act on changes (the cap, the mode, a condition's status, the replica wish), otherwise every
STATUS_REFRESH_TICKS ticks. The law runs on its own readings; the test keeps a status store as the API
would and counts the writes."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from governor.core import status as status_builders
from governor.core.law import LAWS, Decision, LawConfig, Observation, Outlook, initial_state
from governor.core.levers.steps import StepCosts

from tests.support.status import loop_patch

CFG = LawConfig(slo_target_s=0.020, ceiling=64, initial_cap=32, tick_s=5.0, window_s=15.0)
REFRESH = status_builders.STATUS_REFRESH_TICKS


def run(readings: list[Observation | None], refresh: int = REFRESH) -> tuple[list[int], dict[str, Any]]:
    """The ticks (1-based) on which status was written, and the last status."""
    live: dict[str, Any] = {"metadata": {"generation": 1}, "status": {}}
    state, writes = initial_state(CFG), []
    for i, obs in enumerate(readings, start=1):
        seen = obs or Observation(now_s=i * CFG.tick_s)
        decision = LAWS["rules"](state, seen, CFG)
        state = decision.state
        patch = loop_patch(
            decision,
            CFG,
            ceiling=64,
            observed_p99_s=seen.p99_s,
            live=live,
            metrics=(obs is not None, "Fresh" if obs else "NoSeries", ""),
            now=f"2026-12-01T00:00:{i:02d}Z",
        )
        if status_builders.loop_write_due(live["status"], patch, refresh):
            live["status"] = {**live["status"], **patch}
            writes.append(i)
    return writes, live["status"]


def steady(i: int, p99: float = 0.012) -> Observation:
    return Observation(
        now_s=i * CFG.tick_s, p99_s=p99 * (1 + 0.01 * (i % 3)), running=20.0, waiting=0.0, request_rate=5.0
    )


def test_a_quiet_object_is_refreshed_every_few_ticks_not_every_tick() -> None:
    writes, status = run([steady(i) for i in range(1, 31)])
    assert writes[0] == 1  # the first tick reports at once
    gaps = {b - a for a, b in itertools.pairwise(writes)}
    assert gaps == {REFRESH}, writes  # the P99 moved every tick; only the refresh wrote it
    assert status["law"]["ticks"] == writes[-1]


def test_a_cap_change_and_a_condition_flip_are_written_on_their_tick() -> None:
    readings: list[Observation | None] = [steady(i) for i in range(1, 9)]
    readings += [steady(i, p99=0.060) for i in range(9, 13)]  # 3x the target: the law cuts
    readings += [None, None]  # the metrics go away: MetricsAvailable flips
    writes, status = run(readings)
    caps = []
    state = initial_state(CFG)
    for i, obs in enumerate(readings, start=1):
        d = LAWS["rules"](state, obs or Observation(now_s=i * CFG.tick_s), CFG)
        caps.append((i, d.cap != d.previous_cap))
        state = d.state
    changed = [i for i, moved in caps if moved]
    assert changed and set(changed) <= set(writes), (changed, writes)
    assert 13 in writes  # the tick the metrics went away
    assert any(c["type"] == "MetricsAvailable" and c["status"] == "False" for c in status["conditions"])


def test_refresh_one_writes_every_tick() -> None:
    writes, _ = run([steady(i) for i in range(1, 11)], refresh=1)
    assert writes == list(range(1, 11))


def test_the_operator_refuses_a_refresh_below_one_tick(capsys: pytest.CaptureFixture[str]) -> None:
    from governor.cli import build_parser

    assert build_parser().parse_args(["operator", "--status-refresh-ticks", "3"]).status_refresh_ticks == 3
    for bad in ("0", "-2", "six"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["operator", "--status-refresh-ticks", bad])
        assert "--status-refresh-ticks" in capsys.readouterr().err


def _status_of(decision: Decision) -> dict[str, Any]:
    return loop_patch(decision, CFG, ceiling=64, observed_p99_s=0.012)


def test_status_carries_what_the_models_said_and_clears_it_when_they_say_nothing() -> None:
    decision = LAWS["rules"](initial_state(CFG), steady(1), CFG)
    assert decision.outlook is None  # the rule table has no models
    assert _status_of(decision)["outlook"] is None  # null: a merge patch removes the last tick's figures
    seen = Outlook(per_token_cap=41, queue_floor=12, arrivals_rps=7.123456, service_rps=9.87654)
    outlook = _status_of(replace(decision, outlook=seen))["outlook"]
    assert outlook == {
        "perTokenCap": 41,
        "queueFloor": 12,
        "arrivalsRps": 7.123,
        "serviceRps": 9.877,
        "step": None,
    }
    # A model that said only part: the rest is null (a merge patch removes it), never a zero.
    partial = _status_of(replace(decision, outlook=Outlook(arrivals_rps=3.0)))["outlook"]
    assert partial == {
        "perTokenCap": None,
        "queueFloor": None,
        "arrivalsRps": 3.0,
        "serviceRps": None,
        "step": None,
    }
    assert _status_of(replace(decision, outlook=Outlook()))["outlook"] is None
    # The queue model's service is inf where its hold time is 0: JSON has no inf, and the API server would
    # refuse the whole patch (cap, conditions and all). It is written as unknown.
    endless = _status_of(replace(decision, outlook=Outlook(queue_floor=3, service_rps=float("inf"))))
    assert endless["outlook"] == {
        "perTokenCap": None,
        "queueFloor": 3,
        "arrivalsRps": None,
        "serviceRps": None,
        "step": None,
    }
    assert _status_of(replace(decision, outlook=Outlook(arrivals_rps=float("nan"))))["outlook"] is None
    json.dumps(endless, allow_nan=False)  # what the API server would accept
    # No arrivals is a measurement, not silence.
    idle = _status_of(replace(decision, outlook=Outlook(arrivals_rps=0.0)))["outlook"]
    assert idle is not None and idle["arrivalsRps"] == 0.0
    # The step's costs in milliseconds (per thousand tokens for the token parts); a part not yet learned
    # is null; before any step is seen, nothing.
    costs = StepCosts(
        base_s=0.0061234,
        per_sequence_s=1.5e-4,
        per_prefill_token_s=3e-5,
        relative_error=0.0123,
        mean_step_s=0.009,
    )
    step = _status_of(replace(decision, outlook=Outlook(step_costs=costs)))["outlook"]["step"]
    assert step == {
        "meanMs": 9.0,
        "baseMs": 6.123,
        "perSequenceMs": 0.15,
        "per1kContextMs": None,
        "per1kPrefillMs": 30.0,
        "relativeError": 0.0123,
    }
    assert _status_of(replace(decision, outlook=Outlook(step_costs=StepCosts())))["outlook"] is None
    # The schema the CRD is generated from accepts what the builder writes.
    status_builders.InferenceServiceStatus.model_validate(_status_of(replace(decision, outlook=seen)))
    status_builders.InferenceServiceStatus.model_validate(
        _status_of(replace(decision, outlook=Outlook(step_costs=costs)))
    )
