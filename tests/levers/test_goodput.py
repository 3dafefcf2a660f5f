"""The goodput trade's two shares against closed forms, and the choice among caps."""

from __future__ import annotations

import pytest
from governor.core.levers.goodput import Trade, best_trade, in_time_share, per_token_share


def test_the_share_under_the_target_is_the_quantile_at_the_quantile_and_half_at_the_mean() -> None:
    assert per_token_share(0.020, 0.025, 0.99, target_s=0.025) == pytest.approx(0.99)
    assert per_token_share(0.020, 0.025, 0.99, target_s=0.020) == pytest.approx(0.5)
    assert per_token_share(0.020, 0.025, 0.95, target_s=0.025) == pytest.approx(0.95)
    # the share falls as the target tightens
    shares = [per_token_share(0.020, 0.025, 0.99, target_s=t) for t in (0.026, 0.022, 0.019, 0.014)]
    assert shares == sorted(shares, reverse=True) and shares[-1] < 0.01


def test_a_quantile_at_the_mean_puts_every_request_at_the_mean() -> None:
    assert per_token_share(0.020, 0.020, 0.99, target_s=0.021) == 1.0
    assert per_token_share(0.020, 0.019, 0.99, target_s=0.019) == 0.0


def test_a_backlog_the_service_keeps_within_the_bound_is_all_in_time() -> None:
    # 20 req/s served, 2.5 s bound: a newcomer may wait behind 50; 30 wait and the queue drains.
    assert in_time_share(15.0, 20.0, backlog=30.0, wait_bound_s=2.5, horizon_s=30.0) == 1.0
    assert in_time_share(20.0, 20.0, backlog=30.0, wait_bound_s=2.5, horizon_s=30.0) == 1.0
    assert in_time_share(20.0, 20.0, backlog=60.0, wait_bound_s=2.5, horizon_s=30.0) == 0.0


def test_a_growing_backlog_is_in_time_until_it_crosses_the_bound() -> None:
    # 30 arrive, 20 served: the backlog grows 10/s from 0 and crosses 50 after 5 s of a 30 s horizon.
    assert in_time_share(30.0, 20.0, backlog=0.0, wait_bound_s=2.5, horizon_s=30.0) == pytest.approx(5 / 30)
    # already past the bound: nothing arriving is in time
    assert in_time_share(30.0, 20.0, backlog=80.0, wait_bound_s=2.5, horizon_s=30.0) == 0.0


def test_a_draining_backlog_is_in_time_from_when_it_falls_under_the_bound() -> None:
    # 10 arrive, 20 served: a backlog of 150 falls by 10/s and reaches 50 after 10 s.
    share = in_time_share(10.0, 20.0, backlog=150.0, wait_bound_s=2.5, horizon_s=30.0)
    assert share == pytest.approx(20 / 30)
    # no service, nothing in time
    assert in_time_share(10.0, 0.0, backlog=0.0, wait_bound_s=2.5, horizon_s=30.0) == 0.0


def test_the_smallest_cap_serving_as_many_as_the_best_is_chosen() -> None:
    table = {
        40: Trade(40, 1.0, 0.30),
        48: Trade(48, 0.97, 0.80),
        56: Trade(56, 0.90, 0.86),
        64: Trade(64, 0.5, 1.0),
    }
    chosen = best_trade(table, table.__getitem__)
    assert chosen is not None and chosen.cap == 48  # 77.6 % against 77.4 % at 56: within the tolerance
    assert best_trade(table, table.__getitem__, tolerance=0.0) == table[48]
    assert best_trade([], table.__getitem__) is None
