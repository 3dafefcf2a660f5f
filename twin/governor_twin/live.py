"""One twin engine driven by the wall clock, for the twin's HTTP surface (`governor_twin.server`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from governor_twin.engine import DONE, Engine
from governor_twin.profile import EngineProfile

PROMPT_WINDOW_S = 60.0
LONG_PROMPT_FACTOR = 1.3
IDLE_POLL_S = 1.0  # an idle engine has nothing to advance; `submit` wakes it at once


class TwinEngine:
    """One simulated engine driven by the wall clock (seconds since it started)."""

    def __init__(
        self,
        profile: EngineProfile,
        model_name: str = "twin",
        index: int = 0,
        initial_cap: int | None = None,
        seed: int = 0,
    ) -> None:
        self.engine = Engine(profile, cap=initial_cap, seed=seed)
        self.model_name = model_name
        self.index = index
        self.started = time.monotonic()
        self._progress = asyncio.Event()
        self._wake = asyncio.Event()
        self._prompts: deque[tuple[float, int]] = deque()
        self.prompt_p95 = 0.0
        self.long_prompts = 0.0
        self.lock = asyncio.Lock()

    def now(self) -> float:
        return time.monotonic() - self.started

    async def drive(self) -> None:
        """Advance the engine to the wall clock; wake waiting handlers when anything moved."""
        engine = self.engine
        while True:
            steps = engine.stats.steps
            engine.advance(self.now())
            finished = bool(engine.finished)
            engine.finished.clear()
            if engine.stats.steps != steps or finished:
                self._progress.set()
                self._progress = asyncio.Event()
            busy = bool(engine.running or engine.waiting)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.001 if busy else IDLE_POLL_S)

    def _note_prompt(self, now: float, length: int) -> None:
        """The runtime's prompt signals: 60 s windowed P95 and a counter of prompts above 1.3 × it."""
        if self._prompts and length > LONG_PROMPT_FACTOR * self.prompt_p95:
            self.long_prompts += 1
        self._prompts.append((now, length))
        while self._prompts and self._prompts[0][0] < now - PROMPT_WINDOW_S:
            self._prompts.popleft()
        self.prompt_p95 = float(np.percentile([p for _, p in self._prompts], 95))

    def submit(self, prompt_tokens: int, max_tokens: int) -> int:
        now = self.now()
        self._note_prompt(now, prompt_tokens)
        rid = self.engine.submit(now, prompt_tokens, max_tokens)
        self._wake.set()
        return rid

    async def tokens(self, rid: int) -> AsyncIterator[int]:
        """Yield the number of new tokens each time the request progresses, until it finishes."""
        engine = self.engine
        sent = 0
        while True:
            event = self._progress
            generated = int(engine.generated[rid])
            if generated > sent:
                yield generated - sent
                sent = generated
            if engine.state[rid] == DONE:
                return
            await event.wait()

    def limits(self) -> dict[str, int]:
        e = self.engine
        return {
            "engine": self.index,
            "cap": e.cap,
            "ceiling": e.ceiling,
            "token_budget": e.token_budget,
            "token_budget_ceiling": e.token_budget_ceiling,
        }
