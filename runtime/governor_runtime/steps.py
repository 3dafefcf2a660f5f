"""What an engine's steps cost: a clock per scheduler and the running totals the runtime exports as counters.

vLLM exports no step time: its iteration timings reach only its logs and traces. The governor needs them to
learn what one more sequence or one more prefill token adds to a step (governor.core.levers.steps), so the
runtime times each scheduled batch from the moment it is scheduled to the moment its output is applied.
Where batches overlap (async scheduling, pipeline parallelism) a batch counts from the previous one's end,
so the seconds add up to the time the engine was busy, never more.

Pure: the caller passes the clock's readings; vllm_compat hooks it into the scheduler.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

# Batches scheduled and not yet applied: vLLM keeps at most a few in flight (its batch queue); one that never
# comes back (an aborted step) is dropped once this many are newer.
MAX_IN_FLIGHT = 8


class StepWork(NamedTuple):
    """What one scheduled batch holds."""

    sequences: int  # requests scheduled in the step
    context_tokens: int  # tokens already in the KV cache of the sequences that decode in it
    prefill_tokens: int  # prompt (or recomputed) tokens computed in it


def split_tokens(
    scheduled: int, computed_after: int, prompt_tokens: int, known_tokens: int
) -> tuple[int, int]:
    """One request's scheduled tokens as (prefill, context held by its decode part).

    `computed_after` counts this step's tokens (vLLM advances it when it schedules); tokens before the last
    known one (the prompt's, or a preempted request's prompt and output, recomputed) are prefill; the rest
    decode (one, or a few with speculative decoding) and read the context computed before the step.
    """
    before = computed_after - scheduled
    prefill = max(0, min(scheduled, max(prompt_tokens, known_tokens - 1) - before))
    return prefill, (before if scheduled > prefill else 0)


@dataclass
class StepTotals:
    """Running totals since the engine started; the runtime publishes them as counters."""

    seconds: float = 0.0
    steps: int = 0
    sequences: int = 0
    context_tokens: int = 0
    prefill_tokens: int = 0

    def as_dict(self) -> dict[str, float]:
        """The snapshot's keys (governor_runtime.contract.STEP_COUNTERS)."""
        return {
            "step_seconds_total": self.seconds,
            "steps_total": float(self.steps),
            "step_sequences_total": float(self.sequences),
            "step_context_tokens_total": float(self.context_tokens),
            "step_prefill_tokens_total": float(self.prefill_tokens),
        }


@dataclass
class StepClock:
    """Times the batches of one scheduler. `scheduled` when a batch is made, `applied` when its output is."""

    totals: StepTotals = field(default_factory=StepTotals)
    last_end: float = float("-inf")
    _in_flight: OrderedDict[int, tuple[float, StepWork]] = field(default_factory=OrderedDict)

    def scheduled(self, batch: int, started: float, work: StepWork) -> None:
        """A batch (any key unique while it is in flight) was scheduled from `started`; empty ones are not
        steps (vLLM returns them while every request waits on something else)."""
        if work.sequences <= 0:
            return
        self._in_flight[batch] = (started, work)
        while len(self._in_flight) > MAX_IN_FLIGHT:
            self._in_flight.popitem(last=False)

    def applied(self, batch: int, ended: float) -> None:
        """The batch's output was applied at `ended`: the step is over."""
        entry = self._in_flight.pop(batch, None)
        if entry is None:
            return
        started, work = entry
        t = self.totals
        t.seconds += max(0.0, ended - max(started, self.last_end))
        t.steps += 1
        t.sequences += work.sequences
        t.context_tokens += work.context_tokens
        t.prefill_tokens += work.prefill_tokens
        self.last_end = max(self.last_end, ended)
