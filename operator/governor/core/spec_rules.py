"""The spec's rules that span fields: each problem answered with a sentence a user can act on. Pure.

`InferenceServiceSpec`'s validator calls `cross_field_problems`; kept apart so the models stay readable.
"""

from __future__ import annotations

from governor.core import engine_flags, profiles
from governor.core.spec import Engine, InferenceServiceSpec


def cross_field_problems(spec: InferenceServiceSpec) -> list[str]:
    """Every rule that spans fields, each answered with a sentence a user can act on."""
    out: list[str] = []
    engine, adaptive = spec.engine, spec.adaptive
    profile = spec.profile()
    ceiling = engine.max_num_seqs or profile.ceiling
    ceiling_name = (
        "engine.maxNumSeqs"
        if engine.max_num_seqs
        else f"the default ceiling for {profile.gpu} GPUs and {profile.size} models (engine.maxNumSeqs unset)"
    )
    if adaptive.max_cap is not None and adaptive.min_cap > adaptive.max_cap:
        out.append(
            f"adaptive.minCap ({adaptive.min_cap}) must not exceed adaptive.maxCap ({adaptive.max_cap})"
        )
    if adaptive.max_cap is not None and adaptive.max_cap > ceiling:
        out.append(
            f"adaptive.maxCap ({adaptive.max_cap}) is above {ceiling_name} ({ceiling}): the live cap can"
            " never exceed the max-num-seqs vLLM starts with; raise engine.maxNumSeqs or lower"
            " adaptive.maxCap"
        )
    if adaptive.min_cap > ceiling:
        out.append(f"adaptive.minCap ({adaptive.min_cap}) is above {ceiling_name} ({ceiling})")
    if adaptive.initial_cap is not None:
        upper = min(adaptive.max_cap or ceiling, ceiling)
        if not adaptive.min_cap <= adaptive.initial_cap <= upper:
            out.append(
                f"adaptive.initialCap ({adaptive.initial_cap}) must lie in [adaptive.minCap, maxCap] ="
                f" [{adaptive.min_cap}, {upper}]"
            )
    if adaptive.window_seconds < adaptive.tick_seconds:
        out.append(
            f"adaptive.windowSeconds ({adaptive.window_seconds:g}) is shorter than adaptive.tickSeconds"
            f" ({adaptive.tick_seconds:g}): each decision needs at least one tick of data"
        )
    if adaptive.enabled and spec.slo is None:
        out.append(
            "adaptive.enabled is true but spec.slo is missing: the governor needs a latency target to hold"
        )
    out += _scaling_and_gpu_problems(spec)
    out += _engine_problems(engine, ceiling, ceiling_name)
    if spec.model_cache.pvc_name and spec.model_cache.size_limit:
        out.append(
            "modelCache.sizeLimit applies to the emptyDir cache only; drop it when modelCache.pvcName is set"
        )
    return out


def _scaling_and_gpu_problems(spec: InferenceServiceSpec) -> list[str]:
    out: list[str] = []
    engine, gpu, scaling = spec.engine, spec.resources.gpu, spec.autoscaling
    if scaling.min_replicas > scaling.max_replicas:
        out.append(
            f"autoscaling.minReplicas ({scaling.min_replicas}) must not exceed autoscaling.maxReplicas"
            f" ({scaling.max_replicas})"
        )
    if gpu.count == 0 and engine.tensor_parallel_size > 1:
        out.append(f"engine.tensorParallelSize is {engine.tensor_parallel_size} but resources.gpu.count is 0")
    elif gpu.count and engine.tensor_parallel_size > gpu.count:
        out.append(
            f"engine.tensorParallelSize ({engine.tensor_parallel_size}) needs that many GPUs per replica but"
            f" resources.gpu.count is {gpu.count}"
        )
    if gpu.count == 0 and gpu.type and profiles.normalize_gpu(gpu.type) not in ("CPU", profiles.UNKNOWN_GPU):
        out.append(
            f"resources.gpu.type is {gpu.type} but resources.gpu.count is 0: set a count of at least 1"
        )
    return out


def _engine_problems(engine: Engine, ceiling: int, ceiling_name: str) -> list[str]:
    out: list[str] = []
    if engine.max_num_batched_tokens is not None:
        if engine.max_num_batched_tokens < ceiling:
            out.append(
                f"engine.maxNumBatchedTokens ({engine.max_num_batched_tokens}) must be at least the ceiling"
                f" ({ceiling_name} = {ceiling}): vLLM refuses to start otherwise"
            )
        if (
            engine.enable_chunked_prefill is False
            and engine.max_model_len is not None
            and engine.max_num_batched_tokens < engine.max_model_len
        ):
            out.append(
                f"engine.maxNumBatchedTokens ({engine.max_num_batched_tokens}) is below engine.maxModelLen"
                f" ({engine.max_model_len}) with chunked prefill off: long prompts could never be scheduled"
            )
    out += engine_flags.extra_args_problems(list(engine.extra_args))
    return out
