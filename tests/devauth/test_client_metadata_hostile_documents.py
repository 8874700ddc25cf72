"""Client ID Metadata Document fetches under attack, over real HTTP and real TLS.

An anonymous `GET /oauth/authorize` names an https `client_id`; the issuer fetches it from a host
the test runs on 127.0.0.1 with a throw-away CA (trusted through `SSL_CERT_FILE`, as a public
certificate would be). Loopback is reachable only because the document URL itself names loopback;
a host name that merely resolves there is refused without a connection. Each test sends the hostile
document and checks what the issuer answered and what the host saw: how many connections and
requests, how many bytes it could write before the issuer hung up, how long the issuer stayed.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import httpx
import pytest

from aml_mcp.devauth.client_metadata import (
    ClientMetadataDocuments,
    DocumentFetcher,
    DocumentRefused,
    destination_allowed,
)
from tests.support.dev_issuer import REDIRECT, authorize_url, dev_issuer_server
from tests.support.document_server import DocumentServer, Script
from tests.support.oauth import SecuredServer

TIMEOUT = 1.5
"""The issuer's total deadline for one fetch in these tests (`client_metadata_timeout_seconds`)."""
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocumentServer]:
    with DocumentServer(tmp_path_factory.mktemp("document-host")) as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, host: DocumentServer) -> Iterator[SecuredServer]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SSL_CERT_FILE", str(host.ca_file))
        with dev_issuer_server(
            tmp_path_factory.mktemp("cimd"), client_metadata_timeout_seconds=TIMEOUT
        ) as running:
            yield running


def document(url: str, **overrides: Any) -> bytes:
    return json.dumps(
        {
            "client_id": url,
            "client_name": "Document Client",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            **overrides,
        }
    ).encode()


def ask(server: SecuredServer, client_id: str, *, timeout: float = 60) -> httpx.Response:
    """The anonymous authorization request that makes the issuer fetch `client_id`."""
    return httpx.get(authorize_url(server, client_id=client_id), follow_redirects=False, timeout=timeout)


def refused(answer: httpx.Response) -> bool:
    return answer.status_code == 400 and "does not exist" in answer.text and "location" not in answer.headers


def test_a_valid_document_is_fetched_once_asking_for_an_unencoded_body(
    server: SecuredServer, host: DocumentServer
) -> None:
    url = host.url("/valid.json")
    host.serve("/valid.json", Script(document(url), headers={"Content-Type": "application/json"}))
    first, second = ask(server, url), ask(server, url)
    assert first.status_code == second.status_code == 200 and "Document Client" in first.text
    assert host.requests("/valid.json") == 1
    assert host.seen["/valid.json"].accept_encodings == ["identity"]


def test_a_compressed_document_is_refused_not_inflated(server: SecuredServer, host: DocumentServer) -> None:
    url = host.url("/gzipped.json")
    host.serve("/gzipped.json", Script(gzip.compress(document(url)), headers={"Content-Encoding": "gzip"}))
    assert refused(ask(server, url))


def test_a_gzip_bomb_is_refused_before_its_body_is_read(server: SecuredServer, host: DocumentServer) -> None:
    # 64 MiB of gzip members on the wire, each inflating 1000-fold: the issuer must hang up at the
    # headers, neither reading nor inflating the body.
    member = gzip.compress(bytes(64 * MIB))
    url = host.url("/bomb.json")
    host.serve(
        "/bomb.json",
        Script(
            member, headers={"Content-Encoding": "gzip"}, declare_length=False, repeat=64 * MIB // len(member)
        ),
    )
    assert refused(ask(server, url))
    wait_for_hang_up(host, "/bomb.json")
    assert host.seen["/bomb.json"].bytes_written < 24 * MIB


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "undeclared"])
def test_an_oversized_document_is_cut_off_at_the_cap(
    server: SecuredServer, host: DocumentServer, declare_length: bool
) -> None:
    path = f"/large-{declare_length}.json"
    host.serve(path, Script(b" " * MIB, declare_length=declare_length, repeat=64))
    assert refused(ask(server, host.url(path)))
    wait_for_hang_up(host, path)
    assert host.seen[path].bytes_written < 24 * MIB


def test_a_slow_drip_ends_at_the_total_deadline(server: SecuredServer, host: DocumentServer) -> None:
    # Headers at once, then one byte every 0.25 s for 30 s: no single read ever times out.
    url = host.url("/drip.json")
    host.serve("/drip.json", Script(b" ", declare_length=False, chunk_size=1, pause_seconds=0.25, repeat=120))
    started = time.monotonic()
    assert refused(ask(server, url))
    assert time.monotonic() - started < TIMEOUT + 5
    wait_for_hang_up(host, "/drip.json")
    assert host.seen["/drip.json"].seconds_to_hang_up[0] < TIMEOUT + 5


def test_fetches_never_hold_the_shared_worker_threads(server: SecuredServer, host: DocumentServer) -> None:
    """45 anonymous requests naming slow documents: at most 4 fetches at once, and a request that
    needs a shared worker thread (the JWKS endpoint reads the key file on one) is answered meanwhile."""
    paths = [f"/slow-{index}.json" for index in range(45)]
    for path in paths:
        host.serve(path, Script(b" ", declare_length=False, chunk_size=1, pause_seconds=0.25, repeat=120))
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def anonymous(path: str) -> None:
        answer = ask(server, host.url(path))
        with lock:
            answers.append(answer)

    flood = [threading.Thread(target=anonymous, args=(path,)) for path in paths]
    for thread in flood:
        thread.start()
    deadline = time.monotonic() + 10
    while sum(host.requests(path) for path in paths) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    jwks = httpx.get(f"{server.url}/oauth/jwks.json", timeout=5)
    for thread in flood:
        thread.join(timeout=60)
    assert jwks.status_code == 200 and jwks.json()["keys"]
    assert len(answers) == 45 and all(refused(answer) for answer in answers)
    assert host.max_active <= 4


@pytest.mark.parametrize("name", ["127.1", "2130706433", "0x7f000001"])
def test_a_host_name_that_is_not_a_loopback_literal_never_reaches_loopback(
    server: SecuredServer, host: DocumentServer, name: str
) -> None:
    # Each of these resolves to 127.0.0.1, but none names loopback: the document URL is not loopback.
    before = host.connections
    url = host.url("/private.json", host=name)
    host.serve("/private.json", Script(document(url)))
    assert refused(ask(server, url))
    assert host.connections == before


def test_redirects_are_not_followed(server: SecuredServer, host: DocumentServer) -> None:
    url = host.url("/moved.json")
    host.serve("/moved.json", Script(status=302, headers={"Location": host.url("/target.json")}))
    host.serve("/target.json", Script(document(url)))
    assert refused(ask(server, url))
    assert host.requests("/target.json") == 0


def test_a_failed_fetch_is_remembered(server: SecuredServer, host: DocumentServer) -> None:
    url = host.url("/missing.json")
    assert refused(ask(server, url)) and refused(ask(server, url))
    assert host.requests("/missing.json") == 1


def wait_for_hang_up(host: DocumentServer, path: str, timeout: float = 30) -> None:
    """The host notices the issuer hung up when its next write fails."""
    deadline = time.monotonic() + timeout
    while not host.seen[path].hung_up:
        assert time.monotonic() < deadline, f"the issuer kept reading {path}"
        time.sleep(0.02)


# --- the destination policy and the fetcher, below the routes ---


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 (an address refused, not one bound to)
        "127.0.0.1",
        "198.18.0.1",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fec0::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:7f00:1::1",
        "2001:db8::1",
        "not an address",
    ],
)
def test_private_loopback_link_local_and_embedded_addresses_are_refused(address: str) -> None:
    assert not destination_allowed(address, loopback_url=False)


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert destination_allowed(address, loopback_url=False)


def test_a_loopback_url_may_reach_loopback_only() -> None:
    assert destination_allowed("127.0.0.1", loopback_url=True)
    assert destination_allowed("::1", loopback_url=True)
    assert destination_allowed("::ffff:127.0.0.1", loopback_url=True)
    assert not destination_allowed("10.0.0.1", loopback_url=True)
    assert not destination_allowed("93.184.216.34", loopback_url=True)


class _Names:
    """A resolver with names mapped by the test, counting lookups."""

    def __init__(self, names: dict[str, Sequence[str]]) -> None:
        self.names = names
        self.lookups: list[str] = []

    def __call__(self, name: str, port: int) -> Sequence[str]:
        self.lookups.append(name)
        return self.names[name]


def test_the_connection_goes_to_the_address_that_was_vetted(host: DocumentServer) -> None:
    """One resolution, then a connection to that address: TLS and `Host` still name the host."""
    names = _Names({"localhost": ["127.0.0.1"]})
    fetcher = DocumentFetcher(resolve=names, verify=host.client_context())
    url = host.url("/vetted.json", host="localhost")
    host.serve("/vetted.json", Script(document(url)))
    fetched = anyio.run(fetcher.fetch, url)
    assert fetched["client_id"] == url
    assert names.lookups == ["localhost"]
    assert host.seen["/vetted.json"].host_headers == [f"localhost:{host.port}"]


@pytest.mark.parametrize(
    "addresses", [["127.0.0.1"], ["93.184.216.34", "10.1.2.3"], []], ids=["rebound", "mixed", "none"]
)
def test_a_name_resolving_to_a_refused_address_is_never_connected_to(
    host: DocumentServer, addresses: list[str]
) -> None:
    names = _Names({"documents.test": addresses})
    fetcher = DocumentFetcher(resolve=names, verify=host.client_context())
    before = host.connections
    with pytest.raises(DocumentRefused):
        anyio.run(fetcher.fetch, f"https://documents.test:{host.port}/doc.json")
    assert host.connections == before


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/doc.json",
        "https://user@127.0.0.1/doc.json",
        "https://127.0.0.1/doc.json#x",
        "https://127.0.0.1:0/doc.json",
        "https://127.0.0.1:99999/doc.json",
        "https:///doc.json",
    ],
)
def test_malformed_document_urls_are_refused_before_resolving(url: str) -> None:
    names = _Names({})
    with pytest.raises(DocumentRefused):
        anyio.run(DocumentFetcher(resolve=names).fetch, url)
    assert names.lookups == []


def test_the_cache_is_bounded_and_remembers_failures() -> None:
    fetched: list[str] = []

    async def source(url: str) -> dict[str, Any]:
        fetched.append(url)
        if url.endswith("bad"):
            raise DocumentRefused("bad")
        return json.loads(document(url))

    documents = ClientMetadataDocuments(source, cache_entries=2)

    async def scenario() -> None:
        assert await documents.resolve("https://a.example/bad") is None
        assert await documents.resolve("https://a.example/bad") is None
        assert fetched == ["https://a.example/bad"]
        for name in ("one", "two", "three"):
            assert await documents.resolve(f"https://a.example/{name}") is not None
        assert await documents.resolve("https://a.example/one") is not None  # evicted, fetched again
        assert await documents.resolve("https://a.example/three") is not None  # still cached

    anyio.run(scenario)
    assert fetched.count("https://a.example/one") == 2 and fetched.count("https://a.example/three") == 1
    assert len(documents._cache) <= 2


def test_a_request_thread_never_fetches() -> None:
    """While a request is handled (`pinned`), only documents resolved for it are known."""
    fetched: list[str] = []

    def source(url: str) -> dict[str, Any]:
        fetched.append(url)
        return json.loads(document(url))

    documents = ClientMetadataDocuments(source)
    with documents.pinned({}):
        assert documents.client("https://a.example/doc") is None
    assert fetched == []
    assert documents.client("https://a.example/doc") is not None and fetched == ["https://a.example/doc"]
