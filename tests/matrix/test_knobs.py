"""The knob study (governor_twin.matrix.knobs): one knob moves, the rest stay, nothing leaks between runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import governor.core.law.computed as computed
import governor.core.levers.fit as fit
import pytest
from governor.core.law.model import Observation
from governor_twin.matrix.knobs import KNOBS, default_row, markdown, row, variant_tasks
from governor_twin.matrix.knobs import main as knobs_main
from governor_twin.matrix.profiles import derive_targets, get_profile
from governor_twin.matrix.run import NEW, Cell, Plan, Task, evaluate, load_law, run_task, scenarios
from governor_twin.policies import LawPolicy
from governor_twin.scenarios import _shared_root


def _one_cell() -> tuple[list[Cell], list[Plan]]:
    prof = get_profile("cpu_tiny_llama")
    pairs = [(prof, derive_targets(prof))]
    law, _ = load_law("governor.core.law:computed_decide")
    assert law is not None
    shared = str(_shared_root())
    cells = evaluate(pairs, ["steady"], law, 60.0, shared, jobs=1, cap_limit=2, targets=("medium",))
    plans = scenarios(pairs, ["steady"], 60.0, shared, ("medium",), 0)
    return cells, plans


def _constants() -> tuple[float, float, float]:
    """What the law reads: the queue floor's headroom, and TRUST in both modules that hold it."""
    return computed.RELIEF_HEADROOM, float(vars(computed)["TRUST"]), fit.TRUST


@dataclass
class _Recorder:
    """A policy that records the module constants the law would read at each tick."""

    name: str = "recorder"
    tick_s: float = 5.0
    window_s: float = 30.0
    last_reason: str = ""
    token_budget: int | None = None
    seen: list[tuple[float, float, float]] = field(default_factory=list)

    def start(self, ceiling: int) -> int:
        return ceiling

    def decide(self, obs: Observation) -> int:
        self.seen.append(_constants())
        return 8


def test_every_knob_has_two_values_around_a_default_the_law_defines() -> None:
    for knob in KNOBS:
        low, high = knob.values
        default = knob.default()
        assert low < high, knob.name
        if default is not None:  # max_step's default is "no limit"
            assert low < default < high, knob.name


def test_a_constant_is_set_for_its_run_only() -> None:
    _, plans = _one_cell()
    trust = next(k for k in KNOBS if k.name == "TRUST")
    headroom = next(k for k in KNOBS if k.name == "RELIEF_HEADROOM")
    _, trust_constants = trust.task_args(1.5)
    _, headroom_constants = headroom.task_args(1.2)
    recorder = _Recorder()
    plan = plans[0]
    task = Task(plan.scenario, plan.profile, recorder, plan.judge, 0, trust_constants + headroom_constants)
    run_task(task)
    assert recorder.seen and set(recorder.seen) == {(1.2, 1.5, 1.5)}  # both modules' TRUST, and the headroom
    assert _constants() == (1.1, 1.25, 1.25)  # put back after the run


def test_a_config_knob_reaches_the_law_and_a_control_moves_nothing() -> None:
    cells, plans = _one_cell()
    law, _ = load_law("governor.core.law:computed_decide")
    assert law is not None
    tick = next(k for k in KNOBS if k.name == "tick_s")
    (task,) = variant_tasks(plans, law, tick, 10.0, 0)
    assert isinstance(task.policy, LawPolicy) and task.policy.config.tick_s == 10.0
    control = next(k for k in KNOBS if k.control)
    (task,) = variant_tasks(plans, law, control, control.values[1], 0)
    got = run_task(task)["medium"].goodput_rps
    assert got == pytest.approx(cells[0].scores[NEW].goodput_rps, rel=0, abs=0)
    r = row(cells, control, control.values[1], [got])
    assert (r.down, r.up, r.largest) == (0, 0, "none")
    assert (r.worst, r.median, r.mean) == (default_row(cells).worst,) * 3
    table = markdown([default_row(cells), r], "header")
    assert f"| {control.name} (control) | {control.default():g} | {control.values[1]:g} |" in table


def test_a_value_that_costs_goodput_counts_as_a_cell_down() -> None:
    cells, _ = _one_cell()
    knob = next(k for k in KNOBS if k.name == "alpha")
    default = cells[0].scores[NEW].goodput_rps
    r = row(cells, knob, 0.25, [default / 2])
    base = default_row(cells)
    assert (r.down, r.up) == (1, 0)
    assert r.mean == pytest.approx(base.mean / 2)
    assert r.largest.startswith("cpu_tiny_llama/medium/steady -")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--only", "alpha,no_such_knob", "--out", "x"], "unknown knob(s) in --only: no_such_knob"),
        (["--only", "alpha"], "name its folder with --out"),
        (["--seed", "-1"], "--seed must be 0 or more"),
        (["--jobs", "0"], "--jobs 1 or more"),
    ],
)
def test_bad_arguments_are_usage_errors_before_any_run(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        knobs_main(argv)
    assert stop.value.code == 2 and said in capsys.readouterr().err
