"""Make this checkout importable as the ``vllm-governor`` distribution on a machine without network or tools.

vLLM finds its plugins through entry points, so a plain PYTHONPATH is not enough: this writes a minimal
``vllm_governor-<version>.dist-info`` (METADATA + entry_points.txt read from pyproject.toml) into SITE, and
copies the three packages beside it. Then ``PYTHONPATH=SITE`` gives ``import governor_runtime`` and
``importlib.metadata.entry_points(group="vllm.general_plugins")`` finds ``governor_limits``.

Usage: python3 install_project.py REPO_ROOT SITE
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

PACKAGES = ("runtime/governor_runtime", "operator/governor", "twin/governor_twin", "dev/governor_dev")


def install(repo: Path, site: Path) -> Path:
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    site.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        source = repo / package
        if source.is_dir():
            target = site / source.name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    shutil.rmtree(info, ignore_errors=True)
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines: list[str] = []
    groups = dict(project.get("entry-points", {}))
    if "scripts" in project:
        groups["console_scripts"] = project["scripts"]
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines.extend(f"{key} = {value}" for key, value in entries.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    (info / "INSTALLER").write_text("install_project.py\n")
    return info


if __name__ == "__main__":
    written = install(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"installed: {written}")
    print((written / "entry_points.txt").read_text())
