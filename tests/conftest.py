"""Shared test set-up. Fixture modules live in tests/support/fixtures_*.py and are loaded here, so each
part of the suite (engine, Prometheus, Kubernetes emulator) keeps its fixtures beside its support code."""

from pathlib import Path

pytest_plugins = sorted(
    f"tests.support.{path.stem}" for path in (Path(__file__).parent / "support").glob("fixtures_*.py")
)
