"""The vLLM flags the operator sets itself, and how to recognise them in ``engine.extraArgs``.

vLLM's ``FlexibleArgumentParser`` (read from vllm 0.32) accepts one flag in many spellings, and each of them
would fight the typed field the operator writes:

* ``--max-num-seqs 8``, ``--max-num-seqs=8``, ``--max_num_seqs`` (underscores become dashes before ``=``);
* ``--max-num-seqs.x`` (the dotted JSON form; the part before the first ``.`` names the flag);
* ``--max-num-s`` (argparse's ``allow_abbrev`` is on: any unambiguous prefix names the flag; an ambiguous
  one makes vLLM exit, so refusing every prefix of an owned flag refuses nothing that would have worked);
* aliases: ``-tp`` for ``--tensor-parallel-size``, ``--device-memory-utilization`` for
  ``--gpu-memory-utilization``;
* ``--config FILE``: a YAML file can set any flag, the owned ones included, behind the operator's back.

No vLLM option is a strict prefix of an owned flag (checked against vllm 0.32's parser), so the prefix rule
refuses no unrelated option.
"""

from __future__ import annotations

# Flag → the field (or party) that owns it. Every flag builders.vllm_args writes is here.
OWNED_FLAGS: dict[str, str] = {
    "--initial-cap": "spec.adaptive.initialCap",
    "--model": "spec.model",
    "--served-model-name": "spec.servedModelName",
    "--host": "the operator",
    "--port": "the operator (the runtime listens on port 8000, named http)",
    "--max-num-seqs": "spec.engine.maxNumSeqs",
    "--max-model-len": "spec.engine.maxModelLen",
    "--max-num-batched-tokens": "spec.engine.maxNumBatchedTokens",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--device-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--block-size": "spec.engine.blockSize",
    "--dtype": "spec.engine.dtype",
    "--tensor-parallel-size": "spec.engine.tensorParallelSize",
    "--enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--no-enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--config": "the typed fields (a config file could set the flags above)",
}
SHORT_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size"}


def canonical(arg: str) -> str | None:
    """The long flag an argument names, as vLLM reads it; None for a value or a short option."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg[2:].split("=", 1)[0].split(".", 1)[0]
    return "--" + name.replace("_", "-")


def owned_flag(arg: str) -> str | None:
    """The owned flag ``arg`` sets in any spelling vLLM accepts, or None."""
    for alias, long_flag in SHORT_ALIASES.items():
        if arg.startswith(alias):  # "-tp 2", "-tp=2" and argparse's attached "-tp2"
            return long_flag
    flag = canonical(arg)
    if flag is None or flag == "--":
        return None
    if flag in OWNED_FLAGS:
        return flag
    return next((owned for owned in OWNED_FLAGS if owned.startswith(flag)), None)


def extra_args_problems(extra_args: list[str]) -> list[str]:
    """One sentence per argument of engine.extraArgs that sets an owned flag."""
    out = []
    for arg in extra_args:
        flag = owned_flag(arg)
        if flag is not None:
            spelled = "" if canonical(arg) == flag else f" (as {arg!r})"
            out.append(f"engine.extraArgs must not set {flag}{spelled}: use {OWNED_FLAGS[flag]} instead")
    return out
