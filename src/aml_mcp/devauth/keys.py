"""The development issuer's signing keys, persisted in the data directory and rotatable.

The key file holds every retained key (private, PEM) and which one signs. Rotation adds a new
current key and keeps the previous ones published in the JWKS, so tokens signed before the
rotation stay valid until they expire; the oldest keys beyond `RETAINED` are dropped. Any process
sharing the data directory (the server, `aml-mcp token`, `aml-mcp devauth rotate-keys`) reads the
same file; a running server notices a rotation by the file's modification time.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from aml_mcp.secrets_store import write_private

ALGORITHM = "RS256"
RETAINED = 3
KEY_FILE = Path("keys") / "devauth-signing.json"


@dataclass(frozen=True, slots=True)
class _Key:
    kid: str
    created_at: float
    private: rsa.RSAPrivateKey


def _new_key() -> _Key:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _Key(kid=secrets.token_urlsafe(12), created_at=time.time(), private=private)


def _encode(current: str, keys: list[_Key]) -> bytes:
    document = {
        "current": current,
        "keys": [
            {
                "kid": key.kid,
                "alg": ALGORITHM,
                "created_at": key.created_at,
                "private_pem": key.private.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ).decode(),
            }
            for key in keys
        ],
    }
    return json.dumps(document, indent=1).encode()


def _decode(data: bytes) -> tuple[str, list[_Key]]:
    document = json.loads(data)
    keys = []
    for entry in document["keys"]:
        private = serialization.load_pem_private_key(entry["private_pem"].encode(), password=None)
        if not isinstance(private, rsa.RSAPrivateKey):
            raise ValueError("development signing keys must be RSA")
        keys.append(_Key(kid=entry["kid"], created_at=float(entry["created_at"]), private=private))
    current = document["current"]
    if current not in {key.kid for key in keys}:
        raise ValueError("the development key file names a current key it does not hold")
    return current, keys


class DevSigningKeys:
    """Loads (creating on first use) and rotates the key file; signs tokens with the current key."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / KEY_FILE
        self._lock = threading.Lock()
        self._mtime: int | None = None
        self._current = ""
        self._keys: list[_Key] = []

    def _load(self) -> None:
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                first = _new_key()
                write_private(self.path, _encode(first.kid, [first]), replace=False)
                stat = self.path.stat()
            if stat.st_mtime_ns == self._mtime:
                return
            self._current, self._keys = _decode(self.path.read_bytes())
            self._mtime = stat.st_mtime_ns

    def rotate(self) -> str:
        """Make a fresh key current, keep the last `RETAINED` keys published; returns the new `kid`."""
        self._load()
        with self._lock:
            fresh = _new_key()
            keys = sorted([*self._keys, fresh], key=lambda key: key.created_at)[-RETAINED:]
            write_private(self.path, _encode(fresh.kid, keys), replace=True)
            self._mtime = None
        self._load()
        return fresh.kid

    @property
    def current_kid(self) -> str:
        self._load()
        return self._current

    def jwks(self) -> dict[str, Any]:
        """The public JWK Set (every retained key), re-read if the file changed."""
        self._load()
        keys = []
        for key in self._keys:
            jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.private.public_key(), as_dict=True)
            jwk.update({"kid": key.kid, "alg": ALGORITHM, "use": "sig"})
            keys.append(jwk)
        return {"keys": keys}

    def sign(self, claims: dict[str, Any]) -> str:
        """A JWT access token (`typ: at+jwt`, RFC 9068) over `claims`, signed by the current key."""
        self._load()
        current = next(key for key in self._keys if key.kid == self._current)
        return jwt.encode(
            claims, current.private, algorithm=ALGORITHM, headers={"kid": current.kid, "typ": "at+jwt"}
        )
