"""NATS decentralized authentication for tests, without ``nsc``: an operator, accounts and
users as nkeys, their JWTs signed as NATS v2 expects (``ed25519-nkey``), a server configuration
that trusts the operator, and a user's ``.creds`` file."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
             "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}  # fmt: skip


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class Identity:
    keys: Any  # nkeys.KeyPair
    seed: str

    @classmethod
    def new(cls, prefix: int) -> Identity:
        seed = nkeys.encode_seed(os.urandom(32), prefix).decode()
        return cls(nkeys.from_seed(seed.encode()), seed)

    @property
    def public(self) -> str:
        return str(self.keys.public_key.decode())


def signed_jwt(issuer: Identity, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A JWT of ``subject`` (a public key) signed by ``issuer``."""
    claims: dict[str, Any] = {"iat": int(time.time()), "iss": issuer.public, "name": name, "sub": subject, "nats": {**nats, "version": 2}}
    claims["jti"] = base64.b32encode(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{header}.{body}.{_b64(issuer.keys.sign(f'{header}.{body}'.encode()))}"


class Operator:
    """An operator with a system account and one JetStream account (``FLEET``) whose users are
    made by :meth:`user`."""

    def __init__(self) -> None:
        self.operator = Identity.new(nkeys.PREFIX_BYTE_OPERATOR)
        self.system = Identity.new(nkeys.PREFIX_BYTE_ACCOUNT)
        self.account = Identity.new(nkeys.PREFIX_BYTE_ACCOUNT)
        self.operator_jwt = signed_jwt(self.operator, self.operator.public, "openetw-test", {"type": "operator", "system_account": self.system.public})
        no_jetstream = {**UNLIMITED, "mem_storage": 0, "disk_storage": 0, "streams": 0, "consumer": 0}
        self.system_jwt = signed_jwt(self.operator, self.system.public, "SYS", {"type": "account", "limits": no_jetstream})
        self.account_jwt = signed_jwt(self.operator, self.account.public, "FLEET", {"type": "account", "limits": UNLIMITED})

    def server_config(self, directory: Path) -> str:
        """The lines a ``nats-server`` configuration needs to trust this operator."""
        path = directory / "operator.jwt"
        path.write_text(self.operator_jwt)
        return "\n".join([
            f'operator: "{path}"', f"system_account: {self.system.public}", "resolver: MEMORY",
            f"resolver_preload: {{ {self.system.public}: {self.system_jwt}, {self.account.public}: {self.account_jwt} }}",
        ])  # fmt: skip

    def user(self, name: str, directory: Path, *, publish: list[str] | None = None, subscribe: list[str] | None = None) -> Path:
        """A ``.creds`` file for a user of ``FLEET`` allowed to publish and subscribe to these
        subjects (anything when None)."""
        user = Identity.new(nkeys.PREFIX_BYTE_USER)
        nats: dict[str, Any] = {"type": "user", "subs": -1, "data": -1, "payload": -1}
        if publish is not None:
            nats["pub"] = {"allow": publish}
        if subscribe is not None:
            nats["sub"] = {"allow": subscribe}
        token = signed_jwt(self.account, user.public, name, nats)
        path = directory / f"{name}.creds"
        path.write_text(
            f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n"
        )
        path.chmod(0o600)
        return path
