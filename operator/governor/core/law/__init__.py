"""The control law: (state, observation) -> decision. Pure: no clock, no I/O, no randomness.

Every tick the loop reads one Observation (the SLO latency quantile over the window, queue, running...)
and calls `decide`. The Decision carries the new cap, a short reason code (a metric label), a sentence
for humans, the mode, a replica wish (-1, 0, +1) for the replica planner, and the next state. The state
is JSON-able: it is stored in the InferenceService status, so an operator restart resumes, not resets.

The seed (001 §3.2) law, kept verbatim for the benchmark in `governor_twin.seed` (`seed_step`,
`seed_decide`):
    P99 > 1.1·SLO -> cap = max(1, int(cap·0.8));  P99 < 0.9·SLO -> cap = min(256, int(cap·1.15)).
Its defects, and the rule that fixes each one:
 1. A raw P99 over a short window is noisy -> EWMA smoothing (alpha) before comparing with the SLO.
 2. int(cap·1.15) never grows a cap below 7 -> every step moves the cap by at least 1.
 3. One noisy tick moves the cap -> a hysteresis band [band_low·SLO, band_high·SLO] holds it, and a
    raise needs `raise_after_ticks` comfortable ticks in a row.
 4. A fixed x0.8 is slow for a large miss and nothing else bounds it -> a decrease is proportional to
    the miss (x SLO/P99) but between x decrease_factor and x strongest_decrease (0.8 and 0.5), so
    |step| <= max(1, ceil(cap·max(1-strongest, increase-1))), and <= max_step when set (`step_bound`).
 5. A lower cap only bites as running requests finish (vLLM drains, it does not preempt), and the window
    still holds old samples -> after a decrease, `cooldown_s` without a further move, and until the
    window has turned over a further decrease needs a P99 worse than band_high x the one acted on
    (step2x: four x0.8 cuts on one stale 30 ms window took 256 to 104 and built a queue).
 6. 256 is a constant -> bounds [min_cap, ceiling]; the ceiling is the engine's startup max_num_seqs,
    which can never be raised live.
 7. Low load gives a low P99, and the cap creeps up for ever -> raise only while the cap binds (running
    near the cap, or a queue while nearly all slots are busy: `queue_binding_fraction`, just under
    `binding_fraction`, as a closed loop's gaps between requests keep the mean; 0.5 cost the twin 30 points
    of steady-state SLO windows; a queue beside idle slots is not the cap's doing; with a queue, one slot
    short of the cap binds too, never an idle engine (the gauge is read between a step's finishes and the
    next step's admissions: at cap 5 with 46 requests queued it read 4, so the cap was "not binding" while
    TTFT passed 7 s; twin, H200 8B, 8-32-token outputs). Unknown running: "not binding".
 8. The cap is the wrong lever for queue-driven latency (DESIGN.md, H200 data: a lower cap buys TPOT and
    pays in queueing) -> per-token SLOs (TPOT, inter-token) move the cap; TTFT and e2e SLOs never lower
    it: they raise it while it binds, then ask for replicas.
 9. Lowering the cap while arrivals outrun service starves the queue -> a queue growing by more than
    `queue_growth_fraction` of the completion rate for `queue_growth_ticks` holds the cap, and after
    `replica_after_ticks` more asks for a replica.
10. At the floor and still violating, the law has nothing left (windup) -> after `replica_after_ticks`
    such ticks, replica_wish = +1; a cap with headroom and an idle engine for `idle_after_ticks`: -1.
Seed §4.3 inputs, with caps relative to the ceiling (the seed's 256 -> 64 is 0.25·ceiling):
11. Long-tail mode: prompts above 1.3 x the windowed prompt P95 (the runtime counts them). By
    construction ~5 % of a heavy-tailed stream exceed its P95 and some exceed 1.3·P95 (Azure replay:
    the mode pinned the cap on 106 of 181 ticks), so only a *shift* counts, once the traffic is
    established (rule 12's baseline) and the slow P95 has `long_tail_baseline_s` of history (it follows
    the reported P95 for the first half, while the runtime's 60 s window fills and a heavy tail's P95 is
    still low, then averages): a long-prompt share above `long_tail_base` + `long_tail_fraction`
    and the prompt P95 above `long_tail_shift` x its slow EWMA, two ticks in a row -> cap limited to
    long_tail_cap_fraction·ceiling for `long_tail_hold_s`, imposed only under per-token pressure
    (smoothed P99 not below the band); otherwise the limit only stops raises past it. Twin: Azure's
    stationary stream reaches a 6 % share against the lagged P95, the longtail shift 11-16 %.
12. Burst pre-emption: the EWMA of the request rate rising by more than `burst_slope` per tick for
    `burst_ticks` ticks in a row, from a baseline established for `burst_baseline_ticks` (a rate rising
    from ~zero, at start-up or after idling, is not a burst: H200 fired 10 s into an 8 req/s phase)
    -> one pre-emptive decrease step and `burst_hold_s` of additive-only raises. A hedge, not a verdict:
    while the smoothed P99 is below the band, burst mode neither lowers nor blocks a (cautious) raise.
    Modes and bursts only ever lower the cap for per-token SLOs (rule 8).
13. Initial cap: the GPU profile table (governor.core.profiles) and the SLO (the largest measured cap whose
    TPOT P99 meets the SLO), else the ceiling (vLLM's own behaviour; the law then walks down).
14. Overshoot after recovery (step2x: mean cap 164 vs knee 128; H200: 40 -> 116 in 14 s, P99 23 ms)
    -> the cap at which the SLO was last missed is remembered (TCP's ssthresh); raises are
    multiplicative below `cautious_fraction` of it and `cautious_step` above it. The memory rises by
    `memory_decay` per tick, and is forgotten once passed without a miss (it was set in another regime)
    or when its cautious fraction passes the ceiling: the law explores again.
No data (Prometheus down, no traffic, NaN, stale) holds the cap: the law never acts on a guess.
The levers law (`computed`) runs this table without rules 11 and 14 (`decide(..., guesses=False)`): its
fitted lines say where the SLO breaks.

Where each rule lives: `derive` computes the signals from the last state and the reading (pure functions,
small frozen results); `rules.RULES` is the ordered table of guard -> action, one reason code a row, each row
naming its rule numbers, whose first matching row moves the cap; `steps` bounds every move; `decide` composes
them and adds the replica hand-off (rule 10); `model` holds the types; `initial` holds rule 13.
"""

from __future__ import annotations

from governor.core.law.computed import computed_decide
from governor.core.law.decide import decide
from governor.core.law.initial import initial_state
from governor.core.law.model import Decision, LawConfig, LawState, Mode, Observation, Outlook
from governor.core.law.registry import DEFAULT_LAW, LAW_NAMES, LAWS, Law, LawName
from governor.core.law.steps import clip, mode_cap, step_bound

__all__ = [
    "DEFAULT_LAW",
    "LAWS",
    "LAW_NAMES",
    "Decision",
    "Law",
    "LawConfig",
    "LawName",
    "LawState",
    "Mode",
    "Observation",
    "Outlook",
    "clip",
    "computed_decide",
    "decide",
    "initial_state",
    "mode_cap",
    "step_bound",
]
