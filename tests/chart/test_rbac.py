"""Least privilege: the chart's ClusterRole grants exactly what the code uses.

What the code uses is derived, not listed by hand:
- governor.adapters.kube.PERMISSIONS: every request the operator's API adapter makes is checked against
  this table (the adapter refuses anything else), so it is the adapter's complete set of (resource, verb);
- Kopf's handler registry after importing governor.handlers: every resource with a handler is listed and
  watched; resources with change handlers are patched (finalizers, progress annotations); Kopf posts Events
  and watches CRDs to discover resources, and lists namespaces when it does not watch cluster-wide.
"""

from __future__ import annotations

from typing import Any

import governor.handlers  # noqa: F401  (registers the handlers)
import kopf
import pytest
from governor.adapters import kube

from tests.chart.helm import install

Grant = tuple[str, str, str]  # (api group, resource, verb)


def _plural(selector: Any) -> str:
    name = selector.plural or selector.any_name
    return str(kube.PLURALS.get(name, name))


def kopf_grants(*, clusterwide: bool) -> set[Grant]:
    registry = kopf.get_default_registry()
    crds = ("apiextensions.k8s.io", "customresourcedefinitions")
    grants: set[Grant] = {("", "events", "create"), (*crds, "list"), (*crds, "watch")}
    if not clusterwide:
        grants |= {("", "namespaces", "list"), ("", "namespaces", "watch")}
    for handlers, verbs in (
        (registry._changing.get_all_handlers(), ("list", "watch", "patch")),
        (registry._watching.get_all_handlers(), ("list", "watch")),
        (registry._spawning.get_all_handlers(), ("list", "watch", "patch")),
        (registry._indexing.get_all_handlers(), ("list", "watch")),
    ):
        for handler in handlers:
            assert handler.selector is not None
            grants |= {(handler.selector.group or "", _plural(handler.selector), verb) for verb in verbs}
    return grants


def code_grants(*, clusterwide: bool) -> set[Grant]:
    adapter = {
        (group, resource, verb) for (group, resource), verbs in kube.PERMISSIONS.items() for verb in verbs
    }
    return adapter | kopf_grants(clusterwide=clusterwide)


def chart_grants(values: dict[str, Any]) -> set[Grant]:
    role = install(values).one("ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize(("values", "clusterwide"), [({}, True), ({"watchNamespaces": ["ai"]}, False)])
def test_clusterrole_grants_exactly_what_the_code_uses(values: dict[str, Any], clusterwide: bool) -> None:
    granted, used = chart_grants(values), code_grants(clusterwide=clusterwide)
    assert granted - used == set(), "granted but unused"
    assert used - granted == set(), "used but not granted"


def test_no_wildcards_and_bound_to_the_operator_account() -> None:
    release = install()
    for rule in release.one("ClusterRole")["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    binding = release.one("ClusterRoleBinding")
    account = release.one("ServiceAccount")["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": "governor-system"}
    assert binding["subjects"] == [subject]
    assert release.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == account
