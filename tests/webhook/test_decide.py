"""Parsing, authentication and decisions of the Alertmanager webhook (governor.core.notifications, pure)."""

from __future__ import annotations

import base64
import json

import pytest
from governor.core import notifications as webhook

from tests.webhook.alertmanager import alert, notification

REPEAT_S = 600.0


def parsed(*alerts: dict[str, object]) -> webhook.Notification:
    return webhook.parse(json.dumps(notification(*alerts)).encode())


def run(*notifications: tuple[float, webhook.Notification]) -> list[list[tuple[str, int]]]:
    """Feed notifications at the given times; the steps each one asked for, as (name, direction)."""
    state = webhook.ReceiverState()
    out: list[list[tuple[str, int]]] = []
    for now, note in notifications:
        decision = webhook.decide(state, note, now, REPEAT_S)
        state = decision.state
        out.append([(s.name, s.direction) for s in decision.steps])
    return out


def test_a_firing_scale_out_alert_is_one_step_and_its_repeats_are_idempotent() -> None:
    queue = parsed(alert("VLLMGovernorQueueSaturated"))
    assert run((0, queue), (60, queue), (300, queue)) == [[("chat", 1)], [], []]


def test_an_alert_still_firing_after_the_repeat_interval_asks_once_more() -> None:
    queue = parsed(alert("VLLMGovernorQueueSaturated"))
    assert run((0, queue), (REPEAT_S + 1, queue), (REPEAT_S + 2, queue)) == [[("chat", 1)], [("chat", 1)], []]


def test_a_new_firing_episode_of_the_same_alert_acts_again() -> None:
    first = parsed(alert("VLLMGovernorQueueSaturated"))
    resolved = parsed(alert("VLLMGovernorQueueSaturated", "resolved"))
    again = parsed(alert("VLLMGovernorQueueSaturated", starts_at="2026-01-01T01:00:00Z"))
    assert run((0, first), (10, resolved), (20, again)) == [[("chat", 1)], [], [("chat", 1)]]


def test_two_scale_out_alerts_for_one_service_in_one_group_are_one_step() -> None:
    both = parsed(alert("VLLMGovernorQueueSaturated"), alert("VLLMGovernorCapAtFloor"))
    decision = webhook.decide(webhook.ReceiverState(), both, 0, REPEAT_S)
    (step,) = decision.steps
    assert (step.direction, step.alerts) == (1, ("VLLMGovernorQueueSaturated", "VLLMGovernorCapAtFloor"))


def test_headroom_scales_in_only_while_no_scale_out_alert_fires() -> None:
    queue = alert("VLLMGovernorQueueSaturated")
    headroom = alert("VLLMGovernorHeadroom", scale="in")
    assert run((0, parsed(queue)), (10, parsed(headroom))) == [[("chat", 1)], []]
    assert run((0, parsed(headroom))) == [[("chat", -1)]]


def test_a_resolved_scale_out_alert_with_sustained_headroom_scales_in_once() -> None:
    queue, headroom = alert("VLLMGovernorQueueSaturated"), alert("VLLMGovernorHeadroom", scale="in")
    resolved = parsed(alert("VLLMGovernorQueueSaturated", "resolved"))
    assert run((0, parsed(queue)), (5, parsed(headroom)), (10, resolved), (20, resolved)) == [
        [("chat", 1)],
        [],
        [("chat", -1)],
        [],
    ]


def test_resolved_without_headroom_changes_nothing() -> None:
    assert run((0, parsed(alert("VLLMGovernorQueueSaturated", "resolved")))) == [[]]


def test_alerts_without_the_scale_label_or_the_object_are_skipped_with_a_reason() -> None:
    unnamed = {
        **alert("VLLMGovernorQueueSaturated"),
        "labels": {"alertname": "VLLMGovernorQueueSaturated", "governor_scale": "out"},
    }
    note = parsed(alert("VLLMGovernorErrorBudgetFastBurn", scale=None), unnamed)
    decision = webhook.decide(webhook.ReceiverState(), note, 0, REPEAT_S)
    assert decision.steps == ()
    assert [s.why for s in decision.skipped] == [
        "no governor_scale label: not an autoscaling alert",
        "labels lack namespace and inferenceservice",
    ]


def test_the_name_label_names_the_object_too() -> None:
    raw = alert("VLLMGovernorCapAtFloor")
    raw["labels"] = {k: v for k, v in raw["labels"].items() if k != "inferenceservice"} | {"name": "chat"}
    assert run((0, parsed(raw))) == [[("chat", 1)]]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "malformed"),
        (json.dumps({"version": "3", "alerts": []}).encode(), 422, "invalid"),
        (json.dumps({**notification(alert("X")), "alerts": [{"status": "on"}]}).encode(), 422, "invalid"),
        (b" " * (webhook.MAX_BODY_BYTES + 1), 413, "too_large"),
    ],
)
def test_bad_payloads_are_refused_with_a_clear_error(body: bytes, status: int, code: str) -> None:
    with pytest.raises(webhook.WebhookError) as caught:
        webhook.parse(body)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert caught.value.message


def test_a_wrong_content_type_is_refused() -> None:
    with pytest.raises(webhook.WebhookError, match="application/json"):
        webhook.parse(json.dumps(notification(alert("X"))).encode(), "text/plain")


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret", True),
        ("bearer s3cret", True),
        ("Basic " + base64.b64encode(b"alertmanager:s3cret").decode(), True),
        ("Bearer wrong", False),
        ("Basic " + base64.b64encode(b"alertmanager:wrong").decode(), False),
        ("Basic !!notbase64", False),
        ("Token s3cret", False),
        (None, False),
        ("", False),
    ],
)
def test_credentials(header: str | None, ok: bool) -> None:
    assert webhook.authorized(header, "s3cret") is ok


def test_no_configured_token_authorizes_nobody() -> None:
    assert webhook.authorized("Bearer ", "") is False
