"""`aml-mcp revoke --subject S --issuer I`: refused, with one line and a non-zero exit, for an issuer
the server does not trust (near misses of the real one included); the exact issuer denies at once."""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import pytest

from aml_mcp.cli import main as cli_main
from tests.support.oauth import SecuredServer, secured_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> SecuredServer:  # type: ignore[misc]
    with secured_server(tmp_path_factory.mktemp("revoke"), None, dev=True) as running:  # type: ignore[arg-type]
        yield running


def dev_issuer_of(server: SecuredServer) -> str:
    return f"{server.url}/oauth"


def revoke(server: SecuredServer, *args: str) -> int:
    port = str(urlsplit(server.url).port)
    return cli_main(["revoke", "--data-dir", str(server.data_dir), "--port", port, *args])


def listed(server: SecuredServer, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    capsys.readouterr()
    assert revoke(server, "--list") == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def near_misses(issuer: str) -> list[str]:
    base = issuer.removesuffix("/oauth")
    return [
        f"{issuer}/",
        issuer.replace("127.0.0.1", "localhost"),
        f"{base}/OAUTH",
        base,
        issuer.replace(str(urlsplit(issuer).port), str((urlsplit(issuer).port or 0) + 1)),
        "https://id.example",
    ]


def test_near_misses_of_the_trusted_issuer_are_refused_and_record_nothing(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    token = server.dev_token(subject="mallory").token
    for miss in near_misses(dev_issuer_of(server)):
        capsys.readouterr()
        assert revoke(server, "--subject", "mallory", "--issuer", miss) != 0, miss
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not an issuer this server trusts" in err[0], err
        assert dev_issuer_of(server) in err[0]  # says which spelling would work
    assert [e for e in listed(server, capsys) if e["value"] == "mallory"] == []
    assert server.post("tools/list", token=token).status_code == 200


def test_the_exact_trusted_issuer_revokes_and_the_token_is_refused(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    token = server.dev_token(subject="eve").token
    assert server.post("tools/list", token=token).status_code == 200
    assert revoke(server, "--subject", "eve", "--issuer", dev_issuer_of(server)) == 0
    assert f"revoked every token of eve from {dev_issuer_of(server)}" in capsys.readouterr().out
    deadline = time.monotonic() + 10
    while server.post("tools/list", token=token).status_code != 401:
        assert time.monotonic() < deadline, "the revoked subject's token is still accepted"
        time.sleep(0.1)


def test_a_jti_for_an_untrusted_issuer_is_refused_but_any_issuer_is_fine(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert revoke(server, "--jti", "j-1", "--issuer", f"{dev_issuer_of(server)}/") != 0
    assert revoke(server, "--jti", "j-1") == 0  # no issuer: denied whoever issued it
    assert [(e["kind"], e["issuer"]) for e in listed(server, capsys) if e["value"] == "j-1"] == [("jti", "")]
    assert revoke(server, "--jti", "j-1", "--lift") == 0


def test_force_records_a_revocation_for_an_issuer_about_to_be_trusted(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    future = "https://id.example"
    assert revoke(server, "--subject", "trent", "--issuer", future, "--force") == 0
    entries = [(e["kind"], e["issuer"], e["value"]) for e in listed(server, capsys)]
    assert ("subject", future, "trent") in entries
    # lifting needs no trust check: it removes what is there, whoever issued it
    assert revoke(server, "--subject", "trent", "--issuer", future, "--lift") == 0
