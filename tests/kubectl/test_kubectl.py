"""A user's session with the real ``kubectl`` binary against the real operator (governor_cluster: unmodified
Kopf in-process) and the API emulator (tests/support/kube.py), through a generated kubeconfig only.

The emulator runs here as a faithful server: CRD schema validation and background garbage collection are on
for this module (tests/operator feeds the operator specs a real server would refuse, so they are off there).
Nothing here writes to the API except kubectl; where the cluster would have a Deployment controller, kubectl
writes the Deployment's status through ``--subresource=status``, as the controller would.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.fixtures_kube import Cluster
from tests.support.kube import eventually
from tests.support.kubectl import KUBECTL, Kubectl, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
README_COLUMNS = ["NAME", "READY", "REPLICAS", "CAP", "P99", "SLO", "MODE", "AGE"]
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def faithful(governor_cluster: Cluster) -> Iterator[Cluster]:
    emulator = governor_cluster.emulator
    emulator.validate_schemas = emulator.garbage_collection = True
    yield governor_cluster
    emulator.validate_schemas = emulator.garbage_collection = False


@pytest_asyncio.fixture
async def kubectl(faithful: Cluster, tmp_path: Path) -> AsyncIterator[tuple[Kubectl, str]]:
    """kubectl with a kubeconfig whose default namespace is fresh for each test."""
    namespace = faithful.namespace()
    config = write_kubeconfig(tmp_path / "kubeconfig", str(faithful.emulator.url).rstrip("/"), namespace)
    yield Kubectl(config, tmp_path / "cache"), namespace


def table(text: str) -> list[list[str]]:
    """kubectl's columns, cut where the header's columns start (an empty cell stays an empty string)."""
    header, *lines = text.rstrip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [header.split()] + [[line[a:b].strip() for a, b in bounds] for line in lines]


async def status(k: Kubectl, name: str, *args: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(await k("get", "gisvc", name, "-o", "json", *args))
    return obj.get("status") or {}


async def test_the_readme_session(kubectl: tuple[Kubectl, str]) -> None:
    k, _ = kubectl
    assert "created" in await k("apply", "-f", str(EXAMPLES / "minimal.yaml"))
    await eventually(lambda: _reconciled(k, "llama-8b"), what="first reconcile", timeout=20)

    # kubectl get: the README's columns, filled from status and spec.
    rows = table(await k("get", "gisvc"))
    assert rows[0] == README_COLUMNS
    name, ready, _, cap, _, slo, mode, age = rows[1]
    assert (name, ready, cap, slo, mode) == ("llama-8b", "False", "64", "25", "starting")
    assert re.fullmatch(r"\d+s", age), age
    assert table(await k("get", "governor"))[1][0] == "llama-8b"  # the category
    assert table(await k("get", "inferenceservices.governor.vllm.ai"))[1][0] == "llama-8b"

    # The Deployment controller's report (kubectl writes the status subresource) turns READY True.
    ready_status = '{"status":{"replicas":1,"readyReplicas":1,"updatedReplicas":1,"observedGeneration":1}}'
    await k("patch", "deployment", "llama-8b", "--subresource=status", "--type=merge", "-p", ready_status)

    async def ready_row() -> bool:
        row = table(await k("get", "gisvc", "llama-8b"))[1]
        return row[1:3] == ["True", "1"]

    await eventually(ready_row, what="READY True, REPLICAS 1", timeout=20)

    # kubectl describe: the conditions and the operator's Events.
    described = await k("describe", "gisvc", "llama-8b")
    for text in ("Conditions:", "Type:", "Ready", "Invalid", "Events:", "ChildCreated"):
        assert text in described, text

    # kubectl scale, through the scale subresource: the operator follows with the Deployment.
    assert "scaled" in await k("scale", "gisvc/llama-8b", "--replicas=3")
    await eventually(
        lambda: _jsonpath(k, "deployment", "llama-8b", "{.spec.replicas}", "3"), what="Deployment at 3"
    )

    # A changed manifest, applied: the SLO column and status follow (client-side apply, merge patch).
    changed = (EXAMPLES / "minimal.yaml").read_text().replace("targetMs: 25", "targetMs: 30")
    assert "configured" in await k("apply", "-f", "-", stdin=changed)
    await eventually(lambda: _slo(k, "llama-8b", 30), what="SLO 30 in status")
    assert table(await k("get", "gisvc", "llama-8b"))[1][5] == "30"

    # kubectl edit, with a sed script as the editor; then kubectl patch.
    assert "edited" in await k(
        "edit", "gisvc", "llama-8b", env={"KUBE_EDITOR": "sed -i s/targetMs:.30/targetMs:\\ 40/"}
    )
    await eventually(lambda: _slo(k, "llama-8b", 40), what="SLO 40 after edit")
    await k("patch", "gisvc", "llama-8b", "--type=merge", "-p", '{"spec":{"engine":{"maxNumSeqs":128}}}')
    await eventually(lambda: _ceiling(k, "llama-8b", 128), what="ceiling 128 after patch")
    assert (await status(k, "llama-8b"))["observedGeneration"] == 5  # apply, scale, apply, edit, patch

    # kubectl delete waits for the finalizer; the children go with their owner.
    assert "deleted" in await k("delete", "gisvc", "llama-8b", "--timeout=20s")
    gone = await k.run("get", "gisvc", "llama-8b")
    assert gone.rc == 1 and 'inferenceservices.governor.vllm.ai "llama-8b" not found' in gone.err
    leftovers = await k("get", "deployments,services,poddisruptionbudgets,secrets", "-o", "name")
    assert leftovers.strip() == ""


async def test_the_full_example_is_accepted(kubectl: tuple[Kubectl, str]) -> None:
    k, ns = kubectl
    manifest = (EXAMPLES / "full.yaml").read_text().replace("namespace: inference", f"namespace: {ns}")
    await k("apply", "-f", "-", stdin=manifest)
    await eventually(lambda: _reconciled(k, "llama-8b-prod"), what="first reconcile", timeout=20)
    conditions = {c["type"]: c["status"] for c in (await status(k, "llama-8b-prod"))["conditions"]}
    assert conditions["Invalid"] == "False"
    children = await k("get", "deployments,services,poddisruptionbudgets,secrets", "-o", "name")
    assert set(children.split()) >= {
        "deployment.apps/llama-8b-prod",
        "service/llama-8b-prod",
        "poddisruptionbudget.policy/llama-8b-prod-pdb",
        "secret/llama-8b-prod-admin-token",
    }
    assert await k("get", "deployment", "llama-8b-prod", "-o", "jsonpath={.spec.replicas}") == "2"
    # Applying the same file again changes nothing.
    assert "unchanged" in await k("apply", "-f", "-", stdin=manifest)
    # Server-side apply of the same object is accepted too, and a field it drops is removed.
    server_side = manifest.replace('    extraArgs: ["--disable-uvicorn-access-log"]\n', "")
    await k("apply", "--server-side", "--field-manager=ci", "-f", "-", stdin=manifest)
    await k("apply", "--server-side", "--field-manager=ci", "-f", "-", stdin=server_side)
    engine = json.loads(await k("get", "gisvc", "llama-8b-prod", "-o", "jsonpath={.spec.engine}"))
    assert "extraArgs" not in engine and engine["maxNumSeqs"] == 256


BAD_MANIFEST = """apiVersion: governor.vllm.ai/v1alpha1
kind: InferenceService
metadata:
  name: {name}
spec:
  model: meta-llama/Llama-3.1-8B-Instruct
  slo: {{targetMs: 25}}
{extra}"""


async def test_bad_manifests_are_refused_or_reported(kubectl: tuple[Kubectl, str]) -> None:
    k, _ = kubectl
    # The CRD schema refuses it: kubectl says what is wrong and nothing is stored.
    out = await k.run("apply", "-f", "-", stdin=BAD_MANIFEST.format(name="neg", extra="  replicas: -1\n"))
    assert out.rc == 1
    assert 'The InferenceService "neg" is invalid' in out.err
    assert (
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        in out.err
    )
    typo = await k.run("apply", "-f", "-", stdin=BAD_MANIFEST.format(name="typo", extra="  replica: 2\n"))
    assert typo.rc == 1 and 'strict decoding error: unknown field "spec.replica"' in typo.err
    kind = await k.run(
        "apply", "-f", "-", stdin=BAD_MANIFEST.format(name="kind", extra="  autoscaling: {mode: hpa}\n")
    )
    assert kind.rc == 1 and 'spec.autoscaling.mode: Unsupported value: "hpa"' in kind.err
    assert (await k("get", "gisvc", "-o", "name")).strip() == ""

    # Valid for the schema, invalid for the operator (a cross-field rule): an Invalid condition and a Warning
    # Event, both visible in kubectl describe.
    crossed = "  adaptive: {minCap: 50, maxCap: 10}\n"
    await k("apply", "-f", "-", stdin=BAD_MANIFEST.format(name="crossed", extra=crossed))

    async def reported() -> bool:
        described = await k("describe", "gisvc", "crossed")
        return "InvalidSpec" in described and "Warning" in described and "must not exceed" in described

    await eventually(reported, what="Invalid condition and Warning Event", timeout=20)
    assert (await k("get", "deployments", "-o", "name")).strip() == ""


async def _reconciled(k: Kubectl, name: str) -> bool:
    return bool((await status(k, name)).get("observedGeneration"))


async def _jsonpath(k: Kubectl, kind: str, name: str, path: str, wanted: str) -> bool:
    return await k("get", kind, name, "-o", f"jsonpath={path}") == wanted


async def _slo(k: Kubectl, name: str, target: float) -> bool:
    return bool((await status(k, name)).get("sloTargetMs") == target)


async def _ceiling(k: Kubectl, name: str, ceiling: int) -> bool:
    return bool((await status(k, name)).get("ceiling") == ceiling)
