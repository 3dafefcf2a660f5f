#!/usr/bin/env bash
# Build the two images a cluster needs, tagged for your registry, and print the settings that use them:
#   REGISTRY/vllm-governor-operator:TAG  operator/Dockerfile: `governor operator`, base dependencies only
#   REGISTRY/vllm-governor-runtime:TAG   runtime/Dockerfile: vLLM + the governor runtime plugins (GPU nodes)
# Steps for a cluster user: docs/images.md.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/build-images.sh [options] REGISTRY [TAG]

  REGISTRY   where the images go, e.g. registry.example.com/ml or ghcr.io/alice
  TAG        default: the project version (pyproject.toml, also the chart's appVersion) when the checkout
             is at the tag v<version> or not a git checkout, else <version>-g<commit>[-dirty]

options:
  --push               push both images after building them
  --dry-run            print the commands instead of running them
  --only NAME          build only `operator` or only `runtime` (the runtime pulls the multi-GB vLLM image)
  --vllm-image IMAGE   base of the runtime image (runtime/Dockerfile's VLLM_IMAGE)
  --python-image IMAGE base of the operator image (operator/Dockerfile's PYTHON_IMAGE), e.g. pinned by digest
  -h, --help           this text

Uses docker, else podman; CONTAINER_TOOL=... picks another compatible one.
EOF
}

die() { echo "build-images: $*" >&2; exit 2; }

push=false dry_run=false only="" vllm_image="" python_image=""
positional=()
while (($#)); do
  case $1 in
    --push) push=true ;;
    --dry-run) dry_run=true ;;
    --only) only=${2:-}; shift ;;
    --vllm-image) vllm_image=${2:-}; [ -n "$vllm_image" ] || die "--vllm-image needs a value"; shift ;;
    --python-image) python_image=${2:-}; [ -n "$python_image" ] || die "--python-image needs a value"; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; positional+=("$@"); break ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) positional+=("$1") ;;
  esac
  shift
done
case $only in "" | operator | runtime) ;; *) die "--only takes operator or runtime, not '$only'" ;; esac
((${#positional[@]} >= 1 && ${#positional[@]} <= 2)) || { usage >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

registry=${positional[0]%/}
# Docker's reference grammar, simplified: lowercase host[:port]/path components.
[[ $registry =~ ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$ ]] \
  || die "'${positional[0]}' is not a registry (e.g. registry.example.com/ml, lowercase, no tag)"

default_tag() {
  local version described
  version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' pyproject.toml | head -n 1)
  [ -n "$version" ] || die "no version in pyproject.toml; pass TAG"
  # GIT_OPTIONAL_LOCKS=0: --dirty must not refresh the index of a checkout others may be using.
  if ! described=$(GIT_OPTIONAL_LOCKS=0 git describe --tags --always --dirty 2>/dev/null); then
    echo "$version"  # not a git checkout (e.g. a source archive)
  elif [ "$described" = "v$version" ] || [ "$described" = "$version" ]; then
    echo "$version"
  else
    # A build between releases must not reuse the release's tag (the chart pulls IfNotPresent).
    local dirty=""
    [[ $described != *-dirty ]] || dirty=-dirty
    echo "$version-g$(git rev-parse --short HEAD)$dirty"
  fi
}
tag=${positional[1]:-$(default_tag)}
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$tag' is not a valid image tag"

tool=${CONTAINER_TOOL:-}
if [ -z "$tool" ]; then
  for candidate in docker podman; do
    if command -v "$candidate" >/dev/null; then tool=$candidate; break; fi
  done
fi
if [ -z "$tool" ]; then
  $dry_run || die "neither docker nor podman found (or set CONTAINER_TOOL)"
  tool=docker
fi

run() {
  if $dry_run; then
    printf '%q' "$1"; shift
    printf ' %q' "$@"
    printf '\n'
  else
    echo "+ $*" >&2
    "$@"
  fi
}

operator_repo=$registry/vllm-governor-operator
runtime_repo=$registry/vllm-governor-runtime
built=()
if [ "$only" != runtime ]; then
  args=(build -f operator/Dockerfile -t "$operator_repo:$tag")
  [ -z "$python_image" ] || args+=(--build-arg "PYTHON_IMAGE=$python_image")
  run "$tool" "${args[@]}" .
  built+=("$operator_repo:$tag")
fi
if [ "$only" != operator ]; then
  args=(build -f runtime/Dockerfile -t "$runtime_repo:$tag")
  [ -z "$vllm_image" ] || args+=(--build-arg "VLLM_IMAGE=$vllm_image")
  run "$tool" "${args[@]}" .
  built+=("$runtime_repo:$tag")
fi
if $push; then
  for ref in "${built[@]}"; do run "$tool" push "$ref"; done
fi

if $dry_run; then pushed="dry run: nothing built"
elif $push; then pushed="built and pushed"
else pushed="built, not pushed: run again with --push, or $tool push each"
fi
cat <<EOF

Images ($pushed):
$(printf '  %s\n' "${built[@]}")

Install the operator with its image:
  helm install governor charts/vllm-governor -n governor-system --create-namespace \\
    --set image.repository=$operator_repo \\
    --set image.tag=$tag

Engine image: the chart has no value for it; each InferenceService names it in spec.image:
  spec:
    image: $runtime_repo:$tag
EOF
