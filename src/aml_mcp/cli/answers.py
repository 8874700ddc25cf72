"""Answers to a server's input requests on the command line: `--answer KEY=VALUE`, or a prompt on a
terminal, or a clear refusal listing what was asked.

`KEY` is either a request's key (as the server named it, e.g. `dob:MRD-C000123:jane-doe`) or a field
of the requested form (e.g. `date_of_birth`, applied to every request asking for that field). A
`VALUE` that is a JSON object is the whole form; otherwise it fills the form's one field, or the
field `KEY` names. Values are read as the field's schema type (`true`, `42`, ...); strings stay
strings.

Prompts and refusals show what the server wrote (its message, field titles, descriptions, choices
and request keys), so each goes through `terminal_text`: a server cannot write escape sequences to
the terminal where the person types, e.g. to fake a password prompt.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import anyio

from aml_mcp.client.errors import InputUnavailable, describe_request
from aml_mcp.client.terminal import terminal_text


def parse_answers(pairs: Sequence[str]) -> dict[str, str]:
    """`["k=v", ...]` → `{k: v}`; a pair without `=` is a usage error."""
    answers: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--answer takes KEY=VALUE, not {pair!r}")
        answers[key] = value
    return answers


def coerce(value: str, schema: Mapping[str, Any]) -> Any:
    """`value` as the schema's type: JSON for numbers, booleans, arrays and objects; else the string."""
    kind = schema.get("type")
    if kind in (None, "string") or (isinstance(kind, list) and "string" in kind):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _fields(request: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    schema = (request.get("params") or {}).get("requestedSchema") or {}
    properties = schema.get("properties") or {}
    return {str(name): spec for name, spec in properties.items() if isinstance(spec, Mapping)}


def answer_from_flags(
    key: str, request: Mapping[str, Any], given: Mapping[str, str]
) -> dict[str, Any] | None:
    """The elicitation response the `--answer` flags give for one request, or `None`."""
    if request.get("method") != "elicitation/create":
        return None
    fields = _fields(request)
    if key in given:
        raw = given[key]
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return {"action": "accept", "content": parsed}
        if len(fields) == 1:
            ((name, spec),) = fields.items()
            return {"action": "accept", "content": {name: coerce(raw, spec)}}
        return None
    content = {name: coerce(given[name], spec) for name, spec in fields.items() if name in given}
    required = ((request.get("params") or {}).get("requestedSchema") or {}).get("required") or list(fields)
    if content and all(name in content for name in required):
        return {"action": "accept", "content": content}
    return None


Ask = Callable[[str], str]
"""Reads one line from the person at the terminal, after showing the prompt."""


def ask_on_terminal(prompt: str) -> str:
    """The prompt on stderr, the answer from stdin: stdout carries only the result (`input()` would
    write the prompt there)."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError("no more input")
    return line


def prompt_for(key: str, request: Mapping[str, Any], ask: Ask, out: TextIO) -> dict[str, Any]:
    """Ask the person at the terminal for each field of the form; an empty answer declines."""
    params = request.get("params") or {}
    print(f"\n{terminal_text(params.get('message') or key, newlines=True)}", file=out, flush=True)
    content: dict[str, Any] = {}
    for name, spec in _fields(request).items():
        label = terminal_text(spec.get("title") or name)
        choices = spec.get("enum")
        hint = (
            f" [{'/'.join(terminal_text(choice) for choice in choices)}]" if isinstance(choices, list) else ""
        )
        hint += f" ({terminal_text(spec['description'])})" if spec.get("description") else ""
        value = ask(f"{label}{hint}: ").strip()
        if not value:
            return {"action": "decline"}
        content[name] = coerce(value, spec)
    return {"action": "accept", "content": content}


class CommandLineAnswers:
    """The CLI's `on_input`: flags first, then the terminal (when there is one), else refuse."""

    def __init__(
        self,
        given: Mapping[str, str],
        *,
        interactive: bool,
        ask: Ask = ask_on_terminal,
        out: TextIO = sys.stderr,
        before_prompt: Callable[[], None] = lambda: None,
        after_prompt: Callable[[], None] = lambda: None,
    ) -> None:
        self.given = dict(given)
        self.interactive = interactive
        self._ask = ask
        self._out = out
        self.before_prompt = before_prompt
        self.after_prompt = after_prompt

    async def __call__(self, key: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
        answer = answer_from_flags(key, request, self.given)
        if answer is not None:
            return answer
        if not self.interactive or request.get("method") != "elicitation/create":
            raise InputUnavailable({key: dict(request)})
        self.before_prompt()
        try:
            return await anyio.to_thread.run_sync(
                prompt_for, key, request, self._ask, self._out, abandon_on_cancel=True
            )
        finally:
            self.after_prompt()

    def unanswerable(self, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Those of `requests` neither the flags nor a prompt can answer."""
        if self.interactive:
            return {k: dict(r) for k, r in requests.items() if r.get("method") != "elicitation/create"}
        return {k: dict(r) for k, r in requests.items() if answer_from_flags(k, r, self.given) is None}


def describe_unanswered(requests: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["the server asked for input that was not given; answer with --answer KEY=VALUE:"]
    lines += [
        f"  {terminal_text(key)}: {terminal_text(describe_request(dict(request)))}"
        for key, request in requests.items()
    ]
    return "\n".join(lines)
