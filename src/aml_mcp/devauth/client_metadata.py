"""Client ID Metadata Documents: the one outbound HTTP call of the development issuer, and what it
remembers of them.

A client whose `client_id` is an https URL describes itself in a JSON document at that URL; the
issuer fetches it instead of requiring registration. That URL arrives in an anonymous
`GET /oauth/authorize`, which any web page can make a developer's browser send, so the fetch is
treated as hostile input:

- the host is resolved once, on the fetcher's own threads, and every address must be public (not
  private, loopback, link-local, shared, reserved or multicast, IPv4 embedded in IPv6 included)
  unless the URL itself names loopback; the connection then goes to the vetted address, with TLS
  still checking the certificate against the host name, so DNS rebinding cannot steer it;
- no redirects; `Accept-Encoding: identity`, and an encoded body is refused rather than inflated;
  the body is streamed and the fetch stops at `max_bytes`;
- one deadline covers the whole fetch: waiting for a slot, resolving, connecting, TLS, headers,
  body (a per-phase timeout lets a slow drip run for ever);
- a few fetches at a time, on their own limiter, so they never hold the shared worker threads;
- results, failures included, are remembered for a while in a bounded least-recently-used cache.

The request handlers resolve a document on the event loop before handing the request to authlib
on a worker thread, and `pinned` makes exactly those results what authlib's `query_client` sees:
a worker thread never fetches.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, cast
from urllib.parse import SplitResult, urlsplit, urlunsplit

import anyio
import anyio.to_thread
import httpx

from aml_mcp.devauth.redirects import acceptable_redirect_uri
from aml_mcp.devauth.storage import DevClient
from aml_mcp.loopback import is_loopback_host

logger = logging.getLogger(__name__)

SyncDocumentSource = Callable[[str], Mapping[str, Any]]
AsyncDocumentSource = Callable[[str], Awaitable[Mapping[str, Any]]]
DocumentSource = SyncDocumentSource | AsyncDocumentSource
"""Fetches a Client ID Metadata Document (an https URL) and returns the parsed JSON object, or raises."""

Resolver = Callable[[str, int], Sequence[str]]
"""Resolves a host name (and port) to the addresses a connection could go to."""

CLIENT_NAME_CHARS = 100
"""A document's `client_name` is cut to this length for the consent page."""


class DocumentRefused(Exception):
    """Why a document was not accepted: logged for the operator, never shown to the caller."""


def is_document_url(client_id: str) -> bool:
    """Whether a `client_id` names a Client ID Metadata Document rather than a registered client."""
    return client_id.startswith("https://")


def resolve_host(host: str, port: int) -> list[str]:
    """The host's TCP addresses, in the resolver's order, without duplicates (blocking)."""
    addresses: list[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6) and str(sockaddr[0]) not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo, NAT64) and may be routed to."""
    found = [embedded for embedded in (address.ipv4_mapped, address.sixtofour) if embedded is not None]
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF))
    return found


def destination_allowed(address: str, *, loopback_url: bool) -> bool:
    """Whether the issuer may connect to `address` for a document.

    A URL naming loopback (`127.0.0.1`, `[::1]`, `localhost`) may only reach loopback; any other URL
    only public unicast addresses, checked for the IPv4 address an IPv6 one embeds as well.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
    if loopback_url:
        return ip.is_loopback or any(inner.is_loopback for inner in embedded)
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return False
    return all(candidate.is_global and not candidate.is_multicast for candidate in (ip, *embedded))


def document_url(url: str) -> SplitResult:
    """The parts of a document URL: https, a host, a numeric port, no userinfo or fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise DocumentRefused("not a valid URL") from None
    if parts.scheme != "https" or not parts.hostname:
        raise DocumentRefused("client metadata documents must be served over https")
    if "@" in parts.netloc or parts.fragment or "#" in url:
        raise DocumentRefused("the URL must not carry userinfo or a fragment")
    if port == 0 or any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise DocumentRefused("not a valid URL")
    return parts


class DocumentFetcher:
    """Fetches one document over the network, within the rules above (the deadline is the caller's:
    `ClientMetadataDocuments.resolve` runs this inside one)."""

    def __init__(
        self,
        *,
        max_bytes: int = 65_536,
        timeout_seconds: float = 5.0,
        threads: int = 4,
        resolve: Resolver = resolve_host,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.timeout_seconds = timeout_seconds
        self.resolve = resolve
        self._threads_total = threads
        self._threads: anyio.CapacityLimiter | None = None
        self._verify = verify
        self._verify_lock = threading.Lock()

    def _thread_limiter(self) -> anyio.CapacityLimiter:
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(self._threads_total)
        return self._threads

    def _tls(self) -> ssl.SSLContext:
        """The default trust (certifi, or `SSL_CERT_FILE`/`SSL_CERT_DIR`), loaded once, off the loop."""
        with self._verify_lock:
            if self._verify is None:
                self._verify = httpx.create_ssl_context()
            return self._verify

    async def fetch(self, url: str) -> Mapping[str, Any]:
        parts = document_url(url)
        host = cast(str, parts.hostname)
        port = parts.port or 443
        threads = self._thread_limiter()
        # Resolution blocks in the system resolver: on this fetcher's own threads, and abandoned (not
        # waited for) when the deadline passes.
        addresses = await anyio.to_thread.run_sync(
            self.resolve, host, port, limiter=threads, abandon_on_cancel=True
        )
        if not addresses:
            raise DocumentRefused("the host did not resolve")
        loopback_url = is_loopback_host(host)
        refused = [
            address for address in addresses if not destination_allowed(address, loopback_url=loopback_url)
        ]
        if refused:
            raise DocumentRefused(f"destination address not allowed: {refused[0]}")
        address = addresses[0]
        authority = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        target = urlunsplit(("https", authority, parts.path or "/", parts.query, ""))
        verify = await anyio.to_thread.run_sync(self._tls, limiter=threads)
        headers = {"host": parts.netloc, "accept": "application/json", "accept-encoding": "identity"}
        async with (
            httpx.AsyncClient(
                verify=verify, trust_env=False, follow_redirects=False, timeout=self.timeout_seconds
            ) as http,
            http.stream("GET", target, headers=headers, extensions={"sni_hostname": host}) as response,
        ):
            if response.status_code != 200:
                raise DocumentRefused(f"answered {response.status_code}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in {"", "identity"}:
                raise DocumentRefused(f"encoded body ({encoding[:20]}) refused")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise DocumentRefused(f"larger than {self.max_bytes} bytes")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self.max_bytes:
                    raise DocumentRefused(f"larger than {self.max_bytes} bytes")
        return parse_document(bytes(body))


def parse_document(body: bytes) -> Mapping[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise DocumentRefused("not JSON") from None
    if not isinstance(document, dict):
        raise DocumentRefused("not a JSON object")
    return document


class ClientMetadataDocuments:
    """Which clients the documents describe: fetched within a deadline and a limiter, validated,
    cached (failures too) in a bounded LRU, and pinned for the request being handled."""

    def __init__(
        self,
        source: DocumentSource,
        *,
        timeout_seconds: float = 5.0,
        concurrency: int = 4,
        cache_seconds: float = 300.0,
        failure_cache_seconds: float = 60.0,
        cache_entries: int = 1_024,
        max_redirect_uris: int = 10,
        max_redirect_uri_chars: int = 2_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self._source_is_async = inspect.iscoroutinefunction(source)
        self.timeout_seconds = timeout_seconds
        self.concurrency = concurrency
        self.cache_seconds = cache_seconds
        self.failure_cache_seconds = failure_cache_seconds
        self.cache_entries = cache_entries
        self.max_redirect_uris = max_redirect_uris
        self.max_redirect_uri_chars = max_redirect_uri_chars
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, DevClient | None]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._slots: anyio.CapacityLimiter | None = None
        self._threads: anyio.CapacityLimiter | None = None
        self._pinned: contextvars.ContextVar[Mapping[str, DevClient | None] | None] = contextvars.ContextVar(
            "pinned_client_metadata_documents", default=None
        )

    # --- cache ---
    def cached(self, url: str) -> tuple[bool, DevClient | None]:
        """(known, client): whether a live cache entry exists, and what it says (None: refused)."""
        with self._cache_lock:
            entry = self._cache.get(url)
            if entry is None:
                return False, None
            if entry[0] <= self.clock():
                del self._cache[url]
                return False, None
            self._cache.move_to_end(url)
            return True, entry[1]

    def _remember(self, url: str, client: DevClient | None) -> None:
        ttl = self.cache_seconds if client is not None else self.failure_cache_seconds
        if ttl <= 0:
            return
        with self._cache_lock:
            self._cache[url] = (self.clock() + ttl, client)
            self._cache.move_to_end(url)
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)

    # --- what authlib sees ---
    @contextlib.contextmanager
    def pinned(self, resolved: Mapping[str, DevClient | None]) -> Iterator[None]:
        """While handling one request: `client()` answers from `resolved` only and never fetches."""
        token = self._pinned.set(dict(resolved))
        try:
            yield
        finally:
            self._pinned.reset(token)

    def client(self, url: str) -> DevClient | None:
        """The client a document describes (None if refused). Within `pinned`, only what was resolved
        for this request; otherwise (scripts and tests calling authlib directly) cache, then fetch."""
        pinned = self._pinned.get()
        if pinned is not None:
            return pinned.get(url)
        known, client = self.cached(url)
        if known:
            return client
        if self._source_is_async:
            return anyio.run(self.resolve, url)
        try:
            result = self._client_from(url, cast(SyncDocumentSource, self.source)(url))
        except Exception as error:
            self._log_refusal(url, error)
            result = None
        self._remember(url, result)
        return result

    # --- fetching ---
    def _limiters(self) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        if self._slots is None or self._threads is None:
            self._slots = anyio.CapacityLimiter(self.concurrency)
            self._threads = anyio.CapacityLimiter(self.concurrency)
        return self._slots, self._threads

    async def _fetch(self, url: str, threads: anyio.CapacityLimiter) -> Mapping[str, Any]:
        if self._source_is_async:
            return await cast(AsyncDocumentSource, self.source)(url)
        source = cast(SyncDocumentSource, self.source)
        return await anyio.to_thread.run_sync(source, url, limiter=threads, abandon_on_cancel=True)

    async def resolve(self, url: str) -> DevClient | None:
        """The client a document describes, fetched if not cached (None if refused or unreachable).

        The deadline starts before waiting for a slot. A fetch that never got a slot is not
        remembered as a failure, so a flood of other URLs cannot get a good client refused for long.
        """
        known, client = self.cached(url)
        if known:
            return client
        slots, threads = self._limiters()
        started = False
        try:
            with anyio.fail_after(self.timeout_seconds):
                async with slots:
                    started = True
                    document = await self._fetch(url, threads)
            result = self._client_from(url, document)
        except Exception as error:
            self._log_refusal(url, error)
            if not started:
                return None
            result = None
        self._remember(url, result)
        return result

    @staticmethod
    def _log_refusal(url: str, error: Exception) -> None:
        reason = "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
        logger.info("client metadata document %.300r refused: %.300s", url, reason)

    # --- validation ---
    def _client_from(self, url: str, document: Mapping[str, Any]) -> DevClient:
        """A public client from a document that vouches for itself at its own URL."""
        redirect_uris = document.get("redirect_uris")
        if document.get("client_id") != url:
            raise DocumentRefused("its client_id is not its own URL")
        if not isinstance(redirect_uris, list) or not 0 < len(redirect_uris) <= self.max_redirect_uris:
            raise DocumentRefused(f"redirect_uris must list 1 to {self.max_redirect_uris} URIs")
        if not all(
            acceptable_redirect_uri(uri, max_chars=self.max_redirect_uri_chars) for uri in redirect_uris
        ):
            raise DocumentRefused("redirect_uris must be https or loopback http URIs")
        if document.get("token_endpoint_auth_method", "none") != "none":
            raise DocumentRefused("documents describe public clients (token_endpoint_auth_method none)")
        name = document.get("client_name")
        return DevClient(
            client_id=url,
            redirect_uris=tuple(redirect_uris),
            grant_types=("authorization_code", "refresh_token"),
            token_endpoint_auth_method="none",  # noqa: S106
            client_name=(name if isinstance(name, str) and name else url)[:CLIENT_NAME_CHARS],
        )
