"""The fleet twin: N twin engines behind a router, in virtual time.

- Router: the Kubernetes Service's behaviour by default (kube-proxy picks an endpoint per connection, at
  random; with one request per connection that is per request), round-robin, or least-loaded (fewest
  running + waiting + routed-but-not-yet-seen) as an option. Only *ready* replicas receive traffic.
- Replica lifecycle: a replica asked for is scheduled at once and ready after a delay drawn uniformly from
  `start_delay_s` (86-100 s measured on the H200 node: image cached, weights from local disk, CUDA graphs).
  A warming replica serves nothing. GPU-seconds count from scheduling to deletion.
- Scale-down drains: the replica removed leaves the router at once and is deleted only when every request
  routed to it has finished, so no request is dropped. A warming replica is removed first (nothing to drain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from governor_twin.engine import DONE, Engine
from governor_twin.profile import EngineProfile

Router = Literal["random", "round_robin", "least_loaded"]


@dataclass(frozen=True)
class FleetConfig:
    start_delay_s: tuple[float, float] = (86.0, 100.0)
    router: Router = "random"
    min_replicas: int = 1
    max_replicas: int = 12
    route_slice_s: float = 1.0  # routing and drain checks happen on this grid
    seed: int = 0


@dataclass
class Replica:
    index: int
    engine: Engine
    scheduled_s: float
    ready_s: float
    drain_s: float | None = None
    deleted_s: float | None = None
    routed: list[int] = field(default_factory=list)  # global request ids, in engine order

    def ready(self, now: float) -> bool:
        return self.ready_s <= now and self.drain_s is None and self.deleted_s is None

    def warming(self, now: float) -> bool:
        return self.ready_s > now and self.drain_s is None and self.deleted_s is None

    def live(self) -> bool:
        """Counted in the Deployment's spec.replicas (neither draining nor deleted)."""
        return self.drain_s is None and self.deleted_s is None

    def gpu_seconds(self, end: float, start: float = 0.0) -> float:
        """Seconds held between `start` and `end`, from scheduling to deletion."""
        stop = min(self.deleted_s, end) if self.deleted_s is not None else end
        return max(0.0, stop - max(self.scheduled_s, start))


class Fleet:
    """Replicas, router and accounting. `load` a workload, then `advance(now)` tick by tick, moving
    `scale_to` and `set_cap` between ticks."""

    def __init__(self, profile: EngineProfile, cfg: FleetConfig, replicas: int, cap: int) -> None:
        self.profile = profile
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.cap = cap
        self.token_budget = profile.token_budget
        self.replicas: list[Replica] = []
        self.clock = 0.0
        self._rr = 0
        self._next = 0  # first request not yet routed
        self.sent = np.zeros(0)
        self.prompt = np.zeros(0, dtype=np.int64)
        self.output = np.zeros(0, dtype=np.int64)
        self.where = np.zeros(0, dtype=np.int64)  # replica index per request (-1: not routed yet)
        self.changes = 0
        for _ in range(replicas):
            self._add(0.0, ready_at=0.0)

    # ---------------------------------------------------------------- workload
    def load(self, sent: NDArray[np.float64], prompt: NDArray[np.int64], output: NDArray[np.int64]) -> None:
        order = np.argsort(sent, kind="stable")
        self.sent, self.prompt, self.output = sent[order], prompt[order], output[order]
        self.where = np.full(sent.size, -1, dtype=np.int64)

    # ---------------------------------------------------------------- lifecycle
    def _add(self, now: float, ready_at: float | None = None) -> Replica:
        lo, hi = self.cfg.start_delay_s
        ready = ready_at if ready_at is not None else now + float(self.rng.uniform(lo, hi))
        engine = Engine(self.profile, cap=self.cap, token_budget=self.token_budget, seed=len(self.replicas))
        engine.clock = now
        rep = Replica(len(self.replicas), engine, now, ready)
        self.replicas.append(rep)
        return rep

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.live()]

    def ready(self, now: float | None = None) -> list[Replica]:
        t = self.clock if now is None else now
        return [r for r in self.replicas if r.ready(t)]

    def warming(self, now: float | None = None) -> list[Replica]:
        t = self.clock if now is None else now
        return [r for r in self.replicas if r.warming(t)]

    def scale_to(self, target: int, now: float) -> int:
        """Ask for `target` replicas (clipped to the bounds); answer the spec.replicas now held."""
        target = max(self.cfg.min_replicas, min(self.cfg.max_replicas, target))
        live = self.live()
        if target != len(live):
            self.changes += 1
        for _ in range(target - len(live)):
            self._add(now)
        for _ in range(len(live) - target):
            self._remove_one(now)
        return len(self.live())

    def _remove_one(self, now: float) -> None:
        live = self.live()
        warming = [r for r in live if r.warming(now)]
        if warming:  # nothing to drain: delete the youngest
            victim = max(warming, key=lambda r: r.scheduled_s)
            victim.deleted_s = now
            return
        ready = [r for r in live if r.ready(now)]
        if len(ready) <= 1:
            return  # never drain the last serving replica
        victim = min(ready, key=lambda r: r.engine.num_running + r.engine.num_waiting)
        victim.drain_s = now

    def _engines(self) -> list[Engine]:
        return [r.engine for r in self.replicas if r.deleted_s is None]

    def set_cap(self, cap: int) -> int:
        self.cap = max(1, min(cap, self.profile.ceiling))
        for engine in self._engines():
            engine.set_cap(self.cap)
        return self.cap

    def set_token_budget(self, budget: int) -> int:
        self.token_budget = max(1, min(budget, self.profile.token_budget))
        for engine in self._engines():
            engine.set_token_budget(self.token_budget)
        return self.token_budget

    def set_caps(self, caps: dict[int, int]) -> None:
        """Per-replica caps (replica index -> cap), where engines differ."""
        for index, cap in caps.items():
            self.replicas[index].engine.set_cap(cap)

    # ---------------------------------------------------------------- time
    def advance(self, now: float) -> None:
        """Route and serve every request sent before `now`; finish drains."""
        step = self.cfg.route_slice_s
        t = self.clock
        while t < now - 1e-9:
            t1 = min(now, t + step)
            self.clock = t  # routing sees the replicas ready at the slice's start
            self._route_until(t1)
            for r in self.replicas:
                if r.deleted_s is None:
                    r.engine.advance(t1)
            self._finish_drains(t1)
            t = t1
        self.clock = now

    def _route_until(self, t1: float) -> None:
        ready = self.ready(self.clock)
        if not ready:
            return
        end = int(np.searchsorted(self.sent, t1, side="left"))
        mode = self.cfg.router
        extra = dict.fromkeys(range(len(ready)), 0)
        for gid in range(self._next, end):
            if mode == "random":
                k = int(self.rng.integers(len(ready)))
            elif mode == "round_robin":
                k = self._rr % len(ready)
                self._rr += 1
            else:
                k = min(
                    range(len(ready)),
                    key=lambda i: ready[i].engine.num_running + ready[i].engine.num_waiting + extra[i],
                )
                extra[k] += 1
            rep = ready[k]
            rep.engine.submit(float(self.sent[gid]), int(self.prompt[gid]), int(self.output[gid]))
            rep.routed.append(gid)
            self.where[gid] = rep.index
        self._next = max(self._next, end)

    def _finish_drains(self, t: float) -> None:
        for r in self.replicas:
            if r.drain_s is not None and r.deleted_s is None and r.engine.idle():
                r.deleted_s = t

    # ---------------------------------------------------------------- accounting
    def gpu_seconds(self, end: float, start: float = 0.0) -> float:
        return sum(r.gpu_seconds(end, start) for r in self.replicas)

    def outcomes(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
        """Per global request: first token time, finish time, done (NaN/False where not finished)."""
        first = np.full(self.sent.size, math.nan)
        finish = np.full(self.sent.size, math.nan)
        done = np.zeros(self.sent.size, dtype=bool)
        for r in self.replicas:
            if not r.routed:
                continue
            ids = np.array(r.routed, dtype=np.int64)
            e = r.engine
            n = len(r.routed)
            first[ids] = e.first_token[:n]
            finish[ids] = e.finish[:n]
            done[ids] = e.state[:n] == DONE
        return first, finish, done
