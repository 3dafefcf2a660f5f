"""Write (or check) every generated observability and chart file.

Helm cannot read files outside the chart, so the chart carries copies of crds/ and dashboards/; they, the
dashboards and the rules are all produced here from their one source. `--check` lists drift and exits 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from governor.observability import alerts, chart, dashboards

CHART = Path("charts/vllm-governor")
RULES_FILE = Path("alerts/vllm-governor.rules.yaml")


def find_root(start: Path | None = None) -> Path:
    """The repository root: the first directory upwards holding pyproject.toml and crds/."""
    here = (start or Path(__file__)).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file() and (candidate / "crds").is_dir():
            return candidate
    raise FileNotFoundError("no repository root (pyproject.toml + crds/) above " + str(here))


def generated_files(root: Path) -> dict[Path, str]:
    """Relative path -> content of every generated file."""
    files: dict[Path, str] = {}
    for name in dashboards.DASHBOARDS:
        text = dashboards.render(name)
        files[Path("dashboards") / name] = text
        files[CHART / "dashboards" / name] = text
    files[RULES_FILE] = alerts.rules_file()
    files[CHART / "templates" / "prometheusrule.yaml"] = alerts.helm_prometheusrule_template()
    files[CHART / "values.schema.json"] = chart.render_values_schema()
    for crd in sorted((root / "crds").glob("*.yaml")):
        files[CHART / "crds" / crd.name] = crd.read_text()
    return files


def stale_files(root: Path, files: Mapping[Path, str]) -> list[Path]:
    """Generated files that differ from the source, plus chart copies whose source is gone."""
    stale = [
        path
        for path, text in files.items()
        if not (root / path).is_file() or (root / path).read_text() != text
    ]
    for folder, pattern in ((CHART / "crds", "*.yaml"), (CHART / "dashboards", "*.json")):
        stale += [
            p.relative_to(root)
            for p in sorted((root / folder).glob(pattern))
            if p.relative_to(root) not in files
        ]
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m governor.observability", description=__doc__)
    parser.add_argument("command", choices=["generate"])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: found upwards)")
    args = parser.parse_args(argv)
    root = args.root or find_root()
    files = generated_files(root)
    stale = stale_files(root, files)
    if args.check:
        for path in stale:
            print(f"stale: {path} (run `python -m governor.observability generate`)")
        return 1 if stale else 0
    for path in stale:
        target = root / path
        if path in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[path])
            print(f"wrote {path}")
        else:
            target.unlink()
            print(f"removed {path}")
    return 0
