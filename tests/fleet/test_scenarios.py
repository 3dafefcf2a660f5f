"""The fleet's scenarios: a seed draws a scenario again and nothing else; the held-out ones stand apart; the
command refuses what it cannot run."""

from __future__ import annotations

import numpy as np
import pytest
from governor_twin.fleet.__main__ import main
from governor_twin.fleet.grid import entries
from governor_twin.fleet.ours import Ours
from governor_twin.fleet.scenarios import ALL, BUILDERS, HELD_OUT


@pytest.mark.parametrize("name", ["azure", "bursts"])
def test_a_seed_draws_the_scenario_again_and_seed_0_is_the_reported_one(name: str) -> None:
    reported, again, other = ALL[name](64), ALL[name](64, 0), ALL[name](64, 1)
    assert np.array_equal(reported.sent, again.sent) and np.array_equal(reported.prompt, again.prompt)
    # a new draw of the same scenario: other arrivals, the same rate, length, replica's worth and start
    assert not np.array_equal(reported.sent[:1000], other.sent[:1000])
    assert other.sent.size == pytest.approx(reported.sent.size, rel=0.03)
    assert (other.duration_s, other.warmup_s, other.initial_replicas) == (
        reported.duration_s,
        reported.warmup_s,
        reported.initial_replicas,
    )
    assert other.replica_rps == reported.replica_rps


def test_the_held_out_scenarios_are_apart_from_the_reported_ones() -> None:
    assert not set(HELD_OUT) & set(BUILDERS)
    for name, build in HELD_OUT.items():
        scn = build(64)
        assert scn.name == name  # its report section is headed by the name it is asked for
        assert scn.sent.size > 0 and scn.warmup_s > 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--held-out", "--scenarios", "azure"], "not both"),
        (["--scenarios", "azure,nope"], "unknown scenario(s) nope"),
        (["--seed", "-1"], "--seed must be 0 or more"),
        (["--workers", "0"], "--workers must be 1 or more"),
    ],
)
def test_the_command_refuses_what_it_cannot_run(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_the_ablations_are_the_rows_no_user_can_ask_for() -> None:
    """Without the demand rule or the sizing: no InferenceService field switches them off. The other law, the
    cooldown and the Alertmanager path are the user's to choose, so those rows are ours as shipped."""
    ours = [p for p in (make() for _, make in entries(ALL["bursts"](64))) if isinstance(p, Ours)]
    assert {p.knob for p in ours if p.ablation} == {"law's wish only", "unsized steps"}
    assert {p.knob for p in ours if not p.ablation} == {
        "defaults",
        "down 120 s",
        "no Alertmanager path",
        "rules law",
    }
