"""Where the Kubernetes API server is and how to authenticate to it: the connection the adapter
(governor.adapters.kube) opens its HTTP client with, built from the credentials Kopf logs in with.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

# Requests in flight to the API server at once (the adapter queues the rest, FIFO, before httpx sees them):
# httpcore's pool re-scans every queued request against every connection on each state change, so with
# hundreds of objects reconciling at once the operator spent most of its CPU there (py-spy, N=300). A short
# pool queue keeps that scan small (and each scan checks every open connection with a syscall); 16 requests
# in flight carry hundreds a second at API latencies of tens of milliseconds.
MAX_IN_FLIGHT = 16


@dataclass(frozen=True)
class Connection:
    """Where the API server is and how to authenticate (the fields of Kopf's ConnectionInfo we use)."""

    server: str
    token: str | None = field(default=None, repr=False)
    insecure: bool = False
    ca_path: str | None = None
    ca_data: str | bytes | None = field(default=None, repr=False)
    cert_path: str | None = None
    cert_data: str | bytes | None = field(default=None, repr=False)
    key_path: str | None = None
    key_data: str | bytes | None = field(default=None, repr=False)
    # Well under Kopf's request timeout (20 s): a hung request fails, is retried, and a tick is not lost.
    timeout_s: float = 10.0

    def client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
        return httpx.AsyncClient(
            base_url=self.server.rstrip("/"),
            headers=headers,
            verify=self._verify(),
            timeout=self.timeout_s,
            limits=limits,
        )

    def _verify(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return True
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.ca_data:
            text = self.ca_data.decode() if isinstance(self.ca_data, bytes) else self.ca_data
            context.load_verify_locations(cadata=_pem(text))
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_path or self.cert_data:
            with (
                _pem_file(self.cert_path, self.cert_data) as cert,
                _pem_file(self.key_path, self.key_data) as key,
            ):
                context.load_cert_chain(cert or "", key)
        return context


def _pem(text: str) -> str:
    return text if "BEGIN CERTIFICATE" in text else base64.b64decode(text).decode()


@contextmanager
def _pem_file(path: str | None, data: str | bytes | None) -> Iterator[str | None]:
    """``path``, or ``data`` (PEM or base64 of PEM) in a private temporary file while ssl reads it."""
    if path or not data:
        yield path
        return
    raw = data.encode() if isinstance(data, str) else data
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle, temp = tempfile.mkstemp(prefix="governor-kube-", suffix=".pem")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(raw)
        yield temp
    finally:
        os.unlink(temp)
