"""The engine's request table: one row per request, in numpy columns, in the order the requests were sent."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from governor_twin.profile import EngineProfile

WAITING, RUNNING, DONE, REJECTED, PENDING = 1, 2, 3, 4, 0

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class RequestTable:
    """Requests `submit`ted so far (`n` rows); the scheduler (`governor_twin.engine.Engine`) fills the rest
    of each row."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile
        self.n = 0
        self.rejected = 0
        self.sent: FloatArray  # when the client sent it
        self.arrival: FloatArray  # when the scheduler can see it
        self.first_scheduled: FloatArray
        self.first_token: FloatArray
        self.finish: FloatArray
        self.prompt: IntArray
        self.max_tokens: IntArray
        self.generated: IntArray
        self.computed: IntArray
        self.blocks: IntArray
        self.preempted: IntArray
        self.state: IntArray
        self._alloc(1024)

    _FLOAT_COLUMNS = ("sent", "arrival", "first_scheduled", "first_token", "finish")
    _INT_COLUMNS = ("prompt", "max_tokens", "generated", "computed", "blocks", "preempted", "state")

    def _alloc(self, size: int) -> None:
        """(Re)size the request table: sent/arrival/first_scheduled/first_token/finish (s), and per request
        prompt, max_tokens, generated, computed (tokens in the KV cache), blocks, preempted (count), state."""
        for name in self._FLOAT_COLUMNS:
            new_f = np.full(size, np.nan)
            old_f: FloatArray | None = getattr(self, name, None)
            if old_f is not None:
                new_f[: old_f.size] = old_f
            setattr(self, name, new_f)
        for name in self._INT_COLUMNS:
            new_i = np.zeros(size, dtype=np.int64)
            old_i: IntArray | None = getattr(self, name, None)
            if old_i is not None:
                new_i[: old_i.size] = old_i
            setattr(self, name, new_i)

    def submit(self, sent_s: float, prompt_tokens: int, max_tokens: int) -> int:
        """Queue a request sent at `sent_s`; it reaches the scheduler `request_overhead_s` later."""
        if self.n == self.sent.size:
            self._alloc(self.sent.size * 2)
        rid = self.n
        self.n += 1
        arrival = sent_s + self.profile.request_overhead_s
        if rid > 0 and arrival < self.arrival[rid - 1]:
            arrival = float(self.arrival[rid - 1])
        self.sent[rid] = sent_s
        self.arrival[rid] = arrival
        self.prompt[rid] = prompt_tokens
        self.max_tokens[rid] = max(1, max_tokens)
        if prompt_tokens + max_tokens > self.profile.max_model_len or prompt_tokens < 1:
            self.state[rid] = REJECTED  # vLLM answers 400 before the engine sees it
            self.rejected += 1
        else:
            self.state[rid] = PENDING
        return rid

    def submit_many(self, sent_s: FloatArray, prompt: IntArray, max_tokens: IntArray) -> None:
        """Bulk `submit` for a whole workload (virtual time)."""
        order = np.argsort(sent_s, kind="stable")
        need = self.n + sent_s.size
        if need > self.sent.size:
            self._alloc(max(need, self.sent.size * 2))
        sl = slice(self.n, need)
        self.sent[sl] = sent_s[order]
        self.arrival[sl] = sent_s[order] + self.profile.request_overhead_s
        self.prompt[sl] = prompt[order]
        self.max_tokens[sl] = np.maximum(1, max_tokens[order])
        bad = (self.prompt[sl] + self.max_tokens[sl] > self.profile.max_model_len) | (self.prompt[sl] < 1)
        self.state[sl] = np.where(bad, REJECTED, PENDING)
        self.rejected += int(bad.sum())
        self.n = need
