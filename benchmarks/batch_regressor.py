"""Why the levers law's mean-TPOT line misreads a cell: fit it within each static cap's run of one matrix cell
on two regressors, the window's mean of the running gauge (what the law sees: six samples a window, each read
between a step's finishes and its admissions) and the batch averaged over the window's time (from every
request's admission and finish, what a running sequence-seconds counter would give), and print both lines
beside what each cap measured. A gauge line flatter than the time-averaged one, with a higher intercept, is
the errors-in-variables bias that makes the queue floor under-read a small cap's service (README, Limits).

    python benchmarks/batch_regressor.py [PROFILE WORKLOAD TARGET CAPS]
    python benchmarks/batch_regressor.py h200_llama8b prefill_heavy loose 4,8,16,20,32,256
"""

from __future__ import annotations

import sys

import numpy as np
from governor.core.signals import LatencyKind
from governor_twin.engine import Engine
from governor_twin.matrix.profiles import derive_targets, get_profile, saturated_tpot_p99
from governor_twin.matrix.workloads import build
from governor_twin.observe import Observer
from governor_twin.scenarios import Slo, _shared_root, generate

WINDOW_S, TICK_S = 30.0, 5.0  # the law's defaults (LawConfig.window_s, tick_s)
SETTLE_TICKS = 12  # a minute from the start, before the windows are whole


def time_averaged_batch(engine: Engine, now: float, window_s: float) -> float:
    """Requests running over (now - window_s, now], averaged over that time."""
    n = engine.n
    start = np.where(np.isnan(engine.first_scheduled[:n]), now, engine.first_scheduled[:n])
    end = np.where(np.isnan(engine.finish[:n]), now, engine.finish[:n])
    overlap = np.clip(np.minimum(end, now) - np.maximum(start, now - window_s), 0.0, None)
    return float(overlap.sum() / window_s)


def main(argv: list[str]) -> None:
    defaults = ["h200_llama8b", "prefill_heavy", "loose", "4,8,16,20,32,256"]
    if len(argv) > len(defaults):
        raise SystemExit(__doc__)
    profile_name, workload, target, cap_list = [*argv, *defaults[len(argv) :]]
    caps = [int(c) for c in cap_list.split(",")]
    profile = get_profile(profile_name)
    targets = derive_targets(profile, saturated_tpot_p99(get_profile("h200_llama8b"), 1))
    tpot = dict(targets.items())[target]
    scenario = build(profile, workload, Slo(target_s=tpot, ttft_s=targets.ttft_s), 150.0, str(_shared_root()))
    work, scenario = generate(scenario, 0)
    print(f"{profile_name}/{target}/{workload}: {work.sent_s.size / scenario.duration_s:.2f} req/s offered")
    for cap in caps:
        engine = Engine(profile, cap=cap)
        engine.submit_many(work.sent_s, work.prompt, work.output)
        observer = Observer(engine, LatencyKind.TPOT, WINDOW_S)
        gauge: list[float] = []
        rows: list[tuple[float, float, float]] = []
        for k in range(1, int(scenario.duration_s / TICK_S) + 1):
            now = k * TICK_S
            engine.advance(now)
            obs = observer.observe(now)
            gauge.append(obs.running or 0.0)
            window = gauge[-int(WINDOW_S / TICK_S) :]
            if obs.tpot_mean_s and k > SETTLE_TICKS:
                averaged = time_averaged_batch(engine, now, WINDOW_S)
                rows.append((sum(window) / len(window), averaged, obs.tpot_mean_s))
        data = np.array(rows)
        on_gauge = np.polyfit(data[:, 0], data[:, 2], 1) * 1e3
        on_time = np.polyfit(data[:, 1], data[:, 2], 1) * 1e3
        print(
            f"cap {cap:3d}: batch {data[:, 0].mean():5.1f} (gauge) {data[:, 1].mean():5.1f} (time-averaged), "
            f"mean TPOT {data[:, 2].mean() * 1e3:5.1f} ms | line on the gauge {on_gauge[1]:5.1f} + "
            f"{on_gauge[0]:5.2f} ms x batch, on the time-averaged batch {on_time[1]:5.1f} + "
            f"{on_time[0]:5.2f} ms x batch"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
