"""The bounds a limits change must respect. Pure: the engine and the admin route both check with it."""

from __future__ import annotations

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
