"""The Alertmanager path in the fleet: the shipped scale alerts, evaluated by Prometheus' own rule engine over
the series the fleet's pods and our control step export, in virtual time; what fires reaches
governor.core.notifications.decide as Alertmanager's webhook payload and goes on to the replica planner, as
the operator's receiver (governor.services.alert_receiver) hands it.

- The rules: the groups of governor.observability.alerts whose alerts carry the scale label (queue
  saturated and cap at its floor: out; sustained headroom: in), with the shipped default settings.
- The engine: `promtool test rules` (Prometheus' rule-unit-test runner; the PromQL engine and the `for:`
  semantics of a real Prometheus). Every evaluation interval (1 m, Prometheus' default) it gets the last
  HISTORY_S of the series at the scrape interval, one test per scale alert expecting none, and its failure
  report lists what fired. The history spans the longest `for:` plus the longest rate window, so a
  condition that held long enough within it fires as it would in a Prometheus running since the start.
- The series: the engines' queue-time histogram (pooled over pods, deleted pods' counters kept, as the
  fleet's other metrics), running, waiting and the runtime cap (sums over ready pods, one series), and the
  operator's gauges (cap, floor, smoothed P99, SLO target), labelled as the chart's monitors relabel them.
- Alertmanager: alerts grouped by InferenceService; a new group is notified group_wait (30 s) after its
  first alert, a change at the next group_interval (5 m), an unchanged group every repeat_interval (4 h):
  Alertmanager's defaults, which the chart does not override. Resolved alerts are sent once (webhook
  `send_resolved` defaults to true).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from governor.core import signals
from governor.core.notifications import Notification, ReceiverState, Step, decide
from governor.observability import alerts
from governor.observability.queries import ISVC_LABEL, NAMESPACE_LABEL

EVAL_S = 60.0  # Prometheus' default evaluation_interval
SCRAPE_S = 15.0  # the series' spacing (a common scrape interval)
HISTORY_S = 25 * 60.0  # the longest `for:` (15 m) plus the longest rate window (5 m), and slack
GROUP_WAIT_S, GROUP_INTERVAL_S, REPEAT_INTERVAL_S = 30.0, 300.0, 4 * 3600.0  # Alertmanager's defaults
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # virtual time 0, for startsAt
_ALERT = re.compile(r"alertname: (\S+), time: [^,]+,\s*exp:\[\],\s*got:\[(.*?)\]\s*(?=alertname:|\Z)", re.S)
_LABELS = re.compile(r"Labels:\{(.*?)\}")
_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scale_rules(settings: alerts.AlertSettings | None = None) -> dict[str, Any]:
    """The shipped rule groups that carry the scale label, as a rules file."""
    groups = [
        g
        for g in alerts.rule_groups(settings or alerts.AlertSettings())
        if any(alerts.SCALE_LABEL in r.get("labels", {}) for r in g["rules"])
    ]
    return {"groups": groups}


def scale_alert_names(rules: dict[str, Any]) -> list[str]:
    rules_of = (r for g in rules["groups"] for r in g["rules"])
    return [r["alert"] for r in rules_of if alerts.SCALE_LABEL in r.get("labels", {})]


@dataclass(frozen=True)
class Point:
    """One scrape of what the alerts read: series name with labels -> value (absent: no sample)."""

    t: float
    values: dict[str, float]


class PromtoolMissing(RuntimeError):
    pass


def firing(rules_path: Path, names: list[str], points: list[Point], workdir: Path) -> list[dict[str, str]]:
    """The alerts of `names` firing at the last point, each as its label set: promtool evaluates the rules
    over `points` (at SCRAPE_S spacing from the first) and reports every alert it did not expect."""
    binary = shutil.which("promtool")
    if binary is None:
        raise PromtoolMissing("no promtool on PATH: the alert path needs it (scripts/setup.sh installs it)")
    keys = sorted({k for p in points for k in p.values})
    series = [{"series": k, "values": " ".join(_value(p.values.get(k)) for p in points)} for k in keys]
    end = f"{round((len(points) - 1) * SCRAPE_S)}s"
    test = {
        "rule_files": [str(rules_path)],
        "evaluation_interval": f"{EVAL_S:g}s",
        "tests": [
            {
                "interval": f"{SCRAPE_S:g}s",
                "input_series": series,
                "alert_rule_test": [{"eval_time": end, "alertname": n, "exp_alerts": []} for n in names],
            }
        ],
    }
    path = workdir / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([binary, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return []
    report = done.stdout + done.stderr
    found = [
        dict(_PAIR.findall(labels)) for _, body in _ALERT.findall(report) for labels in _LABELS.findall(body)
    ]
    if not found:  # a failure that is not a fired alert: the rules or the series are wrong
        raise RuntimeError(f"promtool failed without an alert:\n{report[-2000:]}")
    return found


def _value(v: float | None) -> str:
    return "_" if v is None else f"{v:.6g}"


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]


@dataclass
class _Group:
    """Alertmanager's view of one InferenceService's alerts."""

    active: dict[str, tuple[dict[str, str], float]] = field(default_factory=dict)  # fp -> (labels, start)
    resolved: dict[str, tuple[dict[str, str], float]] = field(default_factory=dict)  # to send once
    first_s: float | None = None  # when the group appeared (group_wait counts from it)
    sent_s: float | None = None
    changed: bool = False


@dataclass
class AlertPath:
    """Records the series, evaluates the scale alerts every EVAL_S, and turns notifications into the
    receiver's steps."""

    namespace: str
    name: str
    repeat_after_s: float = 600.0  # the receiver's GOVERNOR_WEBHOOK_REPEAT_AFTER_SECONDS default
    points: deque[Point] = field(default_factory=deque)
    receiver: ReceiverState = field(default_factory=ReceiverState)
    group: _Group = field(default_factory=_Group)
    next_scrape_s: float = 0.0
    next_eval_s: float = EVAL_S
    evaluations: int = 0
    notifications: int = 0
    fired: Counter[str] = field(default_factory=Counter)  # alertname -> evaluations it fired at
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fleet-alerts-")))

    def __post_init__(self) -> None:
        rules = scale_rules()
        self.names = scale_alert_names(rules)
        self.rules_path = self.workdir / "rules.yml"
        self.rules_path.write_text(yaml.safe_dump(rules, sort_keys=False))
        weakref.finalize(self, shutil.rmtree, self.workdir, True)

    def labels(self, **extra: str) -> str:
        pairs = {NAMESPACE_LABEL: self.namespace, ISVC_LABEL: self.name, "name": self.name, **extra}
        return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"

    def record(self, now: float, values: dict[str, float]) -> None:
        """One scrape, kept at SCRAPE_S spacing (the control step ticks more often). promtool reads the
        points as one series at that interval, so a tick that does not divide it is refused."""
        if now + 1e-9 < self.next_scrape_s:
            return
        if self.points and abs(now - self.points[-1].t - SCRAPE_S) > 1e-6:
            raise ValueError(
                f"the alert path samples every {SCRAPE_S:g} s; a scrape {now - self.points[-1].t:g} s "
                "after the last means the caller's tick does not divide it"
            )
        self.next_scrape_s = now + SCRAPE_S
        self.points.append(Point(now, values))
        while self.points and self.points[0].t < now - HISTORY_S:
            self.points.popleft()

    def series(
        self,
        *,
        queue_buckets: list[tuple[str, float]],
        running: float,
        waiting: float,
        runtime_cap: float,
        cap: float,
        floor: float,
        p99_smoothed: float | None,
        slo_s: float,
    ) -> dict[str, float]:
        """One scrape's values, named as Prometheus holds them."""
        pod = {"pod": "pool"}
        out = {
            f"{signals.QUEUE_TIME}_bucket{self.labels(le=le, **pod)}": count for le, count in queue_buckets
        }
        out[f"{signals.RUNNING}{self.labels(**pod)}"] = running
        out[f"{signals.WAITING}{self.labels(**pod)}"] = waiting
        out[f"{signals.RUNTIME_CAP}{self.labels(**pod)}"] = runtime_cap
        out[f"{signals.OP_CAP}{self.labels()}"] = cap
        out[f"{signals.OP_CAP_FLOOR}{self.labels()}"] = floor
        out[f"{signals.OP_SLO_TARGET}{self.labels()}"] = slo_s
        if p99_smoothed is not None:
            out[f"{signals.OP_P99_SMOOTHED}{self.labels()}"] = p99_smoothed
        return out

    def steps(self, now: float) -> list[Step]:
        """At an evaluation instant: what fires, Alertmanager's notification if one is due, and the
        receiver's steps for it (none otherwise)."""
        if now + 1e-9 < self.next_eval_s or len(self.points) < 2:
            return []
        self.next_eval_s = now + EVAL_S
        self.evaluations += 1
        found = firing(self.rules_path, self.names, list(self.points), self.workdir)
        self._update(found, now)
        notification = self._due(now)
        if notification is None:
            return []
        self.notifications += 1
        decision = decide(self.receiver, notification, now, self.repeat_after_s)
        self.receiver = decision.state
        return list(decision.steps)

    def _update(self, found: list[dict[str, str]], now: float) -> None:
        g = self.group
        current = {fingerprint(labels): labels for labels in found}
        self.fired.update(labels.get("alertname", "?") for labels in found)
        for fp, labels in current.items():
            if fp not in g.active:
                g.active[fp] = (labels, now)
                g.changed = True
        for fp in [fp for fp in g.active if fp not in current]:
            g.resolved[fp] = g.active.pop(fp)
            g.changed = True
        if g.active and g.first_s is None:
            g.first_s = now

    def _due(self, now: float) -> Notification | None:
        g = self.group
        if g.first_s is None:
            return None
        if g.sent_s is None:
            due = now - g.first_s >= GROUP_WAIT_S
        elif g.changed:
            due = now - g.sent_s >= GROUP_INTERVAL_S
        else:
            due = bool(g.active) and now - g.sent_s >= REPEAT_INTERVAL_S
        if not due:
            return None
        payload = {
            "version": "4",
            "groupKey": f"{self.namespace}/{self.name}",
            "status": "firing" if g.active else "resolved",
            "receiver": "vllm-governor",
            "alerts": [_alert(labels, start, "firing", fp) for fp, (labels, start) in g.active.items()]
            + [_alert(labels, start, "resolved", fp) for fp, (labels, start) in g.resolved.items()],
        }
        g.sent_s, g.changed, g.resolved = now, False, {}
        if not g.active:
            g.first_s = g.sent_s = None  # the group is gone; a new one waits group_wait again
        return Notification.model_validate(payload)


def _alert(labels: dict[str, str], start: float, status: str, fp: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": labels,
        "startsAt": (EPOCH + timedelta(seconds=start)).isoformat(),
        "fingerprint": fp,
    }
