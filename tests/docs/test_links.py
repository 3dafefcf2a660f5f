"""Every relative link in the README and docs/ names a file that exists: the history moved out of the README
into docs/measurements.md, and a link left pointing at the old place would send a reader nowhere."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_targets(page: Path) -> list[str]:
    targets = [m.group(1).split("#", 1)[0] for m in LINK.finditer(page.read_text())]
    return [t for t in targets if t and "://" not in t and not t.startswith("mailto:")]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    missing = [t for t in _relative_targets(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_the_readme_links_its_measurement_log() -> None:
    assert "docs/measurements.md" in _relative_targets(ROOT / "README.md")
