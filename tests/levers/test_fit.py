"""The online line fit: exact algebra, recovery under noise, honest errors, forgetting, outliers, bad data."""

from __future__ import annotations

import json
import math
import random
import statistics

from governor.core.levers.fit import LeverFit
from hypothesis import given, settings
from hypothesis import strategies as st

NO_CLIP = {"clip_k": 1e9}  # the plain least-squares estimate, for comparisons with closed forms


def feed(fit: LeverFit, points: list[tuple[float, float]]) -> LeverFit:
    for running, y in points:
        fit = fit.update([running], y)
    return fit


def line_samples(rng: random.Random, n: int, a: float, b: float, sigma: float) -> list[tuple[float, float]]:
    out = []
    for _ in range(n):
        running = rng.uniform(1, 256)
        out.append((running, a + b * running + rng.gauss(0, sigma)))
    return out


def weighted_ls(points: list[tuple[float, float]], lam: float) -> tuple[float, float]:
    """Direct weighted least squares, the newest point weighted 1 and each older one λ times less."""
    n = len(points)
    w = [lam ** (n - 1 - i) for i in range(n)]
    sw = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, points, strict=True)) / sw
    my = sum(wi * y for wi, (_, y) in zip(w, points, strict=True)) / sw
    sxx = sum(wi * (x - mx) ** 2 for wi, (x, _) in zip(w, points, strict=True))
    sxy = sum(wi * (x - mx) * (y - my) for wi, (x, y) in zip(w, points, strict=True))
    slope = sxy / sxx
    return my - slope * mx, slope


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1000), st.floats(-1e3, 1e3)), min_size=3, max_size=60),
    st.floats(0.8, 1.0),
)
def test_the_recursion_is_weighted_least_squares(points: list[tuple[float, float]], lam: float) -> None:
    xs = [x for x, _ in points]
    if max(xs) - min(xs) < 1.0:  # a slope needs spread
        return
    fit = feed(LeverFit(forgetting=lam, **NO_CLIP), points)
    intercept, slope = weighted_ls(points, lam)
    got_intercept, got_slope = fit.line()
    scale = 1.0 + max(abs(y) for _, y in points)
    assert math.isclose(got_slope, slope, rel_tol=1e-6, abs_tol=1e-9 * scale)
    assert math.isclose(got_intercept, intercept, rel_tol=1e-6, abs_tol=1e-6 * scale)


def test_without_forgetting_it_is_ordinary_least_squares() -> None:
    points = line_samples(random.Random(7), 50, 6.3, 0.153, 1.0)
    fit = feed(LeverFit(forgetting=1.0, **NO_CLIP), points)
    expected = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    assert math.isclose(fit.line()[1], expected.slope, rel_tol=1e-9)
    assert math.isclose(fit.line()[0], expected.intercept, rel_tol=1e-9)
    assert fit.confidence().effective_samples == 50


@settings(max_examples=25, deadline=None)
@given(
    a=st.floats(0.5, 50),
    b=st.floats(0.01, 1.0),
    noise=st.floats(0.0, 0.2),
    seed=st.integers(0, 2**32 - 1),
)
def test_recovers_a_known_line_under_noise(a: float, b: float, noise: float, seed: int) -> None:
    sigma = noise * a  # noise up to 20 % of the intercept
    fit = feed(LeverFit(), line_samples(random.Random(seed), 150, a, b, sigma))
    report = fit.confidence()
    assert abs(report.slope - b) <= 6 * report.slope_stderr + 1e-6 * b
    for running in (10.0, 100.0, 200.0):
        mean, stderr = fit.predict([running])
        # 1e-6 relative: float rounding when the noise is ~0 and the standard error with it
        assert abs(mean - (a + b * running)) <= 6 * stderr + 1e-6 * (a + b * running)
    assert report.residual_scale <= 2 * sigma + 1e-6 * (a + 256 * b)  # round-off only when noiseless


def test_standard_errors_are_honest() -> None:
    """Over many noisy histories the true slope lies within 1.96 standard errors about 95 % of the time."""
    covered = 0
    runs = 150
    for seed in range(runs):
        fit = feed(LeverFit(), line_samples(random.Random(seed), 150, 6.3, 0.153, 2.0))
        report = fit.confidence()
        covered += abs(report.slope - 0.153) <= 1.96 * report.slope_stderr
    assert 0.88 <= covered / runs <= 0.99


def test_tracks_a_regime_change_within_two_memory_lengths() -> None:
    rng = random.Random(11)
    fit = feed(LeverFit(), line_samples(rng, 200, 6.3, 0.153, 0.5))
    memory = round(1 / (1 - fit.forgetting))
    fit = feed(fit, line_samples(rng, 2 * memory, 12.0, 0.30, 0.5))
    slope = fit.line()[1]
    assert abs(slope - 0.30) < 0.03
    for running in (20.0, 120.0, 240.0):
        assert abs(fit.predict([running]).mean - (12.0 + 0.30 * running)) < 0.05 * (12.0 + 0.30 * running)


def test_a_noiseless_history_still_learns_a_small_step() -> None:
    """With no noise the residual scale is 0; the clip scale's floor keeps a new level learnable."""
    rng = random.Random(5)
    fit = feed(LeverFit(), line_samples(rng, 200, 6.3, 0.153, 0.0))
    fit = feed(fit, line_samples(rng, 66, 7.3, 0.153, 0.0))
    assert abs(fit.line()[0] - 7.3) < 0.15  # λ^66 ≈ 0.13 of the old level is left after two memory lengths
    assert abs(fit.line()[1] - 0.153) < 0.005


def test_reports_low_confidence_without_excitation() -> None:
    rng = random.Random(3)
    fit = feed(LeverFit(), [(50.0, 14.0 + rng.gauss(0, 0.5)) for _ in range(100)])
    report = fit.confidence()
    assert report.excitation == 0.0
    assert report.slope_t == 0.0 and math.isinf(report.slope_stderr)
    assert math.isfinite(fit.predict([50.0]).stderr)  # the level where it was seen is known
    assert math.isinf(fit.predict([120.0]).stderr)  # anywhere else it is not
    assert abs(fit.predict([50.0]).mean - 14.0) < 0.5


def test_excitation_fades_with_memory() -> None:
    """A spread seen long ago counts less and less once the batch stops moving."""
    rng = random.Random(4)
    fit = feed(LeverFit(), line_samples(rng, 100, 6.3, 0.153, 0.5))
    spread_then = fit.confidence().excitation
    fit = feed(fit, [(80.0, 6.3 + 0.153 * 80 + rng.gauss(0, 0.5)) for _ in range(100)])
    report = fit.confidence()
    assert report.excitation < 0.3 * spread_then
    assert abs(report.slope - 0.153) < 0.02  # what was learnt is remembered, with a wider error
    assert (
        report.slope_stderr
        > 3 * feed(LeverFit(), line_samples(rng, 100, 6.3, 0.153, 0.5)).confidence().slope_stderr
    )


def test_outliers_barely_move_the_line() -> None:
    rng = random.Random(9)
    points = line_samples(rng, 300, 6.3, 0.153, 0.5)
    spiked = [(x, y * 10 if i % 20 == 7 else y) for i, (x, y) in enumerate(points)]  # 5 % stalls, 10x
    robust = feed(LeverFit(), spiked)
    plain = feed(LeverFit(**NO_CLIP), spiked)
    assert abs(robust.line()[1] - 0.153) < 0.01
    assert abs(robust.line()[0] - 6.3) < 1.0
    assert abs(plain.line()[1] - 0.153) > 3 * abs(robust.line()[1] - 0.153)  # the clipping is what helped
    assert robust.clipped > 0


@given(st.sampled_from([None, math.nan, math.inf, -math.inf]), st.booleans())
def test_missing_or_not_finite_samples_are_skipped(bad: float | None, in_x: bool) -> None:
    fit = feed(LeverFit(), line_samples(random.Random(1), 20, 6.3, 0.153, 0.5))
    after = fit.update([bad], 10.0) if in_x else fit.update([40.0], bad)
    assert after is fit
    assert fit.update([40.0, 100.0], 10.0) is fit  # the wrong number of regressors too


def test_prefill_interference_is_a_second_slope() -> None:
    rng = random.Random(2)
    fit = LeverFit(with_prefill=True)
    for _ in range(300):
        running, prefill = rng.uniform(1, 256), rng.uniform(0, 4000)
        fit = fit.update([running, prefill], 5.0 + 0.05 * running + 0.004 * prefill + rng.gauss(0, 0.3))
    report = fit.confidence()
    assert abs(report.slope - 0.05) < 4 * report.slope_stderr
    assert report.prefill_slope is not None and report.prefill_slope_stderr is not None
    assert abs(report.prefill_slope - 0.004) < 4 * report.prefill_slope_stderr
    intercept, slope = fit.line(prefill=1000.0)
    assert abs(intercept - 9.0) < 0.5 and abs(slope - 0.05) < 0.01


def test_prefill_collinear_with_running_is_held_at_zero() -> None:
    rng = random.Random(2)
    fit = LeverFit(with_prefill=True)
    for _ in range(100):
        running = rng.uniform(1, 256)
        fit = fit.update([running, 30 * running], 5.0 + 0.2 * running + rng.gauss(0, 0.3))
    report = fit.confidence()
    assert report.prefill_slope == 0.0 and report.prefill_slope_stderr == math.inf
    assert abs(report.slope - 0.2) < 0.01


def test_stored_form_is_small_plain_json() -> None:
    fit = feed(LeverFit(), line_samples(random.Random(8), 50, 6.3, 0.153, 0.5))
    text = fit.model_dump_json()
    assert len(text) < 600
    values = json.loads(text).values()
    flat = [v for value in values for v in (value if isinstance(value, list) else [value])]
    assert all(isinstance(v, int | float | bool) and math.isfinite(v) for v in flat)
    again = LeverFit.model_validate_json(text)
    assert again == fit
    assert again.predict([100.0]) == fit.predict([100.0])


def test_an_empty_fit_predicts_nothing() -> None:
    fit = LeverFit()
    mean, stderr = fit.predict([10.0])
    assert math.isnan(mean) and math.isinf(stderr)
    assert fit.confidence().effective_samples == 0.0


def test_support_is_where_the_line_was_measured() -> None:
    """The largest batch taken in unclipped; a clipped sample does not extend it, its excess over the newest
    batch fades at λ, a new regime starts it afresh, and a stored fit without it loads (support 0)."""
    fit = feed(LeverFit(), [(b, 8.0 + 0.01 * (b % 3)) for b in [3.0, 21.0, 5.0, 9.0, 4.0] * 4])
    assert 19.0 < fit.support < 21.0  # 21 seen three samples ago, its excess over 4 fading
    flat = fit.support
    clipped = fit.update([63.0], 15.0)  # far off the flat line: clipped, not evidence at 63
    assert clipped.clipped == fit.clipped + 1 and clipped.support <= flat
    for _ in range(60):
        fit = fit.update([5.0], 8.0)
    assert 5.0 < fit.support < 8.0  # (19.7 - 5) x 0.97^60 ≈ 2.4 over the batch
    regime = feed(clipped, [(63.0, 15.0)] * 3)  # the fourth clip in a row: a new regime, kept whole
    assert regime.run == 0 and regime.support == 63.0
    legacy = json.loads(fit.model_dump_json())
    del legacy["support"]
    assert LeverFit.model_validate(legacy).support == 0.0
