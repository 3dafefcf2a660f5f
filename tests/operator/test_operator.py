"""The real Kopf operator (governor.handlers) against the emulated API (tests/support/kube.py).

The emulator has no garbage collector, no Deployment controller and ignores label selectors; see the
module docstring of tests/support/kube.py for what these tests do instead (collect_garbage, writing a
Deployment's status through /status, owner references asserted directly).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from governor.adapters import kube

from tests.support.fixtures_kube import DEPLOYMENTS, EVENTS, ISVC, PDBS, SECRETS, SERVICES, Cluster
from tests.support.kube import eventually

SPEC: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "resources": {"gpu": {"type": "H200"}},
    "slo": {"targetMs": 25},
}


def _arg(deployment: dict[str, Any], flag: str) -> str:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index(flag) + 1]


async def _created(cluster: Cluster, name: str = "llama", spec: dict[str, Any] | None = None) -> str:
    ns = cluster.namespace()
    await cluster.apply_isvc(ns, name, spec or SPEC)
    await eventually(
        lambda: (cluster.get(ISVC, ns, name) or {}).get("status", {}).get("observedGeneration"),
        what="first reconcile",
    )
    return ns


async def test_create_makes_children_with_the_right_specs(governor_cluster: Cluster) -> None:
    c = governor_cluster
    ns = await _created(c)
    isvc = c.must(ISVC, ns, "llama")
    deployment, service = c.must(DEPLOYMENTS, ns, "llama"), c.must(SERVICES, ns, "llama")
    pdb, secret = c.must(PDBS, ns, "llama-pdb"), c.must(SECRETS, ns, "llama-admin-token")
    assert _arg(deployment, "--max-num-seqs") == "256" and _arg(deployment, "--initial-cap") == "64"
    assert deployment["spec"]["replicas"] == 1
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert pdb["spec"]["maxUnavailable"] == 1
    assert kube.secret_value(secret, "token")
    for child in (deployment, service, pdb, secret):
        ref = child["metadata"]["ownerReferences"][0]
        assert (ref["uid"], ref["controller"], ref["kind"]) == (
            isvc["metadata"]["uid"],
            True,
            "InferenceService",
        )
    status = isvc["status"]
    assert (status["ceiling"], status["cap"], status["sloTargetMs"], status["mode"]) == (
        256,
        64,
        25,
        "starting",
    )
    assert (
        status["selector"] == "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=llama,"
        "governor.vllm.ai/inferenceservice=llama"
    )
    assert c.condition(ns, "llama", "Invalid")["status"] == "False"  # type: ignore[index]
    await eventually(lambda: {"ChildCreated"} <= {e["reason"] for e in c.events(ns, "llama")}, what="events")

    # The controller reports ready pods → Ready, readyReplicas and a Ready Event.
    await c.patch(
        DEPLOYMENTS,
        ns,
        "llama",
        {"status": {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}},
        subresource="status",
    )
    await eventually(
        lambda: c.condition(ns, "llama", "Ready")["status"] == "True",  # type: ignore[index]
        what="Ready",
    )
    assert c.must(ISVC, ns, "llama")["status"]["readyReplicas"] == 1
    await eventually(lambda: "Ready" in {e["reason"] for e in c.events(ns, "llama")}, what="Ready event")


async def test_spec_change_patches_the_deployment(governor_cluster: Cluster) -> None:
    c = governor_cluster
    ns = await _created(c)
    token = kube.secret_value(c.must(SECRETS, ns, "llama-admin-token"), "token")
    await c.patch(
        ISVC,
        ns,
        "llama",
        {"spec": {"replicas": 3, "engine": {"maxNumSeqs": 128}, "image": "example.org/runtime:2"}},
    )
    await eventually(lambda: c.must(DEPLOYMENTS, ns, "llama")["spec"]["replicas"] == 3, what="replicas")
    deployment = c.must(DEPLOYMENTS, ns, "llama")
    assert _arg(deployment, "--max-num-seqs") == "128"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "example.org/runtime:2"
    await eventually(
        lambda: c.must(ISVC, ns, "llama")["status"]["observedGeneration"] == 2, what="generation"
    )
    assert c.must(ISVC, ns, "llama")["status"]["ceiling"] == 128
    assert kube.secret_value(c.must(SECRETS, ns, "llama-admin-token"), "token") == token  # never rotated


async def test_deleted_or_edited_children_are_restored(governor_cluster: Cluster) -> None:
    c = governor_cluster
    ns = await _created(c)
    await c.delete(DEPLOYMENTS, ns, "llama")
    await eventually(lambda: c.get(DEPLOYMENTS, ns, "llama"), what="Deployment restored")
    await c.patch(SERVICES, ns, "llama", {"spec": {"ports": [{"name": "http", "port": 9999}]}})
    await eventually(lambda: c.must(SERVICES, ns, "llama")["spec"]["ports"][0]["port"] == 8000, what="revert")
    await c.patch(
        DEPLOYMENTS,
        ns,
        "llama",
        {
            "metadata": {
                "labels": {"governor.vllm.ai/inferenceservice": "llama", "app.kubernetes.io/name": "other"}
            }
        },
    )
    await eventually(
        lambda: c.must(DEPLOYMENTS, ns, "llama")["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm",
        what="labels repaired",
    )

    # A deleted admin token is generated anew and the pods roll onto it (the template hash changes).
    before = c.must(DEPLOYMENTS, ns, "llama")["spec"]["template"]["metadata"]["annotations"]
    await c.delete(SECRETS, ns, "llama-admin-token")
    await eventually(lambda: c.get(SECRETS, ns, "llama-admin-token"), what="Secret restored")
    await eventually(
        lambda: c.must(DEPLOYMENTS, ns, "llama")["spec"]["template"]["metadata"]["annotations"] != before,
        what="rollout onto the new token",
    )
    await eventually(
        lambda: {"ChildRestored", "DriftRepaired"} <= {e["reason"] for e in c.events(ns, "llama")},
        what="drift events",
    )


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"replicas": -1}, "spec.replicas: Input should be greater than or equal to 0"),
    ({"replicas": "two"}, "spec.replicas: Input should be a valid integer"),
    ({"model": ""}, "spec.model: must not be empty or start or end with whitespace"),
    ({"image": ""}, "spec.image: must not be empty or start or end with whitespace"),
    ({"modelSizeClass": "huge"}, "spec.modelSizeClass: Input should be 'small', 'medium' or 'large'"),
    ({"typo": 1}, "spec.typo: unknown field"),
    ({"engine": {"maxNumSeq": 8}}, "spec.engine.maxNumSeq: unknown field"),
    ({"engine": {"maxNumSeqs": 0}}, "spec.engine.maxNumSeqs: Input should be greater than or equal to 1"),
    ({"engine": {"gpuMemoryUtilization": 1.5}}, "spec.engine.gpuMemoryUtilization: Input should be less"),
    ({"engine": {"blockSize": 7}}, "spec.engine.blockSize: Input should be 1, 8, 16, 32, 64 or 128"),
    ({"engine": {"maxModelLen": 4}}, "spec.engine.maxModelLen: Input should be greater than or equal to 16"),
    ({"engine": {"extraArgs": ["--port", "9000"]}}, "engine.extraArgs must not set --port"),
    ({"engine": {"maxNumBatchedTokens": 64}}, "engine.maxNumBatchedTokens (64) must be at least the ceiling"),
    (
        {"engine": {"enableChunkedPrefill": False, "maxModelLen": 8192, "maxNumBatchedTokens": 4096}},
        "below engine.maxModelLen (8192) with chunked prefill off",
    ),
    ({"engine": {"tensorParallelSize": 2}}, "engine.tensorParallelSize (2) needs that many GPUs"),
    ({"resources": {"gpu": {"count": 0, "type": "H200"}}}, "resources.gpu.count is 0"),
    (
        {"resources": {"gpu": {"count": -1}}},
        "spec.resources.gpu.count: Input should be greater than or equal",
    ),
    ({"resources": {"memory": "lots"}}, "'lots' is not a Kubernetes quantity"),
    ({"resources": {"tolerations": [{"operator": "Exists", "value": "x"}]}}, "operator Exists must not have"),
    (
        {"resources": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}},
        "only applies to effect NoExecute",
    ),
    ({"slo": {"targetMs": -5}}, "spec.slo.targetMs: Input should be greater than 0"),
    ({"slo": {"targetMs": 20, "quantile": 0}}, "spec.slo.quantile: Input should be greater than 0"),
    ({"slo": {"targetMs": 20, "quantile": 1}}, "spec.slo.quantile: Input should be less than 1"),
    ({"slo": {"targetMs": 20, "kind": "p99"}}, "spec.slo.kind: Input should be 'tpot', 'interToken'"),
    ({"slo": {"quantile": 0.9}}, "spec.slo.targetMs: required field is missing"),
    (
        {"slo": None, "adaptive": {"enabled": True}},
        "spec.slo is missing: the governor needs a latency target",
    ),
    ({"adaptive": {"minCap": 50, "maxCap": 10}}, "adaptive.minCap (50) must not exceed adaptive.maxCap (10)"),
    ({"adaptive": {"maxCap": 1000}}, "adaptive.maxCap (1000) is above the default ceiling for H200"),
    ({"adaptive": {"initialCap": 500}}, "adaptive.initialCap (500) must lie in"),
    ({"adaptive": {"windowSeconds": 1, "tickSeconds": 5}}, "adaptive.windowSeconds (1) is shorter than"),
    ({"adaptive": {"decreaseFactor": 1.2}}, "spec.adaptive.decreaseFactor: Input should be less than 1"),
    ({"adaptive": {"increaseFactor": 0.9}}, "spec.adaptive.increaseFactor: Input should be greater than 1"),
    ({"adaptive": {"ewmaAlpha": 0}}, "spec.adaptive.ewmaAlpha: Input should be greater than 0"),
    ({"autoscaling": {"minReplicas": 4, "maxReplicas": 2}}, "autoscaling.minReplicas (4) must not exceed"),
    ({"autoscaling": {"mode": "hpa"}}, "spec.autoscaling.mode: Input should be 'planner' or 'external'"),
    ({"monitoring": {"interval": "soon"}}, "spec.monitoring.interval: String should match pattern"),
    (
        {"modelCache": {"pvcName": "cache", "sizeLimit": "10Gi"}},
        "modelCache.sizeLimit applies to the emptyDir",
    ),
]


async def test_invalid_specs_are_reported_without_crash_or_retry_storm(governor_cluster: Cluster) -> None:
    c = governor_cluster
    ns = c.namespace()
    assert len(INVALID) >= 30
    await c.apply_isvc(ns, "9-bad-name", SPEC)
    for index, (change, _) in enumerate(INVALID):
        await c.apply_isvc(ns, f"bad-{index}", SPEC | change)

    def all_reported() -> bool:
        warnings_by_name: dict[str, list[dict[str, Any]]] = {}
        for event in c.events(ns, None):
            if event["reason"] == "InvalidSpec":
                warnings_by_name.setdefault(event["involvedObject"]["name"], []).append(event)
        for index, (_, fragment) in enumerate(INVALID):
            condition = c.condition(ns, f"bad-{index}", "Invalid")
            assert condition is not None and condition["status"] == "True", f"bad-{index}"
            assert condition["reason"] == "InvalidSpec"
            assert fragment in condition["message"], (fragment, condition["message"])
            warnings = warnings_by_name.get(f"bad-{index}", [])
            assert warnings and warnings[0]["type"] == "Warning" and fragment in warnings[0]["message"]
        assert "must start with a letter" in c.condition(ns, "9-bad-name", "Invalid")["message"]  # type: ignore[index]
        return True

    started = time.monotonic()
    await eventually(all_reported, timeout=60, interval=0.5, what="every invalid spec reported")
    print(f"reported in {time.monotonic() - started:.1f}s")
    for index in range(len(INVALID)):
        assert c.get(DEPLOYMENTS, ns, f"bad-{index}") is None

    # No retry storm: once reported, the invalid objects see no further writes.
    def writes() -> int:
        return sum(
            1
            for r in list(c.emulator)
            if r.namespace == ns and r.method in ("PATCH", "POST") and r.resource != EVENTS
        )

    async def quiet() -> bool:
        before = writes()
        await asyncio.sleep(1.0)
        return writes() == before

    await eventually(quiet, timeout=20, what="writes to settle")
    settled = writes()
    await asyncio.sleep(2)
    assert writes() == settled
    assert settled <= 8 * (len(INVALID) + 1), "too many writes per invalid object"

    # The operator is alive: fixing a spec reconciles it and clears Invalid.
    await c.patch(ISVC, ns, "bad-0", {"spec": {"replicas": 2}})
    await eventually(lambda: c.get(DEPLOYMENTS, ns, "bad-0"), what="fixed spec reconciled")
    await eventually(
        lambda: c.condition(ns, "bad-0", "Invalid")["status"] == "False",  # type: ignore[index]
        what="Invalid cleared",
    )
    assert not governor_cluster.operator.done()


async def test_delete_releases_the_finalizer(governor_cluster: Cluster) -> None:
    c = governor_cluster
    ns = await _created(c)
    assert c.must(ISVC, ns, "llama")["metadata"]["finalizers"] == ["governor.vllm.ai/finalizer"]
    await c.delete(ISVC, ns, "llama")
    await eventually(lambda: c.get(ISVC, ns, "llama") is None, what="finalizer released, object gone")
    removed = await c.emulator.collect_garbage()  # what the API server's GC would do
    assert {(kind, name) for kind, n, name in removed if n == ns} >= {
        ("deployments", "llama"),
        ("services", "llama"),
        ("poddisruptionbudgets", "llama-pdb"),
        ("secrets", "llama-admin-token"),
    }
    await asyncio.sleep(0.5)
    assert c.get(DEPLOYMENTS, ns, "llama") is None  # the operator does not resurrect orphans
