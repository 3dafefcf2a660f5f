"""The engines' admin token never leaves its Secret: not in the operator's logs, Events, status, or any other
object it writes (the real Kopf operator against the API emulator, tests/support/fixtures_kube.py)."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from governor.adapters import kube

from tests.support.fixtures_kube import DEPLOYMENTS, ISVC, SECRETS, Cluster
from tests.support.kube import eventually

SPEC = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "resources": {"gpu": {"type": "H200"}},
    "slo": {"targetMs": 25},
}


async def test_the_admin_token_appears_only_in_its_secret(
    governor_cluster: Cluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    c = governor_cluster
    ns = c.namespace()
    await c.apply_isvc(ns, "leak", SPEC)
    await eventually(
        lambda: (c.get(ISVC, ns, "leak") or {}).get("status", {}).get("observedGeneration"),
        what="first reconcile",
    )
    token = kube.secret_value(c.must(SECRETS, ns, "leak-admin-token"), "token")
    assert token and len(token) >= 32
    # Exercise the other writers: drift repair, a spec change, an invalid spec.
    await c.delete(DEPLOYMENTS, ns, "leak")
    await eventually(lambda: c.get(DEPLOYMENTS, ns, "leak"), what="Deployment restored")
    await c.patch(ISVC, ns, "leak", {"spec": {"replicas": 2}})
    await eventually(
        lambda: (c.get(DEPLOYMENTS, ns, "leak") or {}).get("spec", {}).get("replicas") == 2,
        what="replicas patched",
    )
    await c.patch(ISVC, ns, "leak", {"spec": {"engine": {"extraArgs": ["--max_num_seqs=8"]}}})
    await eventually(
        lambda: (c.condition(ns, "leak", "Invalid") or {}).get("status") == "True", what="Invalid reported"
    )

    forms = {token, base64.b64encode(token.encode()).decode()}
    written = [r for r in list(c.emulator) if r.namespace == ns and r.method in ("POST", "PATCH", "PUT")]
    assert len(written) >= 5

    def body(request: object) -> str:
        return str(getattr(request, "text", "") or json.dumps(getattr(request, "data", None)))

    # The grep sees request bodies: the Secret's own creation carries the token.
    assert any(any(f in body(r) for f in forms) for r in written if r.resource == SECRETS)
    for request in written:
        if request.resource != SECRETS:
            assert not any(f in body(request) for f in forms), f"token in {request.method} {request.url}"
    for event in c.events(ns, None):
        assert not any(f in json.dumps(event) for f in forms), event["reason"]
    status = json.dumps(c.must(ISVC, ns, "leak").get("status"))
    assert not any(f in status for f in forms)
    deployment = json.dumps(c.must(DEPLOYMENTS, ns, "leak"))
    assert token not in deployment and "GOVERNOR_ADMIN_TOKEN_FILE" in deployment
    assert caplog.records, "the operator logged nothing: the capture is not seeing its logs"
    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert not any(f in logged for f in forms)
