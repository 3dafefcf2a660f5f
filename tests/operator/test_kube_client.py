"""The API adapter as a client object (governor.adapters.kube.Kube) against the emulated API: each client
holds its own connection, the operator's comes from its login handler, no state in the module."""

from __future__ import annotations

import pytest
from governor.adapters.kube import Connection, Kube

from tests.support.fixtures_kube import Cluster
from tests.support.kube import Emulator

NAMESPACE = "kube-client"


def _secret(name: str, token: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "test"}},
            "stringData": {"token": token}}


async def test_an_unconnected_client_refuses_and_the_table_still_binds() -> None:
    client = Kube()
    assert not client.connected
    with pytest.raises(RuntimeError, match="not connected"):
        await client.get("v1", "Secret", NAMESPACE, "x")
    with pytest.raises(PermissionError, match="delete"):  # checked before any connection is needed
        await client._request("delete", "v1", "secrets", NAMESPACE, "x")


async def test_clients_are_independent_and_closing_one_leaves_the_other(kube_emulator: Emulator) -> None:
    connection = Connection(server=str(kube_emulator.url))
    async with Kube(connection) as first:
        second = Kube(connection)
        outcome = await first.ensure(_secret("independent", "abc"))
        assert outcome.action in ("created", "unchanged")
        await second.aclose()
        assert not second.connected and first.connected
        with pytest.raises(RuntimeError):
            await second.get("v1", "Secret", NAMESPACE, "independent")
        assert (await first.get("v1", "Secret", NAMESPACE, "independent")) is not None
    assert not first.connected  # ``async with`` closed it


async def test_connect_keeps_the_client_for_the_same_credentials_and_swaps_it_for_new_ones(
    kube_emulator: Emulator,
) -> None:
    connection = Connection(server=str(kube_emulator.url))
    async with Kube() as client:
        await client.connect(connection)
        opened = client._client
        await client.connect(Connection(server=str(kube_emulator.url)))  # a re-login, same credentials
        assert client._client is opened
        await client.connect(Connection(server=str(kube_emulator.url), token="rotated"))
        assert client._client is not opened and opened is not None and opened.is_closed
        assert client.connection is not None and client.connection.token == "rotated"
        assert await client.get("v1", "Secret", NAMESPACE, "missing") is None


def test_the_connection_does_not_print_its_credentials() -> None:
    shown = repr(Connection(server="https://k8s", token="s3cret-token", key_data="PRIVATE"))
    assert "https://k8s" in shown and "s3cret-token" not in shown and "PRIVATE" not in shown


async def test_the_operator_login_connects_the_client_in_its_memo(governor_cluster: Cluster) -> None:
    operator_client = governor_cluster.kube
    assert operator_client.connected
    assert operator_client.connection == Connection(server=str(governor_cluster.emulator.url))
