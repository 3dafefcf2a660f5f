"""The GPU report's plots: probe.png, serving.png and loop.png (matplotlib, imported on use)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from csvrows import Row, q, read_csv  # benchmarks/gpu is sys.path[0]

OUT = Path(__file__).resolve().parent / "results"


def phase_bounds(phases: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out, t = [], 0.0
    for duration, _ in phases:
        out.append((t, t + duration))
        t += duration
    return out


def plot_probe(raw: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = read_csv(raw / "probe_timeline.csv")
    changes = read_csv(raw / "probe_changes.csv")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), gridspec_kw={"height_ratios": [3, 1.3]})
    t = [r["t"] for r in timeline if r.get("running") != ""]
    top.plot(
        t,
        [r["running"] for r in timeline if r.get("running") != ""],
        label="running (vllm:num_requests_running)",
    )
    top.plot(t, [r["waiting"] for r in timeline if r.get("running") != ""], label="waiting", alpha=0.6)
    steps_t = [c["t"] for c in changes]
    steps_cap = [c["cap"] for c in changes]
    top.step(steps_t, steps_cap, where="post", color="k", lw=1.2, label="cap (PUT /governor/v1/limits)")
    top.set_ylabel("requests")
    top.set_ylim(0, 300)
    top.legend(loc="upper right", fontsize=8)
    top.set_title("Live cap on vLLM 0.26 / H200, 36 req/s: 256 -> 16 -> 128 -> 100 random changes")
    bottom.plot(steps_t, [c["latency_ms"] for c in changes], "o", ms=3)
    bottom.set_ylabel("PUT latency (ms)")
    bottom.set_xlabel("seconds since load start")
    fig.tight_layout()
    fig.savefig(OUT / "probe.png", dpi=110)
    plt.close(fig)


def plot_serving(rows: list[Row]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    labels = [f"{r['cap']}@{r['rate_rps']:g}" for r in rows]
    x = np.arange(len(rows))
    for ax, key, title in (
        (axes[0], "achieved_rps", "throughput (req/s)"),
        (axes[1], "tpot_p99_ms", "TPOT P99 (ms)"),
        (axes[2], "ttft_p99_s", "TTFT P99 (s, log)"),
    ):
        ax.bar(x - 0.27, [r[f"live_{key}"] for r in rows], 0.27, label="live cap (this run)")
        ax.bar(x, [r[f"restart_{key}"] for r in rows], 0.27, label="restart (calibration)")
        ax.bar(x + 0.27, [r[f"twin_{key}"] for r in rows], 0.27, label="twin prediction")
        ax.set_xticks(x, labels, rotation=45, fontsize=8)
        ax.set_title(title)
        if key == "ttft_p99_s":
            ax.set_yscale("log")
    axes[0].set_xlabel("cap @ req/s")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "serving.png", dpi=110)
    plt.close(fig)


def plot_loop(
    raw: Path, slo_ms: float, phases: list[tuple[float, float]], out: Path = OUT, device: str = "H200"
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = read_csv(raw / "loop_timeline.csv")
    requests = read_csv(raw / "loop_requests.csv")
    colors = {
        "static256": "tab:blue",
        "static64": "tab:orange",
        "governor": "tab:green",
        "governor-levers": "tab:red",
    }
    variants = sorted({r["policy"] for r in requests if r["policy"].startswith("governor-")} - set(colors))
    spare = iter(("tab:purple", "tab:brown", "tab:pink", "tab:olive"))
    colors |= {name: next(spare, "tab:gray") for name in variants}  # GOVERNOR_VARIANTS beyond "levers"
    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    present = [policy for policy in colors if any(r["policy"] == policy for r in requests)]
    for policy, color in ((p, colors[p]) for p in present):
        rows = [r for r in timeline if r["policy"] == policy and r.get("cap") != ""]
        t = [r["t"] for r in rows]
        axes[0].plot(t, [r["cap"] for r in rows], color=color, label=f"{policy} cap")
        axes[1].plot(t, [r["running"] for r in rows], color=color, label=f"{policy} running")
        axes[1].plot(t, [r["waiting"] for r in rows], color=color, ls=":", label=f"{policy} waiting")
        done = [r for r in requests if r["policy"] == policy and r["tpot_s"] not in ("", "nan")]
        ends = np.array([float(r["t_send"]) + float(r["e2e_s"]) for r in done])
        tpot = np.array([float(r["tpot_s"]) for r in done])
        if not ends.size:
            continue  # not in this run (a loop-only re-run)
        centers = np.arange(5, np.nanmax(ends), 5.0)
        p99 = [q(tpot[(ends > c - 10) & (ends <= c)], 99) * 1e3 for c in centers]
        axes[2].plot(centers, p99, color=color, label=f"{policy}")
    axes[2].axhline(slo_ms, color="k", ls="--", lw=1, label=f"SLO {slo_ms:g} ms")
    for ax in axes:
        for start, _ in phase_bounds(phases)[1:]:
            ax.axvline(start, color="grey", lw=0.8)
        ax.legend(fontsize=7, ncol=3)
    axes[0].set_ylabel("cap")
    axes[1].set_ylabel("requests")
    axes[2].set_ylabel("TPOT P99, 10 s windows (ms)")
    axes[2].set_xlabel("seconds since the phase trace started (8 -> 40 -> 8 req/s)")
    names = ", ".join(p.replace("static", "static ") for p in present)
    axes[0].set_title(f"The loop live on the {device}: {names} (TPOT P99 SLO {slo_ms:g} ms)")
    fig.tight_layout()
    fig.savefig(out / "loop.png", dpi=110)
    plt.close(fig)
