"""Expected failures said in one line: what went wrong, and the exit status the docs give it.

A command that meets a failure its user can do something about (a refused or expired token, a
server that is down, a redirect the client does not follow, a sign-in that failed, an answer too
large, settings that do not validate) prints one line on stderr and exits with its documented
status; `--debug` prints the traceback too. Anything else is a bug and keeps its traceback.

The MCP SDK runs each connection in task groups, so an error raised under a request usually
arrives as an `ExceptionGroup` (nested), and the useful part may be the error the SDK was handling
when it raised its own (a failed `server/discover` before the fallback `initialize`): `explain_call`
looks at every leaf of the group and along each leaf's causes, and reports the most specific
failure it finds, when every leaf is one.

This module imports only the standard library (every command imports it): the classes it matches
are looked up among the modules already imported, since a command that never imported the SDK
(or pydantic) cannot have met its errors.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_USAGE = 2
EXIT_PROTOCOL = 6
"""`aml-mcp call`/`task`: the server refused the request or could not be reached, or the client
refused its answer (`aml_mcp.cli.calls.EXIT_PROTOCOL`)."""
EXIT_STDOUT_CLOSED = 141
"""The reader of stdout went away (`aml-mcp call ... | head`): nothing is said, and the status is
the one a shell reports for a command SIGPIPE ended (128 + 13), as for any other tool in a pipe."""

CHAIN_LIMIT = 16
"""How far back along `__cause__`/`__context__` a leaf is searched (a cycle or a long chain ends)."""


class StdoutClosed(Exception):
    """Writing the result to stdout failed because its reader is gone: not the server's fault."""


@dataclass(frozen=True)
class Failure:
    """An expected failure: `line` to print after `aml-mcp: ` (None: print nothing), and the status."""

    line: str | None
    exit_code: int


def report(failure: Failure, error: BaseException, *, debug: bool) -> int:
    """Say `failure` (after the traceback of `error` with `--debug`); its exit status."""
    if debug:
        traceback.print_exception(error)
    if failure.line is not None:
        print(f"aml-mcp: {failure.line}", file=sys.stderr, flush=True)
    return failure.exit_code


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions of a (nested) exception group, or `[error]` for any other exception."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what caused it or was being handled when it was raised, and so on."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < CHAIN_LIMIT:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _class(module: str, name: str) -> type[BaseException] | None:
    """A class of an already imported module (None when the module was never imported)."""
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _is(error: BaseException, module: str, name: str) -> bool:
    cls = _class(module, name)
    return cls is not None and isinstance(error, cls)


def _text(value: object) -> str:
    """What a server (or an error quoting it) wrote, safe to print on a terminal, on one line."""
    from aml_mcp.client.terminal import terminal_text

    return " ".join(terminal_text(value).split())


# `aml-mcp call` and `aml-mcp task` -----------------------------------------------------------------

PARSE_FAILURE_PREFIX = "Failed to parse JSON response: "
"""How the SDK's transport words an answer it could not read (the client's own refusals included)."""
REDIRECT_PREFIX = "Redirect to "
"""How the SDK's transport words a redirect it did not follow (another origin, or to plain http)."""
TOKEN_ERRORS = frozenset({"invalid_token", "unauthorized"})
"""`error.data.error` of this server's 401 bodies (RFC 6750): no token, or one it did not accept."""


def explain_call(error: BaseException, *, url: str, login: bool) -> Failure | None:
    """The one-line failure of `aml-mcp call`/`task` against `url` (`login`: `--login` was given),
    or None when some part of `error` is not an expected failure (a bug: let it show)."""
    found: list[tuple[int, Failure]] = []
    for leaf in leaves(error):
        ranked = [hit for hit in (_call_failure(link, url, login) for link in chain(leaf)) if hit is not None]
        if not ranked:
            return None
        found.append(min(ranked, key=lambda hit: hit[0]))
    return min(found, key=lambda hit: hit[0])[1] if found else None


def _call_failure(error: BaseException, url: str, login: bool) -> tuple[int, Failure] | None:
    """(rank, failure) for one exception of a chain; the lowest rank is the most specific."""
    where = _text(url)
    if isinstance(error, StdoutClosed):
        return 0, Failure(None, EXIT_STDOUT_CLOSED)
    if _is(error, "aml_mcp.client.errors", "AnswerRefused"):
        return 1, Failure(_text(error), EXIT_PROTOCOL)
    if _is(error, "mcp.client.auth.exceptions", "OAuthFlowError") or _is(
        error, "aml_mcp.client.oauth", "AuthorizationRefused"
    ):
        return 2, Failure(f"sign-in to {where} failed: {_text(error)}", EXIT_PROTOCOL)
    if isinstance(error, TimeoutError) and login:
        return 3, Failure(f"sign-in to {where} failed: {_text(error) or 'it timed out'}", EXIT_PROTOCOL)
    if _is(error, "mcp.shared.exceptions", "MCPError"):
        return _refusal(error, where, login)
    if _is(error, "httpx2", "HTTPError") or isinstance(error, OSError):
        return 8, Failure(f"cannot reach {where}: {_text(error) or type(error).__name__}", EXIT_PROTOCOL)
    return None


def _refusal(error: Any, where: str, login: bool) -> tuple[int, Failure]:
    """An `MCPError`: the server's refusal (a token it did not accept, a scope the token lacks, any
    JSON-RPC error), or the client's transport declining an answer or a redirect."""
    message: str = error.message
    data: Mapping[str, Any] = error.data if isinstance(error.data, Mapping) else {}
    oauth_error = data.get("error")
    description = _text(data.get("error_description") or message)
    if message.startswith(PARSE_FAILURE_PREFIX):
        reason = _text(message.removeprefix(PARSE_FAILURE_PREFIX))
        return 4, Failure(f"the answer of {where} could not be read: {reason}", EXIT_PROTOCOL)
    if message.startswith(REDIRECT_PREFIX):
        return 5, Failure(f"{where} answered with a redirect, not followed: {_text(message)}", EXIT_PROTOCOL)
    if oauth_error in TOKEN_ERRORS:
        if oauth_error == "unauthorized" and not login:
            hint = "give --token (or set AML_MCP_TOKEN), or sign in with --login"
            return 6, Failure(f"{where} needs a token: {hint}", EXIT_PROTOCOL)
        return 6, Failure(
            f"{where} refused the token: {description} (get a new token, or sign in with --login)",
            EXIT_PROTOCOL,
        )
    if oauth_error == "insufficient_scope":
        scope = _text(data.get("scope") or "")
        lacks = f" (the token lacks {scope})" if scope else ""
        return 6, Failure(f"{where} refused: {description}{lacks}", EXIT_PROTOCOL)
    return 9, Failure(f"the server refused: {_text(message)} (code {error.code})", EXIT_PROTOCOL)


# Every command ---------------------------------------------------------------------------------------


def explain_settings(error: BaseException, config_file: Path | None) -> str | None:
    """Settings that do not validate, in one line naming each setting and where it was given (an
    environment variable, the `--config` file), instead of pydantic's report; None for any other
    error."""
    validation = _class("pydantic_core", "ValidationError")
    if validation is None or not isinstance(error, validation):
        return None
    problems = [_problem(item, config_file) for item in error.errors(include_url=False)]  # type: ignore[attr-defined]
    return "; ".join(problems) if problems else None


def _problem(item: Mapping[str, Any], config_file: Path | None) -> str:
    location = tuple(str(part) for part in item.get("loc") or ())
    name = ".".join(location)
    source = _source(location, config_file)
    if item.get("type") == "extra_forbidden":
        return f"unknown setting `{name}`{source} (docs/configuration.md lists every setting)"
    message = str(item.get("msg") or "not valid").removeprefix("Value error, ")
    if not name:
        return f"settings refused: {message}"
    given = item.get("input")
    # repr() shows a control or format character escaped: the value may come from anywhere.
    shown = f" (given {given!r})" if isinstance(given, str | int | float | bool) else ""
    return f"setting `{name}`{source}: {message}{shown}"


ENV_PREFIX = "AML_MCP_"
ENV_NESTING = "__"


def _source(location: tuple[str, ...], config_file: Path | None) -> str:
    """Where a setting was given: the environment variable that holds it (or holds the table it is
    in), else the settings file; empty when neither says."""
    import os

    names = {key.upper() for key in os.environ}
    for depth in range(len(location), 0, -1):
        variable = ENV_PREFIX + ENV_NESTING.join(location[:depth]).upper()
        if variable in names:
            return f" in the environment variable {variable}"
    if config_file is not None:
        return f" in {config_file}"
    return ""
