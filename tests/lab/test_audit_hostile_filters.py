"""N8: a lab audit filter holding NUL is a clear 400, the same on SQLite and on PostgreSQL.

Reproduction from the review: with an `aml:admin` token, `GET /lab/api/audit?subject=%00` (also
`method=`, `decision=`) on a PostgreSQL-backed server answered 500 with `psycopg.DataError` and a
traceback in the log, while SQLite answered 200. Both servers here are real (uvicorn on a socket),
one with its trail in the data directory's SQLite file, one in a PostgreSQL schema of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.support.oauth import SecuredServer, secured_server
from tests.support.postgres import BACKENDS, backend_settings
from tests.support.scoped_catalog import scoped_catalog
from tests.support.waiting import eventually

CAROL = {"subject": "carol", "tenant": "meridian-bank", "client_id": "aml-mcp-lab", "scope": "aml:admin"}
REFUSAL = "{name} must not hold U+0000 or an unpaired surrogate"


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredServer]:
    with (
        backend_settings(request.param) as backend,
        secured_server(
            tmp_path_factory.mktemp(f"lab-{request.param}"),
            scoped_catalog(),
            dev=True,
            real_socket=True,
            **backend,
        ) as running,
    ):
        yield running


def audit(server: SecuredServer, query: str) -> tuple[int, object]:
    carol = server.dev_token(**CAROL).token
    answer = server.http.get(f"/lab/api/audit?{query}", headers={"authorization": f"Bearer {carol}"})
    return answer.status_code, answer.json()


@pytest.mark.parametrize("name", ["subject", "method", "decision"])
@pytest.mark.parametrize("value", ["%00", "carol%00", "%00'%20OR%20'1'%3D'1"])
def test_a_filter_holding_nul_is_a_clear_400(
    server: SecuredServer, name: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        status, body = audit(server, f"{name}={value}")
    assert (status, body) == (400, {"error": REFUSAL.format(name=name)})
    assert not [record for record in caplog.records if record.exc_info], "no traceback in the log"


def test_the_view_still_answers_after_hostile_filters(server: SecuredServer) -> None:
    for query in ("subject=%00", "method=a%00b&decision=%00"):
        assert audit(server, query)[0] == 400
    # The feed's own reads are audited: carol's earlier ones show up, so the store is still fine.
    status, body = eventually(
        lambda: audit(server, "method=lab/audit&subject=carol"),
        lambda answer: answer[0] == 200 and answer[1]["events"],  # type: ignore[index]
        timeout=5,
        what="carol's own reads of the feed",
    )
    assert status == 200 and body["tenant"] == "meridian-bank"  # type: ignore[index]


@pytest.mark.parametrize(
    "query",
    [
        "subject=%ED%A0%80",  # a lone surrogate as UTF-8 bytes: decoded as U+FFFD, never raw
        "subject=%27%20OR%20%271%27%3D%271",
        "method=" + "x" * 200,
    ],
)
def test_other_hostile_filters_match_nothing_on_both(server: SecuredServer, query: str) -> None:
    assert audit(server, query) == (200, {"tenant": "meridian-bank", "events": []})
