"""Download, for Python 3.12 / manylinux x86-64, the wheels vLLM 0.26.0 needs that the GPU image lacks.

    python deps_closure.py OUT_DIR REQUIREMENT...

Walks Requires-Dist from the roots (one ``pip download --no-deps`` per package: the newest version that meets
the first specifier seen), skipping what the GPU image already has (KINDS.md's package list) and the heavy
optional kernels the calibration also left out. The first requirement for a name wins, so pins go first: give
``xgrammar==0.2.7`` as a root (0.2.9 does not load with the apache-tvm-ffi 0.1.10 that vLLM 0.26 pins).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGE = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect
urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()  # noqa: SIM905 - a word list, kept readable
EXCLUDE = """
flashinfer-python tilelang nvidia-cutlass-dsl quack-kernels tokenspeed-mla humming-kernels
pynvvideocodec torchcodec fastsafetensors nvidia-cudnn-frontend mistral-common pycountry anthropic
mcp cryptography sentry-sdk fastapi-cloud-cli numpy numba llvmlite setuptools grpcio
""".split()  # noqa: SIM905 - a word list, kept readable
SKIP = {canonicalize_name(name) for name in IMAGE + EXCLUDE}
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 17, 24, 26, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]


def download(requirement: Requirement, out: Path) -> Path | None:
    platform_args = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", *platform_args, "-d", str(out)]
    done = subprocess.run(
        [*command, f"{requirement.name}{requirement.specifier}"], capture_output=True, text=True
    )
    if done.returncode:
        print("FAILED", requirement, done.stderr[-400:])
        return None
    name = canonicalize_name(requirement.name)
    return next((p for p in out.glob("*.whl") if canonicalize_name(p.name.split("-")[0]) == name), None)


def needs(wheel: Path, extras: set[str]) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    found = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            sub = Requirement(line.split(":", 1)[1].strip())
            markers = ["", *sorted(extras)]
            if sub.marker is None or any(sub.marker.evaluate({**TARGET, "extra": e}) for e in markers):
                found.append(sub)
    return found


def main(out: Path, roots: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    got: dict[str, str] = {}
    queue = [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in SKIP or name in got:
            continue
        wheel = download(requirement, out)
        got[name] = wheel.name if wheel else "MISSING"
        if wheel is not None:
            print("got", wheel.name)
            queue.extend(needs(wheel, set(requirement.extras)))
    (out / "closure.json").write_text(json.dumps(got, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
