"""The tests' handle on a real vLLM CPU server: the code lives in governor_dev.localengine (the demo and the
benchmarks start engines the same way); this module keeps the names the tests import."""

from governor_dev.localengine import (
    CPU_ENV,
    DEFAULT_CEILING,
    DEFAULT_INITIAL_CAP,
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MODEL_NAME,
    LIMITS_PATH,
    STARTUP_TIMEOUT_S,
    TINY_LLAMA,
    Engine,
    metric_value,
    prompt_ids,
    start_runtime,
    write_tiny_llama,
)
from governor_dev.ports import free_port

__all__ = [
    "CPU_ENV",
    "DEFAULT_CEILING",
    "DEFAULT_INITIAL_CAP",
    "DEFAULT_MAX_MODEL_LEN",
    "DEFAULT_MODEL_NAME",
    "LIMITS_PATH",
    "STARTUP_TIMEOUT_S",
    "TINY_LLAMA",
    "Engine",
    "free_port",
    "metric_value",
    "prompt_ids",
    "start_runtime",
    "write_tiny_llama",
]
