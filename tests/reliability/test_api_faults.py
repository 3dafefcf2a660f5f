"""API faults: the real ``governor operator`` against an emulator that answers 409s, 500s, hangs, cuts
watch streams mid-event and answers late (tests/support/kube_faults.py).

Each test governs one InferenceService ("alpha", its pod the twin engine), then injects a fault while the
user creates a second one ("beta") and edits the first. Once the fault stops (or despite it, for the
intermittent ones) the operator must converge: both reconciled at their current generation, alpha's law
ticking again from where it was, alpha's children the same objects (same uids), one of each child, the cap
inside [minCap, ceiling] on status and on the engine at every sample, and the operator process alive.
Each prints one line of figures, ``RELIABILITY | ...``; docs/reliability.md holds one run's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.reliability import harness
from tests.reliability.harness import NS, Bounds, faulty_emulator, governed, watching
from tests.support.kube import eventually
from tests.support.kube_faults import ALL, WRITES, Fault, FaultyEmulator
from tests.support.operator_process import Operator


@dataclass(frozen=True)
class Scenario:
    fault: Fault
    lasts_s: float | None  # None: intermittent, left on until the operator has converged despite it


SCENARIOS = {
    "409 on every write for 5 s": Scenario(Fault(effect="conflict", on=WRITES), 5),
    "409 on every 2nd write": Scenario(Fault(effect="conflict", on=WRITES, every=2), None),
    "500 on every request for 5 s": Scenario(Fault(effect="error", on=ALL), 5),
    "500 on every 3rd request": Scenario(Fault(effect="error", on=ALL, every=3), None),
    "Kopf's writes unanswered 25 s (x2)": Scenario(
        Fault(effect="hang", on=WRITES, agent="kopf", seconds=25, times=2), None
    ),
    "adapter's requests unanswered 8 s (x3)": Scenario(
        Fault(effect="hang", on=ALL, agent="httpx", seconds=8, times=3), None
    ),
    "watch streams cut mid-event (x6)": Scenario(Fault(effect="cut", on={"watch"}, times=6), None),
    "every answer 0.3 s late": Scenario(Fault(effect="slow", on=ALL, seconds=0.3), None),
}


@pytest.fixture(scope="module")
def twin() -> Iterator[int]:
    with harness.twin_engine() as port:
        yield port


def converged(emulator: FaultyEmulator, ticks_from: int) -> bool:
    return (
        harness.reconciled(emulator, "alpha")
        and harness.reconciled(emulator, "beta")
        and harness.ticks(emulator, "alpha") >= ticks_from + 2
    )


@pytest.mark.parametrize("label", list(SCENARIOS))
async def test_operator_converges_after_api_fault(label: str, twin: int, tmp_path: Path) -> None:
    scenario = SCENARIOS[label]
    fault = Fault(
        **{
            k: getattr(scenario.fault, k)
            for k in ("effect", "on", "resource", "agent", "seconds", "every", "times")
        }
    )  # fresh counters
    async with faulty_emulator() as emulator:
        operator = Operator(str(emulator.url).rstrip("/"), tmp_path / "operator.log")
        await operator.start()
        try:
            await governed(emulator, "alpha", twin, operator)
            before_uids, before_ticks = harness.uids(emulator, ("alpha",)), harness.ticks(emulator, "alpha")
            async with watching(Bounds(emulator, "alpha", twin)) as bounds:
                emulator.inject(fault)
                started = time.monotonic()
                # The user acts during the fault: a new InferenceService, an edit of the existing one.
                await harness.create_isvc(emulator, "beta")
                await harness.write(
                    emulator,
                    "PATCH",
                    f"/apis/governor.vllm.ai/v1alpha1/namespaces/{NS}/inferenceservices/alpha",
                    {"spec": {"slo": {"targetMs": 900}}},
                )
                if scenario.lasts_s is not None:
                    await asyncio.sleep(scenario.lasts_s)
                    emulator.clear()
                    started = time.monotonic()
                ticks_from = harness.ticks(emulator, "alpha")
                await eventually(
                    lambda: converged(emulator, ticks_from),
                    timeout=45,
                    interval=0.2,
                    what=f"convergence after: {label}",
                )
                converge_s = time.monotonic() - started
                emulator.clear()
            assert operator.alive, "the operator process exited"
            lost = [k for k, uid in before_uids.items() if harness.uids(emulator, ("alpha",)).get(k) != uid]
            counts = harness.child_count(emulator)
            duplicated = sum(n - 2 for n in counts.values() if n > 2)
            went_back = [t for t in bounds.law_ticks if 0 <= t < before_ticks]
            print(
                f"\nRELIABILITY | {label} | injected {fault.injected} | converged {converge_s:.1f} s | "
                f"children re-created {len(lost)} | duplicated {duplicated} | "
                f"law went back {len(went_back)} | "
                f"caps outside [{harness.MIN_CAP}, {harness.CEILING}] {len(bounds.outside)} "
                f"of {bounds.samples} samples x2"
            )
            assert fault.injected > 0, "the fault never hit a request"
            assert not lost, f"children re-created: {lost}"
            assert counts == {"deployments": 2, "services": 2, "poddisruptionbudgets": 2, "secrets": 2}
            assert not went_back, f"status.law restarted: {before_ticks} then {sorted(set(went_back))}"
            assert not bounds.outside, bounds.outside
            assert harness.status(emulator, "alpha").get("cap") is not None
        finally:
            await operator.stop()
