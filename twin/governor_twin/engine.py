"""A step-level model of one vLLM V1 engine: continuous batching, admission cap, token budget, chunked
prefill, KV blocks with preemption.

The scheduler follows vLLM 0.32's V1 `Scheduler.schedule()` in the respects that matter for latency:
- running requests are served first, in admission order: a decoding request takes one token, a prefilling one
  takes a chunk of what it still has to compute, all within the per-step token budget
  (`max_num_scheduled_tokens`);
- each scheduled chunk needs KV blocks (`block_size` tokens each); when none are free, the most recently
  admitted running request is preempted (its blocks freed, its progress recomputed later) and goes back to
  the front of the queue, and no new request is admitted in that step;
- waiting requests are admitted FCFS while `len(running) < cap` (`max_num_active_seqs`, the governor's lever),
  budget and blocks remain; lowering the cap drains, it never preempts;
- a request whose computed tokens reach its known tokens samples one new token at the end of the step.

Steps are simulated one at a time where the batch changes; where it cannot change (everyone decoding, nobody
admissible) many steps are taken at once in closed form, so hours of traffic take seconds.
Time is a plain float: virtual seconds, or wall seconds when `governor_twin.server` drives it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from governor.core.signals import PER_TOKEN_BUCKETS, REQUEST_BUCKETS

from governor_twin import histogram
from governor_twin.profile import EngineProfile
from governor_twin.table import DONE, PENDING, REJECTED, RUNNING, WAITING, FloatArray, IntArray, RequestTable

__all__ = ["DONE", "PENDING", "REJECTED", "RUNNING", "WAITING", "Engine", "StepStats"]


@dataclass
class StepStats:
    """The runtime's step counters (governor_runtime.contract.STEP_COUNTERS), kept the same way."""

    steps: int = 0
    busy_s: float = 0.0
    sequences: int = 0
    context_tokens: float = 0.0  # held by the decoding sequences, summed over steps
    prefill_tokens: int = 0


class Engine(RequestTable):
    """One engine. `submit` requests (arrival times must not decrease), then `advance(horizon)`."""

    def __init__(
        self, profile: EngineProfile, cap: int | None = None, token_budget: int | None = None, seed: int = 0
    ) -> None:
        super().__init__(profile)
        self.rng = np.random.default_rng(seed)
        self.step_model = profile.step
        self.ceiling = profile.ceiling
        self.token_budget_ceiling = profile.token_budget
        self.cap = min(cap if cap is not None else profile.ceiling, profile.ceiling)
        self.token_budget = min(token_budget or profile.token_budget, profile.token_budget)
        self.block_size = profile.block_size
        self.num_blocks = profile.num_blocks
        self.free_blocks = profile.num_blocks
        self.clock = 0.0
        self._next_arrival = 0  # index of the first request not yet seen by the scheduler
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self._run_ids: IntArray | None = None  # cached np.array(self.running)
        self.finished: list[int] = []  # finished since the last drain (the HTTP server reads it)
        self._unobserved: list[IntArray] = []  # finished, not yet in the histograms (see flush)
        self.stats = StepStats()
        self.preemptions = 0
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.success_total = 0.0
        self.tpot_hist = histogram.Histogram(PER_TOKEN_BUCKETS)
        self.itl_hist = histogram.Histogram(PER_TOKEN_BUCKETS)
        self.ttft_hist = histogram.Histogram(REQUEST_BUCKETS)
        self.e2e_hist = histogram.Histogram(REQUEST_BUCKETS)
        self.queue_hist = histogram.Histogram(REQUEST_BUCKETS)
        self.inference_hist = histogram.Histogram(REQUEST_BUCKETS)
        token_buckets = histogram.token_buckets(profile.max_model_len)
        self.prompt_hist = histogram.Histogram(token_buckets)
        self.generation_hist = histogram.Histogram(token_buckets)

    # ----------------------------------------------------------------- controls
    def set_cap(self, cap: int) -> int:
        self.cap = max(1, min(int(cap), self.ceiling))
        return self.cap

    def set_token_budget(self, budget: int) -> int:
        self.token_budget = max(1, min(int(budget), self.token_budget_ceiling))
        return self.token_budget

    # ----------------------------------------------------------------- gauges
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.num_blocks

    def next_arrival_time(self) -> float:
        while self._next_arrival < self.n and self.state[self._next_arrival] == REJECTED:
            self._next_arrival += 1
        return float(self.arrival[self._next_arrival]) if self._next_arrival < self.n else math.inf

    def idle(self) -> bool:
        return not self.running and not self.waiting and self.next_arrival_time() == math.inf

    # ----------------------------------------------------------------- the loop
    def _ingest(self, now: float) -> None:
        while self._next_arrival < self.n and self.arrival[self._next_arrival] <= now:
            rid = self._next_arrival
            self._next_arrival += 1
            if self.state[rid] == PENDING:
                self.state[rid] = WAITING
                self.waiting.append(rid)

    def _ids(self) -> IntArray:
        if self._run_ids is None:
            self._run_ids = np.array(self.running, dtype=np.int64)
        return self._run_ids

    def advance(self, horizon: float, stop_on_finish: bool = False) -> None:
        """Run every step that ends by `horizon` (the state at `horizon` is then what vLLM would show)."""
        while True:
            self._ingest(self.clock)
            if not self.running and not self.waiting:
                nxt = self.next_arrival_time()
                if nxt > horizon or nxt == math.inf:
                    if horizon < math.inf:
                        self.clock = max(self.clock, horizon)
                    return
                self.clock = max(self.clock, nxt)
                continue
            if not self._fast_decode(horizon) and not self._one_step(horizon):
                return
            if stop_on_finish and self.finished:
                return

    def _fast_decode(self, horizon: float) -> bool:
        """Take k identical decode steps at once when the batch cannot change. False if not applicable."""
        ids = self._ids()
        if ids.size == 0:
            return False
        known = self.prompt[ids] + self.generated[ids]
        computed = self.computed[ids]
        if np.any(known - computed != 1):
            return False
        admissible = bool(self.waiting) and len(self.running) < self.cap
        b = ids.size
        if admissible or b > self.token_budget:
            return False
        remaining = self.max_tokens[ids] - self.generated[ids]
        k_max = int(remaining.min())
        model = self.step_model
        kv0 = float(computed.sum())
        first = model.step_s(b, kv0, 0)
        growth = model.per_kv_token_s * b  # each step reads one more token per sequence

        def elapsed(k: int) -> float:
            return k * first + growth * k * (k - 1) / 2.0

        def steps_before(limit: float, ends_by: bool) -> int:
            """Steps that end by `limit` (ends_by) or that start before it."""
            span = limit - self.clock
            if span <= 0:
                return 0
            if growth > 0:
                root = (
                    -(first - growth / 2) + math.sqrt((first - growth / 2) ** 2 + 2 * growth * span)
                ) / growth
            else:
                root = span / first
            k = math.floor(root) if ends_by else math.ceil(root)
            while k > 0 and (elapsed(k) > span if ends_by else elapsed(k - 1) >= span):
                k -= 1
            while (elapsed(k + 1) <= span) if ends_by else (elapsed(k) < span):
                k += 1
            return k

        k = min(k_max, steps_before(horizon, ends_by=True))
        if len(self.running) < self.cap:  # an arrival could join: stop at the first step starting after it
            nxt = self.next_arrival_time()
            if nxt < math.inf:
                k = min(k, max(1, steps_before(nxt, ends_by=False)))
        if k <= 1:
            return False
        blocks_after = (computed + k + self.block_size - 1) // self.block_size
        new_blocks = int(np.maximum(blocks_after - self.blocks[ids], 0).sum())
        if new_blocks > self.free_blocks:
            return False
        # commit k steps
        steps = first + growth * np.arange(k, dtype=np.float64)
        self._add_stalls(steps)
        self.itl_hist.observe(steps, np.full(k, float(b)))
        self.free_blocks -= new_blocks
        self.blocks[ids] = np.maximum(blocks_after, self.blocks[ids])
        self.computed[ids] += k
        self.generated[ids] += k
        total = float(steps.sum())
        self.clock += total
        self.stats.steps += k
        self.stats.busy_s += total
        self.stats.sequences += k * b
        self.stats.context_tokens += k * kv0 + b * k * (k - 1) / 2.0
        self.generation_tokens_total += k * b
        done = ids[self.generated[ids] >= self.max_tokens[ids]]
        if done.size:
            self._finish(done)
        return True

    def _one_step(self, horizon: float) -> bool:
        """Schedule and run one step if it ends by `horizon`. Returns False if it does not."""
        ids = self._ids()
        budget = self.token_budget
        bs = self.block_size
        preempted_now = False
        if ids.size:
            need = self.prompt[ids] + self.generated[ids] - self.computed[ids]
            cum = np.cumsum(need)
            granted = np.minimum(cum, budget)
            sched = np.diff(granted, prepend=0)
            blocks_after = (self.computed[ids] + sched + bs - 1) // bs
            new_blocks = np.maximum(blocks_after - self.blocks[ids], 0)
            if int(new_blocks.sum()) > self.free_blocks:
                ids, sched = self._preempt_to_fit(ids, sched)
                preempted_now = True
            budget -= int(sched.sum())
        else:
            sched = np.zeros(0, dtype=np.int64)
        run_ids = list(ids.tolist())
        run_sched = list(sched.tolist())
        admitted: list[int] = []
        free = (
            self.free_blocks
            - int(np.maximum((self.computed[ids] + sched + bs - 1) // bs - self.blocks[ids], 0).sum())
            if ids.size
            else self.free_blocks
        )
        if not preempted_now:
            admitted = self._admit(run_ids, run_sched, budget, free)
        if not run_ids:
            # nothing fits (a prompt larger than the whole KV cache): reject it as vLLM would
            if self.waiting:
                rid = self.waiting.popleft()
                self.state[rid] = REJECTED
                self.rejected += 1
                return True
            return False
        all_ids = np.array(run_ids, dtype=np.int64)
        all_sched = np.array(run_sched, dtype=np.int64)
        computed = self.computed[all_ids]
        known = self.prompt[all_ids] + self.generated[all_ids]
        active = all_sched > 0
        is_decode = active & (known - computed == 1) & (computed > 0)
        n_seqs = int(active.sum())
        kv = float(computed[is_decode].sum())
        prefill_tokens = int(all_sched[active & ~is_decode].sum())
        dt = self.step_model.step_s(n_seqs, kv, prefill_tokens)
        if self.step_model.stall_rate_per_s > 0:
            one = np.array([dt])
            self._add_stalls(one)
            dt = float(one[0])
        if self.clock + dt > horizon:
            # undo the admissions; the step runs in a later call
            for rid in reversed(admitted):
                self.waiting.appendleft(rid)
            return False
        # commit
        for rid in admitted:
            self.state[rid] = RUNNING
            if math.isnan(self.first_scheduled[rid]):
                self.first_scheduled[rid] = self.clock
        if admitted or preempted_now:
            self.running = [int(r) for r in all_ids]
            self._run_ids = all_ids
        blocks_after = (computed + all_sched + bs - 1) // bs
        self.free_blocks -= int(np.maximum(blocks_after - self.blocks[all_ids], 0).sum())
        self.blocks[all_ids] = np.maximum(blocks_after, self.blocks[all_ids])
        self.computed[all_ids] = computed + all_sched
        self.clock += dt
        self.stats.steps += 1
        self.stats.busy_s += dt
        self.stats.sequences += n_seqs
        self.stats.context_tokens += kv
        self.stats.prefill_tokens += prefill_tokens
        self.prompt_tokens_total += float(all_sched[active & ~is_decode].sum())
        sampled = all_ids[active & (self.computed[all_ids] == known)]
        if sampled.size:
            self._sample(sampled, dt, int(is_decode.sum()))
        return True

    def _admit(self, run_ids: list[int], run_sched: list[int], budget: int, free: int) -> list[int]:
        """Admit waiting requests FCFS while the cap, the token budget and the free blocks allow; appends to
        `run_ids`/`run_sched` and returns the admitted ids (still at the queue's head in `waiting` order)."""
        bs = self.block_size
        admitted: list[int] = []
        while self.waiting and len(run_ids) < self.cap and budget > 0:
            rid = self.waiting[0]
            todo = int(self.prompt[rid] + self.generated[rid] - self.computed[rid])
            chunk = min(todo, budget)
            blocks_needed = (int(self.computed[rid]) + chunk + bs - 1) // bs - int(self.blocks[rid])
            if blocks_needed > free:
                break
            free -= blocks_needed
            self.waiting.popleft()
            run_ids.append(rid)
            run_sched.append(chunk)
            admitted.append(rid)
            budget -= chunk
        return admitted

    def _sample(self, sampled: IntArray, dt: float, decoding: int) -> None:
        """Requests whose computed tokens reached their known tokens sample one token at the step's end."""
        self.generated[sampled] += 1
        self.generation_tokens_total += sampled.size
        firsts = sampled[np.isnan(self.first_token[sampled])]
        self.first_token[firsts] = self.clock
        if decoding:
            self.itl_hist.observe(np.array([dt]), np.array([float(decoding)]))
        done = sampled[self.generated[sampled] >= self.max_tokens[sampled]]
        if done.size:
            self._finish(done)

    def _add_stalls(self, steps: FloatArray) -> None:
        """CPU contention: stalls arrive as a Poisson process in time and lengthen the steps they hit."""
        model = self.step_model
        if model.stall_rate_per_s <= 0 or model.stall_mean_s <= 0:
            return
        count = int(self.rng.poisson(model.stall_rate_per_s * float(steps.sum())))
        if count:
            np.add.at(
                steps,
                self.rng.integers(0, steps.size, count),
                self.rng.exponential(model.stall_mean_s, count),
            )

    def _preempt_to_fit(self, ids: IntArray, sched: IntArray) -> tuple[IntArray, IntArray]:
        """Preempt the most recently admitted requests until the rest's chunks fit (vLLM V1 RECOMPUTE)."""
        bs = self.block_size
        keep = len(ids)
        while keep > 0:
            head, head_sched = ids[:keep], sched[:keep]
            need = int(
                np.maximum((self.computed[head] + head_sched + bs - 1) // bs - self.blocks[head], 0).sum()
            )
            freed = int(self.blocks[ids[keep:]].sum())
            if need <= self.free_blocks + freed:
                break
            keep -= 1
        victims = ids[keep:]
        for rid in reversed(victims.tolist()):
            self.free_blocks += int(self.blocks[rid])
            self.blocks[rid] = 0
            self.computed[rid] = 0
            self.preempted[rid] += 1
            self.state[rid] = WAITING
            self.waiting.appendleft(rid)
        self.preemptions += len(victims)
        kept = ids[:keep]
        self.running = [int(r) for r in kept]
        self._run_ids = kept
        return kept, sched[:keep]

    def flush(self) -> None:
        """Fold the requests finished since the last call into the per-request histograms."""
        if not self._unobserved:
            return
        done = np.concatenate(self._unobserved)
        self._unobserved = []
        ttft = self.first_token[done] - self.sent[done]
        e2e = self.finish[done] - self.sent[done]
        n_out = self.max_tokens[done]
        multi = n_out > 1
        tpot = (self.finish[done][multi] - self.first_token[done][multi]) / (n_out[multi] - 1)
        self.ttft_hist.observe(ttft)
        self.e2e_hist.observe(e2e)
        self.tpot_hist.observe(tpot)
        self.queue_hist.observe(self.first_scheduled[done] - self.arrival[done])
        self.inference_hist.observe(self.finish[done] - self.first_scheduled[done])
        self.prompt_hist.observe(self.prompt[done].astype(np.float64))
        self.generation_hist.observe(n_out.astype(np.float64))

    def _finish(self, done: IntArray) -> None:
        self.finish[done] = self.clock
        self.state[done] = DONE
        self.free_blocks += int(self.blocks[done].sum())
        self.blocks[done] = 0
        gone = set(done.tolist())
        self.running = [r for r in self.running if r not in gone]
        self._run_ids = None
        self.finished.extend(done.tolist())
        self.success_total += done.size
        self._unobserved.append(done)
