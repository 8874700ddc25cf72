"""The development issuer's signing keys, persisted (a file, or a shared database row) and rotatable.

The key document holds every retained key (private, PEM) and which one signs. Rotation adds a new
current key and keeps the previous ones published in the JWKS, so tokens signed before the
rotation stay valid until they expire; the oldest keys beyond `RETAINED` are dropped.

Where the document lives is a `KeyStorage` (`devauth/storage/`): `files.FilesKeyStorage` in the
data directory for one host, or `postgres.PostgresKeyStorage` for replicas on one PostgreSQL
database, so they all sign with the same key and publish the same JWKS. This module holds what is
the same for both: the document's format, rotation and signing.
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

from aml_mcp.devauth.storage import KeyStorage
from aml_mcp.devauth.storage.files import FilesKeyStorage

ALGORITHM = "RS256"
RETAINED = 3


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


def first_document() -> bytes:
    """A key document holding one fresh key (what a storage is created with)."""
    first = _new_key()
    return _encode(first.kid, [first])


class DevSigningKeys:
    """Loads (creating on first use) and rotates the key document; signs tokens with the current key."""

    def __init__(self, storage: KeyStorage) -> None:
        self.storage = storage
        self._lock = threading.Lock()
        self._version: object | None = None
        self._current = ""
        self._keys: list[_Key] = []

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> DevSigningKeys:
        """The keys of the file in `data_dir` (the single-host default)."""
        return cls(FilesKeyStorage.in_data_dir(data_dir))

    def _load(self) -> None:
        with self._lock:
            version = self.storage.version()
            if version is None:
                self.storage.create(first_document())
                version = self.storage.version()
            if version is not None and version == self._version:
                return
            document, version = self.storage.read()
            self._current, self._keys = _decode(document)
            self._version = version

    def rotate(self) -> str:
        """Make a fresh key current, keep the last `RETAINED` keys published; returns the new `kid`."""
        self._load()
        fresh = _new_key()

        def add(document: bytes) -> bytes:
            _, keys = _decode(document)
            kept = sorted([*keys, fresh], key=lambda key: key.created_at)[-RETAINED:]
            return _encode(fresh.kid, kept)

        self.storage.update(add)
        with self._lock:
            self._version = None
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
