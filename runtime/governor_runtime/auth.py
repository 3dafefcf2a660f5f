"""Bearer-token auth for the admin route.

The token comes from ``GOVERNOR_ADMIN_TOKEN`` or the file named by ``GOVERNOR_ADMIN_TOKEN_FILE`` (read at
each request, so a rotated Secret applies without a restart). Without a token the route refuses to serve,
unless the process was started with ``GOVERNOR_ADMIN_ALLOW_UNAUTHENTICATED=1`` (a local, single-user mode).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

TOKEN_ENV = "GOVERNOR_ADMIN_TOKEN"
TOKEN_FILE_ENV = "GOVERNOR_ADMIN_TOKEN_FILE"
ALLOW_UNAUTHENTICATED_ENV = "GOVERNOR_ADMIN_ALLOW_UNAUTHENTICATED"


class Verdict(Enum):
    ALLOWED = "allowed"
    UNAUTHORIZED = "unauthorized"
    UNCONFIGURED = "unconfigured"


@dataclass(frozen=True)
class AuthConfig:
    token: str | None
    allow_unauthenticated: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AuthConfig:
        env = os.environ if env is None else env
        token = env.get(TOKEN_ENV) or None
        if token is None and (path := env.get(TOKEN_FILE_ENV)):
            try:
                token = Path(path).read_text().strip() or None
            except OSError:
                token = None
        return cls(token=token, allow_unauthenticated=env.get(ALLOW_UNAUTHENTICATED_ENV) == "1")


def check(config: AuthConfig, authorization: str | None) -> Verdict:
    """Judge an ``Authorization`` header value; the token comparison takes constant time."""
    if config.token is None:
        return Verdict.ALLOWED if config.allow_unauthenticated else Verdict.UNCONFIGURED
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        presented = ""
    if hmac.compare_digest(presented.strip().encode(), config.token.encode()):
        return Verdict.ALLOWED
    return Verdict.UNAUTHORIZED
