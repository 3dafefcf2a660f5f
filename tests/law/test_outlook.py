"""The levers law says what its models saw (Decision.outlook), and the operator exports it: the per-token cap
and the queue floor that bracket the cap decided, the arrivals and the modelled service at that cap. The
fluid engine of test_queue_floor answers each tick, so each figure has a closed-form value to meet."""

from __future__ import annotations

import math
from dataclasses import replace

from governor.adapters import opmetrics
from governor.core import signals
from governor.core.law import LAWS, LawConfig, LawState, Outlook
from governor.core.levers.steps import StepCosts
from governor.core.reading import Reading
from governor.services.control import Applied, Observed, StepReport
from prometheus_client import REGISTRY

from tests.law.test_queue_floor import FluidEngine, config, drive, service, tpot


def test_the_decision_names_the_queue_floor_and_the_rates_it_weighed() -> None:
    # 28 req/s arrive at 14 ms, and the batch settles at ~55 below every cap the law holds. With no spread
    # in the batch no fit is confident: no per-token cap is claimed, and the queue model has no line, so
    # its service is the completions scaled by cap / batch. The floor the cut is held at is the one the
    # outlook names, the arrivals are the engine's, the service is the model's at the cap decided.
    run = drive(FluidEngine(arrivals=28.0), config(0.014), ticks=120, start_cap=256)
    settled = run[-1][0].running or 0.0
    held = [d for _, d in run if d.reason == "queue-floor"]
    assert held, [d.reason for _, d in run]
    for d in held:
        assert d.outlook is not None and d.outlook.queue_floor is not None
        assert f"no cut below {d.outlook.queue_floor}," in d.detail
        # The smallest cap serving the arrivals with 10 % to spare, in that model: 28 c / B >= 1.1 x 28.
        assert d.outlook.queue_floor == math.ceil(1.1 * settled - 1e-9), (d.outlook, settled)
        assert d.outlook.arrivals_rps is not None and math.isclose(d.outlook.arrivals_rps, 28.0, rel_tol=0.02)
        assert d.outlook.service_rps is not None
        assert math.isclose(d.outlook.service_rps, 28.0 * d.cap / settled, rel_tol=0.02), d.outlook
        assert d.outlook.per_token_cap is None


def test_a_confident_fit_names_a_per_token_cap_above_the_floor_each_near_its_closed_form() -> None:
    # A backlog takes the cap from 24 to ~46 and drains, so the batch moves and the fits learn the line.
    # Settled, 20 req/s arrive: the per-token cap (37 in closed form at the 0.9 x target aim; the fit reads
    # the P99 against the window's largest batch, which this lag-free engine biases upwards) lies above the
    # floor that carries them (34 with the 10 % to spare), and the service is the engine's at the cap held.
    run = drive(FluidEngine(arrivals=20.0, waiting=300.0), config(0.014), ticks=60, start_cap=24)
    per_token = max(c for c in range(1, 257) if 1.3 * tpot(c) <= 0.9 * 0.014)
    carrying = min(c for c in range(1, 257) if service(c) >= 20.0 * 1.1)
    for _, d in run[40:]:
        outlook = d.outlook
        assert outlook is not None and outlook.per_token_cap is not None and outlook.queue_floor is not None
        assert per_token <= outlook.per_token_cap <= 1.3 * per_token, (outlook, per_token)
        assert abs(outlook.queue_floor - carrying) <= 0.1 * carrying, (outlook, carrying)
        assert outlook.queue_floor < outlook.per_token_cap
        assert outlook.arrivals_rps is not None and math.isclose(outlook.arrivals_rps, 20.0, rel_tol=0.02)
        assert outlook.service_rps is not None
        assert math.isclose(outlook.service_rps, service(d.cap), rel_tol=0.05), (d.cap, outlook)


def test_where_no_cap_carries_the_arrivals_no_floor_is_claimed() -> None:
    # 50 req/s arrive where the ceiling serves 41: no cap carries them. A cut for the per-token miss is held
    # at the limit, and neither the detail nor the outlook names a cap that carries the arrivals.
    run = drive(FluidEngine(arrivals=50.0, waiting=500.0), config(0.014), ticks=12, start_cap=256)
    assert service(256) < 50.0
    held = [d for _, d in run if d.reason == "queue-floor"]
    assert held, [d.reason for _, d in run]
    for d in held:
        assert d.cap == 256
        assert "no cap up to it carries the arrivals" in d.detail, d.detail
        assert "the smallest cap that carries" not in d.detail
    for _, d in run:
        assert d.outlook is not None and d.outlook.queue_floor is None, d.outlook
        assert d.outlook.arrivals_rps is not None and d.outlook.service_rps is not None
        assert d.outlook.service_rps < d.outlook.arrivals_rps


def test_the_rule_table_has_no_outlook() -> None:
    cfg = config(0.014)
    state = LawState(cap=64)
    engine = FluidEngine(arrivals=20.0)
    for i in range(10):
        d = LAWS["rules"](state, engine.tick(state.cap, i * 5.0), cfg)
        assert d.outlook is None
        state = d.state


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": "test-outlook", "name": "svc", **labels})


def test_the_step_exports_the_outlook_and_nan_where_the_models_say_nothing() -> None:
    cfg = LawConfig(slo_target_s=0.02)
    (_, decision), *_ = drive(FluidEngine(arrivals=10.0), config(0.014), ticks=1, start_cap=64)
    report = StepReport(
        decision=decision,
        observed=Observed(Reading(), available=True, fresh=True),
        observed_p99=None,
        applied=Applied(held_cap=decision.cap),
        desired_replicas=None,
    )
    try:
        step = StepCosts(base_s=0.005, per_context_token_s=2e-8, per_prefill_token_s=3e-5)
        told = Outlook(
            per_token_cap=40, queue_floor=None, arrivals_rps=12.5, service_rps=30.0, step_costs=step
        )
        opmetrics.export_step("test-outlook", "svc", cfg, _with(report, told))
        assert _sample(signals.OP_MODEL_STEP_COST, part="base") == 0.005
        assert _sample(signals.OP_MODEL_STEP_COST, part="prefill_token") == 3e-5
        per_sequence = _sample(signals.OP_MODEL_STEP_COST, part="sequence")
        assert per_sequence is not None and math.isnan(per_sequence)  # not told apart from the base yet
        assert _sample(signals.OP_MODEL_PER_TOKEN_CAP) == 40
        assert _sample(signals.OP_MODEL_ARRIVALS) == 12.5
        assert _sample(signals.OP_MODEL_SERVICE) == 30.0
        floor = _sample(signals.OP_MODEL_QUEUE_FLOOR)
        assert floor is not None and math.isnan(floor)  # absent in PromQL: no stale value from a tick before
        opmetrics.export_step("test-outlook", "svc", cfg, _with(report, None))  # the rule table's decision
        for name in (signals.OP_MODEL_PER_TOKEN_CAP, signals.OP_MODEL_ARRIVALS, signals.OP_MODEL_SERVICE):
            value = _sample(name)
            assert value is not None and math.isnan(value), name
        base = _sample(signals.OP_MODEL_STEP_COST, part="base")
        assert base is not None and math.isnan(base)
    finally:
        opmetrics.forget_service("test-outlook", "svc")


def _with(report: StepReport, outlook: Outlook | None) -> StepReport:
    return replace(report, decision=replace(report.decision, outlook=outlook))


def test_the_outlook_reads_as_one_phrase() -> None:
    text = Outlook(per_token_cap=37, queue_floor=64, arrivals_rps=28.04, service_rps=25.1).describe()
    assert text == "per-token cap 37, queue floor 64, 28 req/s arriving, 25.1 served at the cap"
    assert Outlook().describe() == ""
