#!/usr/bin/env bash
# The project's test command: set up, lint, type-check, then the whole suite (real vLLM, Prometheus, Kopf).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
bin=${GOVERNOR_VENV:-$root/.venv}/bin
"$bin/ruff" check .
"$bin/ruff" format --check .
"$bin/mypy"
exec "$bin/python" -m pytest "$@"
