"""The isolation oracle: every route and every MCP method, as every kind of caller of bank A, with
the inputs a hostile caller would try — and not one byte of bank B's work in any answer.

How it judges, so that a pass means something:

- **Canaries.** Bank B's state is seeded with *secret* strings that no caller of bank A ever sends
  (in note text, account ids, B's client id, task inputs and results, B's baseline id, B's audit
  records), beside *probe* values a hostile caller does send (B's task ids, case ids, analysts'
  subjects). Every probe value is tied to a secret: a leaked note carries its text, a leaked task
  its input, a leaked audit record B's client id. So scanning for secrets alone finds every leak,
  and an answer that merely echoes what the caller sent is never mistaken for one. The task of
  bank A's *owner* carries a secret of its own, which no other caller of bank A may see either.
- **Positive controls.** The same scan must find bank A's own secret in A's search, and the owner's
  task secret in the owner's `tasks/get`: a scanner that sees nothing proves nothing.
- **Credentials.** Every token-shaped string in every answer is tried as a bearer token at `/mcp`;
  one that is accepted must be the caller's own identity with no more than the caller's scopes
  (invariant 14: no route hands out a credential).
- **Coverage.** Every HTTP route of the app (recursively through mounts, each static file, the
  metrics listener's routes), every MCP method the server registered and every tool it lists must
  have been exercised; whatever was not is reported, so a new route cannot land unexamined.
- **Integrity.** After the run, bank B's tasks and the owner's task are unchanged.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from tests.support.mcp_http import NAME_FIELD, WITH_TASKS, headers_for, message

JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
"""A JSON Web Token anywhere in a text (header and payload always start with `{"`, i.e. `eyJ`)."""
OPAQUE = re.compile(r"[A-Za-z0-9._~+/=-]{20,}")
"""A string that could be an opaque bearer token."""
LISTEN_SECONDS = 0.6
"""How long each listen stream is read: long enough for bank B's activity during it to be pushed."""


def secret(label: str) -> str:
    """A canary: a word no corpus, tokenizer or other test could produce by chance."""
    return f"zq{label}{secrets.token_hex(6)}"


@dataclass(frozen=True)
class Caller:
    """One way of calling as bank A, with what it holds (for judging credentials found in answers)."""

    name: str
    token: str | None
    subject: str | None = None
    tenant: str | None = None
    client_id: str | None = None
    scopes: frozenset[str] = frozenset()
    owner: bool = False
    """This caller is the owner of bank A's seeded task (it may see that task's secret)."""


@dataclass
class Seed:
    """What seeding left in the server: the values a hostile caller sends, and the secrets."""

    bank_a: str
    bank_b: str
    b_task_ids: list[str]
    b_case_ids: list[str]
    b_subjects: list[str]
    owner_task_ids: list[str]
    b_secrets: set[str]
    owner_secrets: set[str]
    a_note_secret: str
    a_note_query: str
    owner_task_states: dict[str, str] = field(default_factory=dict)
    b_task_states: dict[str, str] = field(default_factory=dict)
    task_owner_tokens: dict[str, str] = field(default_factory=dict)
    """Each seeded task's owner's token: integrity is read as the owner sees the task."""


@dataclass(frozen=True)
class Request:
    """One HTTP request of a probe (the caller's token is added by the oracle)."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    params: Mapping[str, str | list[str]] | None = None
    stream_seconds: float | None = None
    """Read the answer as a stream for this long (listen), instead of to its end."""
    mcp_method: str | None = None
    tool: str | None = None
    on_metrics: bool = False
    """Sent to the metrics listener rather than the app."""


def mcp_request(method: str, params: Mapping[str, Any] | None = None, **options: Any) -> Request:
    body = message(method, params, capabilities=WITH_TASKS)
    headers = headers_for(body)
    tool = params.get("name") if method == "tools/call" and params else None
    return Request(
        "POST",
        "/mcp",
        headers=headers,
        body=json.dumps(body).encode(),
        mcp_method=method,
        tool=tool,
        **options,
    )


@dataclass
class Violation:
    kind: str
    caller: str
    request: str
    evidence: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.caller} {self.request}: {self.evidence}"


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    covered_routes: set[tuple[str, str]] = field(default_factory=set)
    covered_methods: set[str] = field(default_factory=set)
    covered_tools: set[str] = field(default_factory=set)
    requests: int = 0
    controls: dict[str, bool] = field(default_factory=dict)
    credentials_tried: int = 0


# ---- the inventory: what the server has, found from the app itself --------------------------------


@dataclass(frozen=True)
class RouteUnit:
    """One thing to cover: an HTTP method on a route template (or one static file)."""

    method: str
    template: str
    regex: re.Pattern[str]
    on_metrics: bool = False
    static: bool = False
    """A file of a static mount (fetched as it is: it takes no input)."""


ANY_METHOD = ("GET", "POST", "DELETE")
"""The methods a route that takes any method (the `/mcp` endpoint) must be probed with."""


def route_units(
    routes: Sequence[BaseRoute], *, prefix: str = "", on_metrics: bool = False
) -> list[RouteUnit]:
    """Every (method, path) the routes serve, recursively through mounts; a static mount counts
    each of its files (and its index) as a route of its own."""
    units: list[RouteUnit] = []
    for route in routes:
        if isinstance(route, Mount):
            path = prefix + route.path
            static = _static_files(route.app)
            if static is not None:
                directory, html = static
                files = sorted(p for p in directory.rglob("*") if p.is_file())
                names = [str(p.relative_to(directory)) for p in files]
                if html and "index.html" in names:
                    names.append("")
                units += [
                    RouteUnit(
                        "GET",
                        f"{path}/{name}",
                        re.compile(re.escape(f"{path}/{name}") + "$"),
                        on_metrics,
                        True,
                    )
                    for name in names
                ]
            else:
                units += route_units(route.routes, prefix=path, on_metrics=on_metrics)
        elif isinstance(route, Route):
            regex = re.compile("^" + re.escape(prefix) + route.path_regex.pattern.lstrip("^"))
            methods = sorted((route.methods or set(ANY_METHOD)) - {"HEAD"})
            units += [RouteUnit(method, prefix + route.path, regex, on_metrics) for method in methods]
        else:
            raise AssertionError(f"a route of a kind the oracle cannot enumerate: {route!r}")
    return units


def _static_files(app: Any) -> tuple[Path, bool] | None:
    """The directory a static-files app serves (looking through header-adding wrappers)."""
    for _ in range(5):
        if isinstance(app, StaticFiles):
            assert app.directory is not None
            return Path(app.directory), app.html
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


# ---- the oracle ------------------------------------------------------------------------------------


class Oracle:
    """Runs every probe as every caller against a served app and judges every answer."""

    def __init__(
        self,
        http: httpx.Client,
        seed: Seed,
        callers: Sequence[Caller],
        *,
        units: Sequence[RouteUnit],
        mcp_methods: Sequence[str],
        tools: Sequence[str],
        metrics_http: httpx.Client | None = None,
        during_listen: Callable[[], None] | None = None,
    ) -> None:
        self.http = http
        self.metrics_http = metrics_http
        self.seed = seed
        self.callers = list(callers)
        self.units = list(units)
        self.mcp_methods = list(mcp_methods)
        self.tools = list(tools)
        self.during_listen = during_listen
        self.report = Report()
        self._tried: dict[str, int | None] = {}
        self._created: list[tuple[Caller, str]] = []
        self._lock = threading.Lock()

    # -- probes ---------------------------------------------------------------------------------

    def probes(self, caller: Caller) -> Iterator[Request]:
        """Everything a hostile caller of bank A would try, aimed at bank B (and at A's owner)."""
        seed = self.seed
        foreign_tasks = [*seed.b_task_ids, *([] if caller.owner else seed.owner_task_ids)]
        # -- MCP: every method the server serves, every tool it lists, with B's ids as input.
        yield mcp_request("ping")
        yield mcp_request("server/discover")
        yield mcp_request("tools/list")
        for case_id in seed.b_case_ids:
            yield mcp_request("tools/call", {"name": "search_aml_notes", "arguments": {"query": case_id}})
            yield mcp_request(
                "tools/call",
                {"name": "search_aml_notes", "arguments": {"query": "cash", "case_id": case_id, "top_k": 50}},
            )
        for subject in seed.b_subjects:
            yield mcp_request("tools/call", {"name": "search_aml_notes", "arguments": {"query": subject}})
        yield mcp_request(
            "tools/call", {"name": "search_aml_notes", "arguments": {"query": seed.a_note_query, "top_k": 50}}
        )
        yield mcp_request(
            "tools/call", {"name": "draft_sar_batch", "arguments": {"case_ids": seed.b_case_ids}}
        )
        yield mcp_request("tools/call", {"name": "run_full_eval", "arguments": {}})
        for task_id in [*foreign_tasks, *([] if not caller.owner else seed.owner_task_ids)]:
            yield mcp_request("tasks/get", {"taskId": task_id})
        for task_id in foreign_tasks:
            yield mcp_request(
                "tasks/update",
                {"taskId": task_id, "inputResponses": {"dob": {"action": "accept", "content": {"x": "1"}}}},
            )
            yield mcp_request("tasks/cancel", {"taskId": task_id})
        yield mcp_request(
            "subscriptions/listen",
            {"notifications": {"taskIds": foreign_tasks[:100], "toolsListChanged": True}},
            stream_seconds=LISTEN_SECONDS,
        )
        # -- HTTP routes besides /mcp.
        yield Request("GET", "/mcp")
        yield Request("DELETE", "/mcp")
        for path in ("/healthz", "/readyz"):
            yield Request("GET", path)
        for path in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-authorization-server/oauth",
            "/oauth/.well-known/oauth-authorization-server",
            "/oauth/jwks.json",
        ):
            yield Request("GET", path)
        authorize = {
            "response_type": "code",
            "client_id": "aml-mcp-cli",
            "redirect_uri": "http://127.0.0.1:9/callback",
            "state": "s",
            "code_challenge": "x" * 43,
            "code_challenge_method": "S256",
            "resource": "",
            "scope": "aml:admin",
            "login_hint": seed.b_subjects[0],
        }
        yield Request("GET", "/oauth/authorize", params=authorize)
        form = {**authorize, "username": seed.b_subjects[0], "password": "guess", "action": "approve"}
        yield Request(
            "POST",
            "/oauth/authorize",
            headers={"content-type": "application/x-www-form-urlencoded"},
            body=httpx.QueryParams(form).__str__().encode(),
        )
        for grant in (
            {
                "grant_type": "refresh_token",
                "refresh_token": secrets.token_urlsafe(32),
                "client_id": "aml-mcp-cli",
            },
            {
                "grant_type": "authorization_code",
                "code": "x",
                "client_id": "aml-mcp-cli",
                "code_verifier": "y" * 43,
            },
            {"grant_type": "client_credentials", "scope": "aml:admin", "resource": ""},
        ):
            yield Request(
                "POST",
                "/oauth/token",
                headers={"content-type": "application/x-www-form-urlencoded"},
                body=str(httpx.QueryParams(grant)).encode(),
            )
        registration = {
            "client_name": f"oracle {caller.name}",
            "redirect_uris": ["http://127.0.0.1:9/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        }
        yield Request(
            "POST",
            "/oauth/register",
            headers={"content-type": "application/json"},
            body=json.dumps(registration).encode(),
        )
        for path in ("/lab", "/lab/config.json", "/favicon.ico"):
            yield Request("GET", path)
        for unit in self.units:  # the page's own files, each of them
            if unit.static:
                yield Request("GET", unit.template)
        for query in (
            {},
            {"subject": seed.b_subjects[0]},
            {"method": "tools/call", "decision": "allow"},
            {"method": "lab/audit"},
            {"decision": "deny", "after": "0"},
        ):
            yield Request("GET", "/lab/api/audit", params=query)
        for case in ("wrong_audience", "expired", "no_scope", "no_token", "other_bank"):
            for task_id in seed.b_task_ids[:1] + seed.owner_task_ids[:1]:
                body = {"case": case, "taskId": task_id, "tool": "search_aml_notes"}
                yield Request(
                    "POST",
                    "/lab/api/simulation",
                    headers={"content-type": "application/json"},
                    body=json.dumps(body).encode(),
                )
        if self.metrics_http is not None:
            yield Request("GET", "/metrics", on_metrics=True)

    # -- running -----------------------------------------------------------------------------------

    def run(self) -> Report:
        for caller in self.callers:
            for request in self.probes(caller):
                self._send(caller, request)
        self._follow_created_tasks()
        for caller in self.callers:  # the audit view again, now that it holds this run's records
            self._send(caller, Request("GET", "/lab/api/audit", params={}))
        self._check_integrity()
        return self.report

    def _send(self, caller: Caller, request: Request) -> str:
        headers = dict(request.headers)
        if caller.token is not None:
            headers["authorization"] = f"Bearer {caller.token}"
        client = self.metrics_http if request.on_metrics else self.http
        assert client is not None
        self.report.requests += 1
        label = f"{request.method} {request.path}" + (f" {request.mcp_method}" if request.mcp_method else "")
        if request.tool:
            label += f" {request.tool}"
        if request.stream_seconds is not None:
            status, head, text = self._stream(client, request, headers)
        else:
            response = client.request(
                request.method, request.path, headers=headers, content=request.body, params=request.params
            )
            status, head, text = response.status_code, _headers_text(response), response.text
        self._cover(request)
        self._judge(caller, label, status, head + "\n" + text)
        if request.mcp_method == "tools/call" and status == 200:
            result = _json(text).get("result") or {}
            if result.get("resultType") == "task" and isinstance(result.get("taskId"), str):
                self._created.append((caller, result["taskId"]))
        return text

    def _stream(
        self, client: httpx.Client, request: Request, headers: dict[str, str]
    ) -> tuple[int, str, str]:
        """A listen stream, read for `stream_seconds` while bank B's work moves."""
        chunks: list[str] = []
        with client.stream(
            request.method, request.path, headers=headers, content=request.body, timeout=10
        ) as response:
            if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                "text/event-stream"
            ):
                return response.status_code, _headers_text(response), response.read().decode(errors="replace")
            reader = threading.Thread(target=_read_into, args=(response, chunks), daemon=True)
            reader.start()
            if self.during_listen is not None:
                self.during_listen()
            assert request.stream_seconds is not None
            reader.join(request.stream_seconds)
            text = "".join(chunks)
            _hang_up(response)
            reader.join(5)
            return response.status_code, _headers_text(response), text

    def _cover(self, request: Request) -> None:
        path = request.path
        for unit in self.units:
            if (
                unit.on_metrics == request.on_metrics
                and unit.method == request.method
                and unit.regex.match(path)
            ):
                self.report.covered_routes.add((unit.method, unit.template))
        if request.mcp_method:
            self.report.covered_methods.add(request.mcp_method)
        if request.tool:
            self.report.covered_tools.add(request.tool)

    # -- judging -----------------------------------------------------------------------------------

    def _judge(self, caller: Caller, label: str, status: int, text: str) -> None:
        if status >= 500 and status != 503:
            self._violation("server error", caller, label, f"HTTP {status}: {text[:200]}")
        for canary in self.seed.b_secrets:
            if canary in text:
                self._violation("bank B leaked", caller, label, _around(text, canary))
        if not caller.owner:
            for canary in self.seed.owner_secrets:
                if canary in text:
                    self._violation("another owner's task leaked", caller, label, _around(text, canary))
        if self.seed.a_note_secret in text:
            self.report.controls["bank A sees its own note"] = True
        if caller.owner and any(canary in text for canary in self.seed.owner_secrets):
            self.report.controls["the owner sees its own task"] = True
        for candidate in _credential_candidates(text):
            self._try_credential(caller, label, candidate)

    def _try_credential(self, caller: Caller, label: str, candidate: str) -> None:
        """A string from an answer that `/mcp` accepts must be no more than the caller's own credential."""
        if candidate == caller.token:
            return
        with self._lock:
            if candidate in self._tried:
                status = self._tried[candidate]
            else:
                self.report.credentials_tried += 1
                body = message("tools/list", {})
                answer = self.http.post(
                    "/mcp",
                    content=json.dumps(body),
                    headers={**headers_for(body), "authorization": f"Bearer {candidate}"},
                )
                status = answer.status_code
                self._tried[candidate] = status
        if status in (401, 400):
            return
        claims = _unverified_claims(candidate)
        if claims is None:
            self._violation(
                "credential handed out", caller, label, f"an opaque string is accepted ({status})"
            )
            return
        granted = frozenset(str(claims.get("scope", "")).split())
        mine = (
            claims.get("sub") == caller.subject
            and claims.get("tenant") == caller.tenant
            and claims.get("client_id") == caller.client_id
            and (granted <= caller.scopes or "aml:admin" in caller.scopes)
        )
        if not mine:
            shown = {key: claims.get(key) for key in ("sub", "tenant", "client_id", "scope")}
            self._violation("credential handed out", caller, label, f"a token the server accepts: {shown}")

    def _violation(self, kind: str, caller: Caller, label: str, evidence: str) -> None:
        self.report.violations.append(Violation(kind, caller.name, label, evidence))

    # -- after the run -----------------------------------------------------------------------------

    def _follow_created_tasks(self) -> None:
        """Tasks bank A's callers created (drafts naming B's cases, evaluations): read to the end."""
        deadline = time.monotonic() + 60
        pending = list(self._created)
        while pending and time.monotonic() < deadline:
            still = []
            for caller, task_id in pending:
                text = self._send(caller, mcp_request("tasks/get", {"taskId": task_id}))
                status = ((_json(text).get("result") or {}).get("status")) or ""
                if status not in ("completed", "failed", "cancelled", "input_required"):
                    still.append((caller, task_id))
            pending = still
            if pending:
                time.sleep(0.3)
        assert not pending, f"tasks bank A created never finished: {pending}"

    def _check_integrity(self) -> None:
        """Nothing bank A's callers sent changed bank B's tasks or the owner's."""
        expected = {**self.seed.b_task_states, **self.seed.owner_task_states}
        for task_id, status in expected.items():
            owner = Caller("seeded owner", self.seed.task_owner_tokens[task_id], owner=True)
            body = message("tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS)
            answer = self.http.post(
                "/mcp",
                content=json.dumps(body),
                headers={**headers_for(body), "authorization": f"Bearer {owner.token}"},
            )
            now = (_json(answer.text).get("result") or {}).get("status")
            if now != status:
                self.report.violations.append(
                    Violation("another's task changed", "-", f"tasks/get {task_id[:8]}", f"{status} -> {now}")
                )


def _read_into(response: httpx.Response, chunks: list[str]) -> None:
    try:
        for text in response.iter_text():
            chunks.append(text)
    except (httpx.HTTPError, RuntimeError):
        pass


def _hang_up(response: httpx.Response) -> None:
    network = response.extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if sock is not None:
        import contextlib
        import socket

        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _headers_text(response: httpx.Response) -> str:
    return "\n".join(f"{name}: {value}" for name, value in response.headers.multi_items())


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _around(text: str, needle: str) -> str:
    at = text.index(needle)
    return text[max(0, at - 80) : at + len(needle) + 80].replace("\n", " ")


def _credential_candidates(text: str) -> set[str]:
    found = set(JWT.findall(text))
    for value in _json_strings(text):
        if OPAQUE.fullmatch(value):
            found.add(value)
    return found


def _json_strings(text: str) -> Iterator[str]:
    """Every string value in a JSON body, or in each `data:` line of an event stream."""
    documents = [text]
    if "data:" in text:
        documents = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    for document in documents:
        start = document.find("{")
        if start < 0:
            continue
        try:
            value = json.loads(document[start:])
        except ValueError:
            continue
        yield from _strings(value)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _unverified_claims(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def uncovered(
    report: Report, units: Sequence[RouteUnit], mcp_methods: Sequence[str], tools: Sequence[str]
) -> list[str]:
    """What the server has that the oracle did not exercise."""
    missing = [
        f"{unit.method} {unit.template}"
        for unit in units
        if (unit.method, unit.template) not in report.covered_routes
    ]
    missing += [f"MCP {method}" for method in mcp_methods if method not in report.covered_methods]
    missing += [f"tool {tool}" for tool in tools if tool not in report.covered_tools]
    return missing


__all__ = [
    "NAME_FIELD",
    "Caller",
    "Oracle",
    "Report",
    "Request",
    "RouteUnit",
    "Seed",
    "mcp_request",
    "route_units",
    "secret",
    "uncovered",
]
