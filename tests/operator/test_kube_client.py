"""The API adapter as a client object (governor.adapters.kube.Kube) against the emulated API: each client
holds its own connection, the operator's comes from its login handler, no state in the module; and how it
meets a faulty API server (500s retried, transport errors as ``Unreachable``, a spurious 409 on create)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest
import pytest_asyncio
from governor.adapters.kube import ATTEMPTS, Conflict, Connection, Kube, KubeError, Unreachable

from tests.support.engine import free_port
from tests.support.fixtures_kube import Cluster
from tests.support.kube import Emulator
from tests.support.kube_faults import ALL, Fault, FaultyEmulator, events_of

NAMESPACE = "kube-client"


def _secret(name: str, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "test"}},
        "stringData": {"token": token},
    }


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


# --- faults (served by the emulator of tests/support/kube_faults.py)


@pytest_asyncio.fixture
async def faulty() -> AsyncIterator[FaultyEmulator]:
    from governor import crd

    async with FaultyEmulator() as emulator, kmock.Server(emulator):
        emulator.resources.load_bundled()
        emulator.register_crd(crd.build_crd())
        yield emulator


def _fast(emulator: FaultyEmulator, **options: float) -> Kube:
    return Kube(Connection(server=str(emulator.url), **options), backoff_s=0.01)  # type: ignore[arg-type]


async def test_reads_and_writes_are_retried_through_500s(faulty: FaultyEmulator) -> None:
    async with _fast(faulty) as client:
        fault = faulty.inject(Fault(effect="error", on=ALL, every=2))  # each 2nd request answers 500
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "retried", "namespace": NAMESPACE, "labels": {"app": "test"}},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        }
        assert (await client.ensure(service)).action == "created"
        assert (await client.ensure(service)).action == "unchanged"
        patched = await client.merge_patch(
            "v1", "Service", NAMESPACE, "retried", {"metadata": {"labels": {"app": "other"}}}
        )
        assert patched["metadata"]["labels"]["app"] == "other"
        assert fault.injected >= 3  # the 500s were served, and each was retried
        assert len(events_of(faulty, "create")) == 2  # the create answered 500, then its retry
        services = [
            key
            for key, obj in faulty.objects.items()
            if key[1:] == (NAMESPACE, "retried") and not obj.deleted
        ]
        assert len(services) == 1


async def test_a_persistent_500_is_raised_as_a_kube_error_after_the_attempts(faulty: FaultyEmulator) -> None:
    async with Kube(Connection(server=str(faulty.url)), attempts=3, backoff_s=0.01) as client:
        fault = faulty.inject(Fault(effect="error", on=ALL))
        with pytest.raises(KubeError) as raised:
            await client.get("v1", "Secret", NAMESPACE, "anything")
        assert raised.value.status == 500
        assert fault.injected == 3


async def test_a_request_that_times_out_raises_unreachable_a_kube_error(faulty: FaultyEmulator) -> None:
    async with _fast(faulty, timeout_s=0.2) as client:
        fault = faulty.inject(Fault(effect="hang", on=ALL, seconds=1.0))
        with pytest.raises(Unreachable) as raised:
            await client.get("v1", "Secret", NAMESPACE, "anything")
        assert isinstance(raised.value, KubeError) and "Timeout" in raised.value.message
        assert fault.injected == ATTEMPTS  # every attempt was tried before giving up


async def test_a_hang_shorter_than_the_timeout_is_waited_for_and_then_retried(faulty: FaultyEmulator) -> None:
    async with _fast(faulty, timeout_s=0.3) as client:
        faulty.inject(Fault(effect="hang", on=ALL, seconds=1.0, times=2))  # two lost answers, then normal
        assert await client.get("v1", "Secret", NAMESPACE, "missing") is None


async def test_a_refused_connection_raises_unreachable() -> None:
    async with Kube(Connection(server=f"http://127.0.0.1:{free_port()}"), backoff_s=0.01) as client:
        with pytest.raises(Unreachable):
            await client.get("v1", "Secret", NAMESPACE, "anything")
        with pytest.raises(Unreachable):
            await client.has_api_group("monitoring.coreos.com")


async def test_a_409_is_not_retried_blindly_but_a_spurious_one_on_create_is(faulty: FaultyEmulator) -> None:
    async with _fast(faulty) as client:
        fault = faulty.inject(Fault(effect="conflict", on={"create"}, times=1))
        assert (await client.ensure(_secret("conflicted", "abc"))).action == "created"
        assert fault.injected == 1
        faulty.inject(Fault(effect="conflict", on={"patch"}))
        with pytest.raises(Conflict):
            await client.merge_patch(
                "v1", "Secret", NAMESPACE, "conflicted", {"metadata": {"labels": {"a": "b"}}}
            )


def test_the_default_timeout_is_short() -> None:
    assert Connection(server="http://k8s").timeout_s <= 10.0
