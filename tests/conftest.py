"""Shared test set-up. Fixture modules live in tests/support/fixtures_*.py and are loaded here, so each
part of the suite (engine, Prometheus, Kubernetes emulator) keeps its fixtures beside its support code."""

from pathlib import Path

pytest_plugins = sorted(
    f"tests.support.{path.stem}" for path in (Path(__file__).parent / "support").glob("fixtures_*.py")
)

# CI (CI=true) draws the same examples on every run, as Hypothesis recommends for CI: a red build then means a
# change, not a new random draw. Locally the draws stay random, to keep finding new cases.
import os  # noqa: E402

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")
