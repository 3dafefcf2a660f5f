"""How well the levers law knows what each cap does (issue 12, item 2: "predict both sides of the trade at
each cap"). For a matrix cell, the law governs the twin as in the matrix; over the cell's last phase the
script keeps, tick by tick, what the law's own models predict at each cap: the service rate of the queue
model (`governor.core.law.computed.queue_model`, the completions per second with every slot busy) and the
per-token P99 of the quantile line. Beside them, one twin engine kept full at that cap on the cell's own
request lengths: its completions per second, the TPOT P99 of its requests, and the running batch it held.
The medians over the phase's ticks are printed; a ratio below 1 means the law thinks the cap serves less
than it does (it then refuses cuts the queue could bear), above 1 more. A last column gives what the engine's
step costs alone say a full cap serves, by work conservation (`StepTimeModel.full_rate_rps`): the service a
law could compute if the engine reported its step costs, which vLLM does not export today.

This is a measure of the models, not of goodput: the matrix (`matrix_bench.py`) scores the decisions.

    python benchmarks/service_fidelity.py [--target medium] [--seed 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from governor.core.law import LawConfig, LawState, Observation, computed_decide
from governor.core.law.computed import queue_model
from governor.core.law.model import Decision
from governor_twin.matrix.profiles import derive_targets, get_profile
from governor_twin.matrix.run import _gpu, new_law_policy, static_caps
from governor_twin.matrix.workloads import build
from governor_twin.profile import EngineProfile
from governor_twin.scenarios import FullEngine, Slo, _shared_root, generate, kept_full
from governor_twin.sim import run
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parents[1]

CELLS = (
    ("h200_llama8b", "steady"),
    ("h200_llama8b", "longtail"),
    ("h200_llama8b", "prefill_heavy"),
    ("cpu_tiny_llama", "steady"),
    ("cpu_tiny_llama", "prefill_heavy"),
    ("h200_llama70b_derived", "steady"),
    ("h200_llama70b_derived", "prefill_heavy"),
)
PHASE_S = 150.0  # the matrix's phase


def saturated(
    profile: EngineProfile, cap: int, prompts: NDArray[np.int64], outputs: NDArray[np.int64]
) -> FullEngine:
    """An engine kept full at `cap` on these lengths, with a queue that outlasts the measured span."""
    return kept_full(profile, prompts, outputs, cap=cap, requests=max(600, 4 * cap + 400))


class Predicted(NamedTuple):
    service: dict[int, list[float]]  # per cap, the queue model's service at each tick (req/s)
    p99: dict[int, list[float]]  # per cap, the quantile line's P99 at each tick (s)
    held: list[int]  # the cap the law held at each tick
    prompts: NDArray[np.int64]
    outputs: NDArray[np.int64]


def predictions(profile_name: str, workload: str, target: str, seed: int, caps: list[int]) -> Predicted:
    """What the law's models predicted over the cell's last phase, and that phase's request lengths."""
    profile = get_profile(profile_name)
    targets = derive_targets(profile)
    tpot_s = getattr(targets, f"{target}_s")
    scenario = build(
        profile, workload, Slo(target_s=targets.medium_s, ttft_s=targets.ttft_s), PHASE_S, str(_shared_root())
    )
    work, scenario = generate(scenario, seed)
    scenario = replace(scenario, slo=Slo(target_s=tpot_s, ttft_s=targets.ttft_s))
    last_start = scenario.phase_bounds()[-1][1]
    service: dict[int, list[float]] = defaultdict(list)
    p99: dict[int, list[float]] = defaultdict(list)
    held: list[int] = []

    def law(state: LawState, obs: Observation, cfg: LawConfig) -> Decision:
        decision = computed_decide(state, obs, cfg)
        if obs.now_s >= last_start:
            held.append(decision.cap)
            model = queue_model(state, obs, decision.state, cfg.tick_s)
            line = decision.state.quantile_fit
            for cap in caps:
                if model is not None and model.work is not None:
                    service[cap].append(model.service(cap))
                if line is not None and line.count > 2:
                    p99[cap].append(line.predict((float(cap),)).mean)
        return decision

    policy = new_law_policy(law, tpot_s, targets.ttft_s, profile.ceiling, _gpu(profile))
    run(scenario, policy, seed=seed, profile=profile)
    last = work.phase == len(scenario.phases) - 1
    ok = work.prompt + work.output <= profile.max_model_len
    return Predicted(service, p99, held, work.prompt[last & ok], work.output[last & ok])


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _summary(cell: str, held: list[int], ratios: dict[int, tuple[float, float, float]]) -> str:
    """One row: the ratios at the cap nearest the median held one, and their range at caps below half it."""
    middle = statistics.median(held)
    nearest = min(ratios, key=lambda c: abs(math.log(c / middle)))
    below = [ratios[c] for c in ratios if c <= middle / 2]

    def span(i: int) -> str:
        values = [r[i] for r in below if math.isfinite(r[i])]
        return f"{min(values):.2f}-{max(values):.2f}" if values else "-"

    at = ratios[nearest]
    return (
        f"| {cell} | {min(held)}-{max(held)} ({middle:g}) | {at[0]:.2f} (cap {nearest}) | {span(0)} "
        f"| {at[1]:.2f} | {span(1)} | {at[2]:.2f} | {span(2)} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="medium", choices=("tight", "medium", "loose"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/matrix/SERVICE_FIDELITY.md")
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error("--seed must be 0 or more")
    began = time.monotonic()
    lines = [
        "# What the levers law predicts a cap serves, against the twin kept full at that cap",
        "",
        f"Generated by `python benchmarks/service_fidelity.py --target {args.target} --seed {args.seed}`. "
        "Per cell: the law governs it as in the matrix (150 s phases); over the last phase, the median of "
        "what its queue model predicts each cap serves (req/s with every slot busy) and what its quantile "
        "line predicts for the per-token P99, beside one twin engine kept full at the cap on that phase's "
        "request lengths (req/s, TPOT P99 of its requests, mean running batch). Ratio: predicted / measured. "
        "Step costs: the service the engine's step costs give by work conservation, over the same lengths.",
        "",
        "## Summary",
        "",
        "| cell | caps held (median) | service ratio: at the held cap | below half of it "
        "| P99 ratio: at the held cap | below half of it | step costs' service ratio: at the held cap "
        "| below half of it |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary_at = len(lines)
    for profile_name, workload in CELLS:
        profile = get_profile(profile_name)
        caps = [c for c in static_caps(profile.ceiling) if c >= 2]
        seen = predictions(profile_name, workload, args.target, args.seed, caps)
        lines += [
            "",
            f"## {profile_name} / {workload} ({args.target} target)",
            "",
            f"The law held caps {min(seen.held)}-{max(seen.held)} over this phase (median "
            f"{statistics.median(seen.held):g}).",
            "",
            "| cap | served, full (req/s) | predicted | ratio | TPOT P99, full (ms) | predicted | ratio "
            "| running, full | step costs (req/s) | ratio |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        ratios: dict[int, tuple[float, float, float]] = {}
        for cap in caps:
            rate, tpot, running = saturated(profile, cap, seen.prompts, seen.outputs)
            s_hat, p_hat = _median(seen.service[cap]), _median(seen.p99[cap])
            costed = profile.step.full_rate_rps(cap, seen.prompts.tolist(), seen.outputs.tolist())
            ratios[cap] = (s_hat / rate, p_hat / tpot, costed / rate)
            lines.append(
                f"| {cap} | {rate:.2f} | {s_hat:.2f} | {s_hat / rate:.2f} | {1e3 * tpot:.1f} | "
                f"{1e3 * p_hat:.1f} | {p_hat / tpot:.2f} | {running:.1f} | {costed:.2f} | "
                f"{costed / rate:.2f} |"
            )
        print("\n".join(lines[-len(caps) - 7 :]), flush=True)
        lines.insert(summary_at, _summary(f"{profile_name} / {workload}", seen.held, ratios))
        summary_at += 1
    lines.append(f"\n{len(CELLS)} cells in {time.monotonic() - began:.0f} s.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"Report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
