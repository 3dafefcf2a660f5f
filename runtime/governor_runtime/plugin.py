"""General plugin (``vllm.general_plugins``): EngineCore utilities that read and set the engine's limits.

vLLM loads general plugins in every process (API server, EngineCore, workers); only the EngineCore ever
calls these methods. They run on the EngineCore's own thread between scheduler steps, so no lock is needed
and a change applies from the next step. Lowering the cap only stops admissions: running requests finish
(a drain, no preemption).
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

from governor_runtime import vllm_compat
from governor_runtime.contract import LONG_PROMPT_FACTOR
from governor_runtime.limits import Bounds, LimitsError, resolve
from governor_runtime.prompts import PromptWindow, long_factor
from governor_runtime.steps import StepClock

logger = logging.getLogger(__name__)

_windows: weakref.WeakKeyDictionary[Any, PromptWindow] = weakref.WeakKeyDictionary()
_long_factor = LONG_PROMPT_FACTOR  # read from the environment once, in register(), never per request
_clocks: weakref.WeakKeyDictionary[Any, StepClock] = weakref.WeakKeyDictionary()
_timing = True  # off for good after the first failure: a step is never broken for a metric


def _window(core: Any) -> PromptWindow:
    window = _windows.get(core)
    if window is None:
        window = _windows[core] = PromptWindow(long_factor=_long_factor)
    return window


def observe_prompt(core: Any, prompt_tokens: int) -> None:
    _window(core).observe(time.monotonic(), prompt_tokens)


def _clock(scheduler: Any) -> StepClock:
    clock = _clocks.get(scheduler)
    if clock is None:
        clock = _clocks[scheduler] = StepClock()
    return clock


StepHook = Callable[[Any, Any, float], None]


def _timed(record: StepHook) -> StepHook:
    """Run a step hook; its first failure (a vLLM whose scheduler moved on) turns the timing off, logged."""

    def hook(scheduler: Any, output: Any, at: float) -> None:
        global _timing
        if not _timing:
            return
        try:
            record(scheduler, output, at)
        except Exception:
            _timing = False
            logger.warning(
                "governor: step timing is off: this vLLM's scheduler is not the one read", exc_info=True
            )

    return hook


@_timed
def step_scheduled(scheduler: Any, output: Any, started: float) -> None:
    _clock(scheduler).scheduled(id(output), started, vllm_compat.step_work(scheduler, output))


@_timed
def step_applied(scheduler: Any, output: Any, ended: float) -> None:
    _clock(scheduler).applied(id(output), ended)


def get_limits(core: Any) -> dict[str, int]:
    return vllm_compat.get_limits(core).as_dict()


def set_limits(core: Any, cap: int | None = None, token_budget: int | None = None) -> dict[str, Any]:
    """Apply a change within the engine's bounds, or change nothing and say why.

    Returns the limits now held, plus ``error`` ({code, message}) when the change was refused.
    """
    held = vllm_compat.get_limits(core)
    bounds = Bounds(held.ceiling, held.token_budget_ceiling, held.min_token_budget_floor)
    try:
        new_cap, new_budget = resolve(bounds, held.cap, held.token_budget, cap, token_budget)
    except LimitsError as refused:
        return {**held.as_dict(), "error": {"code": refused.code, "message": refused.message}}
    if (new_cap, new_budget) != (held.cap, held.token_budget):
        held = vllm_compat.set_limits(core, new_cap, new_budget)
        logger.info(
            "governor: engine %d now holds cap %d, token budget %d", held.engine, held.cap, new_budget
        )
    return {**held.as_dict(), "error": None}


def snapshot(core: Any) -> dict[str, Any]:
    """Limits, the prompt window and the step totals, for the metrics."""
    stats = _window(core).stats(time.monotonic())
    return {
        **get_limits(core),
        "prompt_tokens_p95": stats.p95,
        "long_prompts_total": stats.long_prompts_total,
        "prompts_in_window": stats.prompts_in_window,
        **_clock(core.scheduler).totals.as_dict(),
    }


def register() -> None:
    """Entry point ``governor_runtime.plugin:register``. Safe to call many times, in any vLLM process. A bad
    GOVERNOR_LONG_PROMPT_FACTOR fails here, at start-up, with the variable named: never in a request."""
    global _long_factor
    _long_factor = long_factor(os.environ)
    vllm_compat.require_supported()
    vllm_compat.install_engine_methods(
        {
            vllm_compat.GET_METHOD: get_limits,
            vllm_compat.SET_METHOD: set_limits,
            vllm_compat.SNAPSHOT_METHOD: snapshot,
        }
    )
    vllm_compat.wrap_add_request(observe_prompt)
    vllm_compat.wrap_steps(step_scheduled, step_applied)
