"""One streamed completion, timed at the client the way `vllm bench serve` times it.

TTFT = first token chunk − send; TPOT = (last token chunk − first token chunk) / (output tokens − 1);
e2e = end of stream − send; every gap between token chunks is an inter-token latency. The output length is
the usage block's `completion_tokens` when the server sends it, else the number of token chunks. Used by the
open-loop load (`governor_dev.loadgen`), the twin's calibration and fidelity check and the benchmarks, so
every side of a comparison is measured by the same client.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx


class StreamError(RuntimeError):
    """The server answered, but not with a stream of tokens (an HTTP error status, or no token chunk)."""


@dataclass(frozen=True)
class Streamed:
    """Clock readings (`time.perf_counter`) of one streamed request."""

    sent: float
    chunks: tuple[float, ...]  # arrival of every chunk that carried choices
    end: float
    usage_tokens: int | None  # completion_tokens from the usage block, when one came

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens or len(self.chunks)

    @property
    def ttft_s(self) -> float:
        return self.chunks[0] - self.sent

    @property
    def tpot_s(self) -> float | None:
        """None for a single-token output (no decode gap to measure)."""
        tokens = self.output_tokens
        return (self.chunks[-1] - self.chunks[0]) / (tokens - 1) if tokens > 1 else None

    @property
    def e2e_s(self) -> float:
        return self.end - self.sent

    @property
    def gaps_s(self) -> tuple[float, ...]:
        return tuple(float(b - a) for a, b in itertools.pairwise(self.chunks))


async def stream_completion(client: httpx.AsyncClient, url: str, body: Mapping[str, Any]) -> Streamed:
    """POST `body` to `url` as a stream (usage requested) and time its chunks.

    Raises StreamError for an error status or a stream without tokens, httpx.HTTPError for transport
    failures and json.JSONDecodeError for a malformed chunk.
    """
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    chunks: list[float] = []
    usage: int | None = None
    sent = time.perf_counter()
    async with client.stream("POST", url, json=payload) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode(errors="replace")[:200]
            raise StreamError(f"HTTP {response.status_code}: {detail}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = int(chunk["usage"].get("completion_tokens") or 0) or usage
            if chunk.get("choices"):
                chunks.append(time.perf_counter())
    end = time.perf_counter()
    if not chunks:
        raise StreamError("no tokens streamed")
    return Streamed(sent, tuple(chunks), end, usage)
