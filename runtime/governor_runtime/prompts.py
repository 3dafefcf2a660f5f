"""The long-tail signal (seed 001 §4.3): a window of prompt lengths, its P95, and prompts above a factor of it
(1.3, the seed's; GOVERNOR_LONG_PROMPT_FACTOR sets another).

Prometheus cannot resolve this from vLLM's coarse prompt-length buckets; the engine sees every request, so it
keeps the window. Pure apart from the clock passed in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from governor_runtime.contract import LONG_PROMPT_FACTOR, LONG_PROMPT_FACTOR_ENV

WINDOW_S = 60.0
MIN_SAMPLES = 20
"""A P95 over fewer prompts is noise; below this, no prompt is called long."""
REFRESH_S = 1.0
"""The P95 is recomputed at most this often, so the engine's hot path stays an append."""


@dataclass(frozen=True)
class PromptStats:
    p95: float
    """Nearest-rank P95 of prompt lengths in the window; 0 when the window is empty."""
    long_prompts_total: int
    prompts_in_window: int


def long_factor(environ: Mapping[str, str]) -> float:
    """The factor from GOVERNOR_LONG_PROMPT_FACTOR, else the default. The operator validated it (> 1); a value
    set by hand that is not a number above 1 raises (the plugin reads it once, when it loads, so the engine
    refuses to start instead of counting every prompt as long, or none, for its whole life)."""
    raw = environ.get(LONG_PROMPT_FACTOR_ENV)
    if raw is None or not raw.strip():
        return LONG_PROMPT_FACTOR
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 1.0 or math.isinf(value):
        expected = f"expected a number above 1 (default {LONG_PROMPT_FACTOR})"
        raise ValueError(f"{LONG_PROMPT_FACTOR_ENV}={raw!r}: {expected}")
    return value


def nearest_rank(sorted_values: list[int], quantile: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(quantile * len(sorted_values)))
    return float(sorted_values[rank - 1])


class PromptWindow:
    def __init__(
        self,
        window_s: float = WINDOW_S,
        long_factor: float = LONG_PROMPT_FACTOR,
        min_samples: int = MIN_SAMPLES,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.window_s = window_s
        self.long_factor = long_factor
        self.min_samples = min_samples
        self.refresh_s = refresh_s
        self._prompts: deque[tuple[float, int]] = deque()
        self._p95 = 0.0
        self._p95_at = -math.inf
        self.long_prompts_total = 0

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._prompts and self._prompts[0][0] < horizon:
            self._prompts.popleft()

    def _refresh(self, now: float, force: bool = False) -> None:
        if force or now - self._p95_at >= self.refresh_s:
            self._expire(now)
            self._p95 = nearest_rank(sorted(length for _, length in self._prompts), 0.95)
            self._p95_at = now

    def observe(self, now: float, prompt_tokens: int) -> bool:
        """Record one prompt; True when it is long against the window before it."""
        self._refresh(now)
        is_long = len(self._prompts) >= self.min_samples and prompt_tokens > self.long_factor * self._p95
        if is_long:
            self.long_prompts_total += 1
        self._prompts.append((now, prompt_tokens))
        return is_long

    def stats(self, now: float) -> PromptStats:
        self._refresh(now, force=True)
        return PromptStats(self._p95, self.long_prompts_total, len(self._prompts))
