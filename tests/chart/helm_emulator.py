"""Lint the chart and install it into the kmock Kubernetes emulator with the real Helm library (helm-sdkpy).

Run as a separate process (`HELM_DRIVER=memory python -m tests.chart.helm_emulator CHART VALUES_JSON`): Helm's
Go runtime takes its environment from the process start, and keeping it out of the pytest process keeps its
threads and signals apart.
Prints one JSON object: {"lint": ..., "manifest": ..., "objects": [every object the API received]}.

Two adjustments make the emulator speak enough Kubernetes for Helm, both visible here:
- HELM_DRIVER=memory: Helm stores releases in Secrets encoded as protobuf, which the emulator cannot parse;
- kmock 0.8 answers /api/v1 discovery with groupVersion "/v1", which client-go cannot map: served as "v1".
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any

import helm_sdkpy
import kmock
import yaml

# Custom resources the chart creates: declared so discovery serves them, as a cluster with the CRDs would.
CUSTOM_RESOURCES = {
    "governor.vllm.ai/v1alpha1/inferenceservices": "InferenceService",
    "monitoring.coreos.com/v1/servicemonitors": "ServiceMonitor",
    "monitoring.coreos.com/v1/podmonitors": "PodMonitor",
    "monitoring.coreos.com/v1/prometheusrules": "PrometheusRule",
}


def _kubeconfig(url: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": url}}],
            "users": [{"name": "tester", "user": {"token": "unused"}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
            "current-context": "emulator",
        }
    )


async def install(chart: str, values: dict[str, Any], namespace: str) -> dict[str, Any]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as server:
        api.resources.load_bundled()
        for path, kind in CUSTOM_RESOURCES.items():
            api.resources[path] = kmock.ResourceInfo(
                kind=kind,
                namespaced=True,
                verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
            )

        async def core_v1(request: kmock.Request) -> Any:
            listing: dict[str, Any] = dict(await api._serve_version(request))  # type: ignore[arg-type]
            listing["groupVersion"] = "v1"
            return listing

        api["get", re.compile(r"^/api/v1$")] << core_v1
        config = helm_sdkpy.Configuration(
            namespace=namespace, kubeconfig=_kubeconfig(str(server.url).rstrip("/"))
        )
        lint = await helm_sdkpy.Lint(config).run(chart)
        release = await helm_sdkpy.Install(config).run(
            "governor", chart, values=values or None, wait=False, timeout=60, create_namespace=False
        )
        objects = [request.data for request in api if request.method == kmock.method.POST]
        return {"lint": lint, "manifest": release.get("manifest", ""), "objects": objects}


def main() -> int:
    if os.environ.get("HELM_DRIVER") != "memory":
        print(json.dumps({"error": "start with HELM_DRIVER=memory (see the module docstring)"}))
        return 2
    chart, values = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    try:
        result = asyncio.run(install(chart, values, namespace="governor-system"))
    except helm_sdkpy.HelmError as error:
        print(json.dumps({"error": str(error)}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
