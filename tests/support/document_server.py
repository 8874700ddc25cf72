"""A hostile (or friendly) HTTPS host on 127.0.0.1 for Client ID Metadata Document tests.

`DocumentServer` serves scripted answers over real TLS, with a certificate from a throw-away CA
(`ca_file`; trust it with `SSL_CERT_FILE`, as an attacker's public certificate would be trusted
anyway). Each path is a `Script`: a body to send, how (declared length or not, content encoding,
a pause between chunks, a redirect), and the server records, per path, how many requests came,
how many bytes it managed to write before the client hung up, and how many connections were open
at once. Nothing here is mocked: the development issuer under test makes real connections to it.
"""

from __future__ import annotations

import datetime
import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1, ::1 and localhost: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("aml-mcp test CA"))
        .issuer_name(_name("aml-mcp test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return ca_file, cert_file, key_file


@dataclass
class Script:
    """What the host answers on one path."""

    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    declare_length: bool = True
    """Send `Content-Length` (else the body ends when the connection closes)."""
    chunk_size: int = 65_536
    pause_seconds: float = 0.0
    """Sleep between chunks (a slow drip)."""
    repeat: int = 1
    """Send `body` this many times (a large answer without holding it in memory twice)."""


@dataclass
class Seen:
    """What happened on one path."""

    requests: int = 0
    bytes_written: int = 0
    host_headers: list[str] = field(default_factory=list)
    accept_encodings: list[str] = field(default_factory=list)
    hung_up: int = 0
    """Answers the client stopped reading before the end."""
    seconds_to_hang_up: list[float] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        host = self.server.host
        path = self.path.split("?", 1)[0]
        with host.lock:
            seen = host.seen.setdefault(path, Seen())
            seen.requests += 1
            seen.host_headers.append(self.headers.get("host", ""))
            seen.accept_encodings.append(self.headers.get("accept-encoding", ""))
            host.active += 1
            host.max_active = max(host.max_active, host.active)
        try:
            self._answer(host.scripts.get(path, Script(b"not found", status=404)), seen)
        finally:
            with host.lock:
                host.active -= 1

    def _answer(self, script: Script, seen: Seen) -> None:
        started = time.monotonic()
        self.send_response(script.status)
        for name, value in script.headers.items():
            self.send_header(name, value)
        if script.declare_length:
            self.send_header("Content-Length", str(len(script.body) * script.repeat))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.flush()
            for chunk in self._chunks(script):
                self.wfile.write(chunk)
                self.wfile.flush()
                with self.server.host.lock:
                    seen.bytes_written += len(chunk)
                if script.pause_seconds and self._client_gone(script.pause_seconds):
                    raise ConnectionResetError
                if self.server.host.closing:
                    return
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            with self.server.host.lock:
                seen.hung_up += 1
                seen.seconds_to_hang_up.append(time.monotonic() - started)

    def _client_gone(self, wait: float) -> bool:
        """Wait up to `wait` seconds, noticing at once if the client closes (it sends nothing else)."""
        ready, _, _ = select.select([self.connection], [], [], wait)
        if not ready:
            return False
        try:
            return self.connection.recv(1) == b""
        except (ssl.SSLError, OSError):
            return True

    @staticmethod
    def _chunks(script: Script) -> Iterator[bytes]:
        for _ in range(script.repeat):
            for start in range(0, len(script.body), script.chunk_size):
                yield script.body[start : start + script.chunk_size]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    host: DocumentServer

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        with self.host.lock:
            self.host.connections += 1
        sock.settimeout(30)
        # The handshake happens in the handler's thread, so one slow client never blocks accept().
        return self.host.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class DocumentServer:
    """Serves `scripts` (path → `Script`) over HTTPS on 127.0.0.1; use as a context manager."""

    def __init__(self, directory: Path) -> None:
        self.ca_file, cert_file, key_file = make_tls_files(directory)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert_file, key_file)
        self.scripts: dict[str, Script] = {}
        self.seen: dict[str, Seen] = {}
        self.lock = threading.Lock()
        self.connections = 0
        self.active = 0
        self.max_active = 0
        self.closing = False
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.host = self
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    def serve(self, path: str, script: Script) -> str:
        """Answer `path` with `script`; returns its URL on 127.0.0.1."""
        self.scripts[path] = script
        return self.url(path)

    def requests(self, path: str) -> int:
        with self.lock:
            return self.seen[path].requests if path in self.seen else 0

    def total_requests(self) -> int:
        with self.lock:
            return sum(seen.requests for seen in self.seen.values())

    def client_context(self) -> ssl.SSLContext:
        """A client context trusting only this host's CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def __enter__(self) -> DocumentServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.closing = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
