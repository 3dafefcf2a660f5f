#!/usr/bin/env bash
# Run the operator against the cluster of the current kubeconfig (or in-cluster credentials).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
exec "${GOVERNOR_VENV:-$root/.venv}/bin/governor" operator "$@"
