"""The twin runs the levers law itself, not the rule table under its name: where the fit gets confident (a 2x
load step on the H200 profile lets the batch spread), its computed moves show in the twin's decision reasons
and change the caps the twin sets."""

from __future__ import annotations

from governor.core.law import LAWS
from governor_twin.matrix.profiles import derive_targets, get_profile
from governor_twin.matrix.reaction import step_scenario
from governor_twin.matrix.run import new_law_policy
from governor_twin.matrix.workloads import reference_capacity
from governor_twin.sim import run

# reasons only the levers law gives
COMPUTED = ("model-", "lever-inert", "infeasible", "queue-relief", "queue-floor")


def test_the_twin_runs_the_levers_laws_computed_moves() -> None:
    h200 = get_profile("h200_llama8b")
    targets = derive_targets(h200)
    scenario = step_scenario(h200, reference_capacity(h200), targets, 60.0)
    runs = {
        name: run(
            scenario,
            new_law_policy(LAWS[name], targets.medium_s, targets.ttft_s, h200.ceiling, "h200"),
            seed=0,
            profile=h200,
        )
        for name in ("levers", "rules")
    }
    levers = [(int(c), r) for c, r in zip(runs["levers"].tick_cap, runs["levers"].reasons, strict=True)]
    moved = [(c, r) for c, r in levers if r.startswith("model-")]
    assert moved, levers
    assert not [r for r in runs["rules"].reasons if r.startswith(COMPUTED)]
    assert runs["levers"].tick_cap.tolist() != runs["rules"].tick_cap.tolist()
