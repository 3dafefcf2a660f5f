"""How far the cap sets the per-token P99 on prefill-heavy traffic: TPOT at each static cap against
d + κ × cap × p / out, where p is a request's prefill compute (its prompt tokens at the profile's cost per
prefill token), out its output tokens and d the decode step. κ is about how many other requests' prefills,
per cap slot, land inside one request's decode; printed at the P99 (κ99) and at the median (κ50).

Two sources: the H200's sweep with the engine kept full at each cap (GPU report section 3s, the committed
`service-2026-12-04/prefill_heavy/` CSVs: vLLM 0.26, prompts 2,048-3,584 tokens, outputs 8-32), and the twin's
three profiles on the matrix's prefill-heavy workload (0.8 of capacity, not kept full: past the batch the
load fills, the cap binds nothing and κ falls).

    python benchmarks/prefill_interference.py
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import numpy as np
from governor_twin.matrix.profiles import PROFILES, derive_targets, get_profile, saturated_tpot_p99
from governor_twin.matrix.run import scenarios
from governor_twin.policies import StaticPolicy
from governor_twin.profile import StepTimeModel
from governor_twin.scenarios import _shared_root
from governor_twin.sim import run

H200 = Path(__file__).parent / "gpu/results/service-2026-12-04/prefill_heavy"
CAPS = (2, 4, 8, 12, 16, 24, 32, 64, 128)


def _row(
    cap: int, running: float, p99_s: float, p50_s: float, prefill_s: float, out: float, step: StepTimeModel
) -> str:
    unit = cap * prefill_s / out  # one decode's share of the prefills one slot per cap unit lets in
    decode = step.base_s + step.per_seq_s * min(cap, running)
    return (
        f"| {cap} | {running:.1f} | {p50_s * 1e3:.1f} | {p99_s * 1e3:.1f} | {unit * 1e3:.1f} | "
        f"{(p99_s - decode) / unit:.2f} | {(p50_s - decode) / unit:.2f} |"
    )


HEAD = (
    "| cap | running | TPOT P50 ms | P99 ms | cap x p / out ms | κ99 | κ50 |\n|---|---|---|---|---|---|---|"
)


def h200() -> list[str]:
    step = get_profile("h200_llama8b").step
    points = list(csv.DictReader((H200 / "serving.csv").open()))
    requests = list(csv.DictReader((H200 / "serving_requests.csv").open()))
    rows = []
    for point in points:
        cap = int(point["cap"])
        kept = [
            r
            for r in requests
            if int(r["cap"]) == cap and not r["error"] and int(r["completion_tokens"] or 0) > 1
        ]
        prefill = statistics.mean(int(r["in_len"]) for r in kept) * step.per_prefill_token_s
        out = statistics.mean(int(r["completion_tokens"]) for r in kept)
        rows.append(
            _row(
                cap,
                float(point["mean_running"]),
                float(point["tpot_p99_ms"]) / 1e3,
                float(point["tpot_p50_ms"]) / 1e3,
                prefill,
                out,
                step,
            )
        )
    return rows


def twin(name: str, seed: int = 0) -> list[str]:
    prof = get_profile(name)
    targets = derive_targets(prof, saturated_tpot_p99(get_profile("h200_llama8b"), 1))
    plan = scenarios([(prof, targets)], ["prefill_heavy"], 150.0, str(_shared_root()), ["medium"], seed)[0]
    rows = []
    for cap in (c for c in CAPS if c <= prof.ceiling):
        res = run(plan.scenario, StaticPolicy(cap), seed=seed, profile=prof)
        done = res.done & (res.output > 1)
        tpot = res.tpot[done]
        prefill = float(res.prompt[done].mean()) * prof.step.per_prefill_token_s
        rows.append(
            _row(
                cap,
                float(res.tick_running.mean()),
                float(np.quantile(tpot, 0.99)),
                float(np.median(tpot)),
                prefill,
                float(res.output[done].mean()),
                prof.step,
            )
        )
    return rows


def main() -> None:
    print("## H200 (vLLM 0.26), engine kept full at each cap (p at the H200 8B profile's prefill cost)\n")
    print(HEAD, *h200(), sep="\n")
    for name in PROFILES:
        print(f"\n## twin, {name}, the matrix's prefill-heavy workload (seed 0)\n")
        print(HEAD, *twin(name), sep="\n")


if __name__ == "__main__":
    main()
