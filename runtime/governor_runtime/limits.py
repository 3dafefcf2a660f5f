"""The bounds a limits change must respect. Pure: the engine and the admin route both check with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class LimitsError(ValueError):
    """A requested change the engine will not hold; ``code`` is the admin route's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Bounds:
    """What one engine allows: its startup values and the smallest budget it runs with."""

    ceiling: int
    token_budget_ceiling: int
    min_token_budget_floor: int = 1


def min_token_budget(cap: int, bounds: Bounds) -> int:
    """A step must fit one token for each of ``cap`` running requests (a whole prompt unchunked)."""
    return max(cap, bounds.min_token_budget_floor)


def check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitsError("invalid", f"{name} must be an integer, got {value!r}")
    return value


def resolve(
    bounds: Bounds, current_cap: int, current_budget: int, cap: Any = None, token_budget: Any = None
) -> tuple[int, int]:
    """The (cap, token_budget) an engine holds after a change, or :class:`LimitsError` if it must refuse.

    Bounds: 1 ≤ cap ≤ ceiling (startup max_num_seqs); max(cap, floor) ≤ token_budget ≤ its startup value.
    A field left out keeps its current value.
    """
    new_cap = current_cap if cap is None else check_int("cap", cap)
    new_budget = current_budget if token_budget is None else check_int("token_budget", token_budget)
    if new_cap < 1:
        raise LimitsError("invalid", f"cap must be at least 1, got {new_cap}")
    if new_cap > bounds.ceiling:
        raise LimitsError(
            "above_ceiling", f"cap {new_cap} is above the ceiling {bounds.ceiling} (the startup max_num_seqs)"
        )
    if new_budget > bounds.token_budget_ceiling:
        raise LimitsError(
            "above_ceiling",
            f"token_budget {new_budget} is above its startup value {bounds.token_budget_ceiling}",
        )
    floor = min_token_budget(new_cap, bounds)
    if new_budget < floor:
        raise LimitsError(
            "invalid", f"token_budget {new_budget} is too small for cap {new_cap} (needs at least {floor})"
        )
    return new_cap, new_budget


FIELDS = ("cap", "token_budget")


def parse_change(raw: bytes) -> dict[str, Any]:
    """The PUT body: a JSON object with ``cap`` and/or ``token_budget`` and nothing else."""
    try:
        body = json.loads(raw or b"null")
    except ValueError as bad:
        raise LimitsError("invalid", f"the body is not JSON: {bad}") from None
    if not isinstance(body, dict):
        raise LimitsError("invalid", 'the body must be a JSON object such as {"cap": 8}')
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise LimitsError("invalid", f"unknown field(s) {unknown}; allowed: {list(FIELDS)}")
    if not body:
        raise LimitsError("invalid", f"give at least one of {list(FIELDS)}")
    for name, value in body.items():
        check_int(name, value)  # null, strings, floats and booleans are refused, never read as "unchanged"
    return body
