#!/usr/bin/env bash
# The main job: set up, then `governor demo` (a real vLLM CPU engine governed live; PNG under out/demo/).
# Extra arguments go to the demo, e.g. `scripts/demo.sh --short` or `scripts/demo.sh --twin`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
exec "${GOVERNOR_VENV:-$root/.venv}/bin/governor" demo "$@"
