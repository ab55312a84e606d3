"""Access tokens for the token-login tests: RSA keys, their JWKS and signed JWTs, all made here."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

RESOURCE_SERVER = "stompmq"


class Issuer:
    """An identity provider of the tests: signing keys by kid, and the JWKS that publishes them."""

    def __init__(self, *kids: str) -> None:
        self.keys = {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048) for kid in kids or ("k1",)}

    def add_key(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> bytes:
        keys = []
        for kid, key in self.keys.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": "RS256", "use": "sig"})
        return json.dumps({"keys": keys}).encode()

    def write_jwks(self, path: Path) -> Path:
        path.write_bytes(self.jwks())
        return path

    def token(self, sub: str = "alice", scope: str = f"{RESOURCE_SERVER}.read:*/* {RESOURCE_SERVER}.write:*/*",
              lifetime: float = 60.0, kid: str = "k1", aud: str = RESOURCE_SERVER, **claims: Any) -> str:
        payload = {"sub": sub, "scope": scope, "aud": aud, "exp": time.time() + lifetime if lifetime else None,
                   "iat": int(time.time()), **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, self.keys[kid], algorithm="RS256", headers={"kid": kid})
