"""The configuration reference, docs/configuration.md, generated from the settings models.

The settings models are the one statement of every setting: its name, type, default, bounds and,
through its docstring (read as the field's description), what it means. This module renders them
as a markdown page; `scripts/generate_configuration_docs.py` writes it, and a test fails whenever
the page and the models differ, so the reference cannot drift from the code.

Two conventions keep the page readable without a second source of truth:

- a docstring paragraph starting with `Default:` replaces the rendered default — for defaults
  decided at run time (`public_url`, the catalog's scopes), which the models hold as `None`; a
  `None` default without such a paragraph is an error, since "null" tells a reader nothing;
- a field whose type is a settings model (`auth.dev`) is a group with a section of its own; a list
  of models (`auth.issuers`) or an optional model (`auth.introspection`) gets a row for the whole
  value and a section for the keys of one item.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from aml_mcp.config import Settings

DEFAULT_MARK = "Default:"
"""Starts the docstring paragraph that says what a default stands for."""

SEE_ALSO: dict[str, str] = {
    "tasks": "[Tasks and listen streams](tasks-and-streams.md)",
    "auth": "[Security](security.md)",
    "auth.dev": "[the development authorization server](security.md#the-development-authorization-server)",
    "aml": "[The AML tools](aml-tools.md)",
}
"""Where each group's behaviour is explained (paths relative to docs/)."""

_INTRO = """\
# Configuration

<!-- Generated from the settings models by scripts/generate_configuration_docs.py: edit the field
     docstrings in src/aml_mcp/config.py and the features' settings.py, then regenerate. -->

Every setting has an embedded default, so `./dev serve` runs with no configuration at all. Each
source below overrides the ones before it:

1. the defaults in the tables below;
2. a TOML file named with `--config FILE`: top-level settings as plain keys, groups as tables
   (`[tasks]`, `[auth]`, `[auth.dev]`, `[aml]`);
3. environment variables: `{prefix}` and the setting's name in capitals, a group and its setting
   joined by `{delimiter}` (`{example_env}`); lists and objects are written as JSON
   (`{example_json}`);
4. command-line flags: `aml-mcp serve --host --port --data-dir`, and `--data-dir` on every command
   that works on a server's data (see [Operations](operations.md)).

An unknown key in the TOML file, or an unknown name inside a group in the environment, stops the
command with an error naming it; a misspelled top-level variable is simply never read, like any
environment variable nobody asks for. Bad values (out of range, unparseable) are refused the same
way.

```toml
# aml.toml: aml-mcp serve --config aml.toml
port = 8080
allowed_hosts = ["aml.internal:*"]

[tasks]
max_concurrent = 8

[auth.dev]
access_token_ttl_seconds = 3600
```

Production settings (a trusted identity provider, the development authorization server off) are
in [Security](security.md#production).
"""


@dataclass(frozen=True, slots=True)
class _Nested:
    """A field whose value is made of settings models: how, and of which model."""

    kind: str
    """`group` (a model), `list` (a list of models) or `optional` (a model or nothing)."""
    model: type[BaseModel]


def _model(candidate: Any) -> type[BaseModel] | None:
    return candidate if isinstance(candidate, type) and issubclass(candidate, BaseModel) else None


def _nested(info: FieldInfo) -> _Nested | None:
    annotation = info.annotation
    model = _model(annotation)
    if model is not None:
        return _Nested("group", model)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and len(args) == 1 and (model := _model(args[0])) is not None:
        return _Nested("list", model)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        models = [m for m in map(_model, args) if m is not None]
        if len(models) == 1 and len(args) == 2:
            return _Nested("optional", models[0])
    return None


def _paragraphs(description: str) -> list[str]:
    """A docstring's paragraphs, each on one line (a table cell holds no line break)."""
    return [" ".join(block.split()) for block in description.split("\n\n") if block.strip()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _value(value: Any) -> str:
    """A default as it is written in TOML or JSON (lists and tables as JSON)."""
    if isinstance(value, SecretStr):
        return "`(secret)`"
    if isinstance(value, PurePath):
        value = str(value)
    elif isinstance(value, Enum):
        value = value.value
    elif isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _bounds(info: FieldInfo) -> str | None:
    """The numeric bounds a value must keep, in words."""
    lower = upper = None
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            lower = f"{rule.ge}"
        elif isinstance(rule, annotated_types.Gt):
            lower = f"more than {rule.gt}"
        elif isinstance(rule, annotated_types.Le):
            upper = f"{rule.le}"
        elif isinstance(rule, annotated_types.Lt):
            upper = f"less than {rule.lt}"
    if lower is not None and upper is not None:
        return f"{lower} to {upper}" if lower[0].isdigit() else f"{lower}, at most {upper}"
    if lower is not None:
        return f"{lower} or more" if lower[0].isdigit() else lower
    if upper is not None:
        return f"at most {upper}"
    return None


@dataclass(frozen=True, slots=True)
class _Row:
    setting: str
    env: str | None
    default: str
    meaning: str

    def markdown(self) -> str:
        env = f"`{self.env}`" if self.env else "—"
        cells = (f"`{self.setting}`", env, _cell(self.default), _cell(self.meaning))
        return "| " + " | ".join(cells) + " |"


def _row(setting: str, env: str | None, info: FieldInfo) -> _Row:
    if not info.description:
        raise ValueError(f"setting {setting} has no description: give the field a docstring")
    paragraphs = _paragraphs(info.description)
    stated = [p for p in paragraphs if p.startswith(DEFAULT_MARK)]
    meaning = [p for p in paragraphs if not p.startswith(DEFAULT_MARK)]
    if not meaning:
        raise ValueError(f"setting {setting}: its docstring says only what the default is")
    if stated:
        default = stated[0].removeprefix(DEFAULT_MARK).strip().removesuffix(".")
    elif info.is_required():
        default = "required"
    else:
        value = info.get_default(call_default_factory=True)
        if value is None:
            raise ValueError(
                f"setting {setting} defaults to None: say what that means in a "
                f"'{DEFAULT_MARK}' paragraph of its docstring"
            )
        default = _value(value)
    bounds = _bounds(info)
    if bounds is not None:
        meaning.append(f"Allowed: {bounds}.")
    return _Row(setting, env, default, " ".join(meaning))


class _Page:
    """Walks the settings models depth first, one section per group, in field order."""

    def __init__(self, model: type[BaseModel]) -> None:
        config = getattr(model, "model_config", {})
        self.prefix = str(config.get("env_prefix", ""))
        self.delimiter = str(config.get("env_nested_delimiter") or "__")
        self.model = model

    def env(self, path: tuple[str, ...]) -> str:
        return self.prefix + self.delimiter.join(path).upper()

    def sections(self) -> Iterator[str]:
        intro = "Where the server listens, what it keeps, and which HTTP requests it accepts."
        yield from self._section(self.model, (), "Server", intro, level=2, env=True, item=False)

    def _section(
        self,
        model: type[BaseModel],
        path: tuple[str, ...],
        title: str,
        intro: str,
        *,
        level: int,
        env: bool,
        item: bool,
    ) -> Iterator[str]:
        lines = [f"{'#' * level} {title}", "", intro]
        see_also = SEE_ALSO.get(".".join(path))
        if see_also is not None:
            lines[-1] += f" See {see_also}."
        lines += ["", "| Setting | Environment variable | Default | Meaning |", "|---|---|---|---|"]
        later: list[tuple[str, FieldInfo, _Nested]] = []
        for name, info in model.model_fields.items():
            nested = _nested(info)
            setting = ".".join(path) + ("[]." if item else ".") + name if path else name
            if nested is not None and nested.kind == "group":
                later.append((name, info, nested))
                continue
            lines.append(_row(setting, self.env((*path, name)) if env else None, info).markdown())
            if nested is not None:
                later.append((name, info, nested))
        yield "\n".join(lines) + "\n"
        # The top-level table and the groups are siblings (##); what a group holds is one level down.
        inner = level if not path else level + 1
        for name, info, nested in later:
            yield from self._nested_section((*path, name), info, nested, level=inner, env=env)

    def _nested_section(
        self, path: tuple[str, ...], info: FieldInfo, nested: _Nested, *, level: int, env: bool
    ) -> Iterator[str]:
        dotted = ".".join(path)
        described = _paragraphs(info.description or "")
        summary = next((p for p in described if not p.startswith(DEFAULT_MARK)), "")
        if nested.kind == "group":
            yield from self._section(
                nested.model, path, f"`{dotted}`", summary, level=level, env=env, item=False
            )
        elif nested.kind == "list":
            intro = (
                f"{_docstring(nested.model)} Each item of `{dotted}` is a table (TOML) or object "
                f"(JSON) with these keys; in the environment the whole list is one JSON value, "
                f"`{self.env(path)}`."
            )
            yield from self._section(
                nested.model, path, f"`{dotted}` items", intro, level=level, env=False, item=True
            )
        else:
            intro = (
                f"{_docstring(nested.model)} Set as a TOML table `[{dotted}]`, as one JSON object in "
                f"`{self.env(path)}`, or key by key in the variables below (a secret from the "
                "environment, the rest from the file, say)."
            )
            yield from self._section(
                nested.model, path, f"`{dotted}`", intro, level=level, env=env, item=False
            )


def _docstring(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def configuration_markdown(model: type[BaseModel] = Settings) -> str:
    """The configuration reference page for `model` (the server's `Settings` unless a test says otherwise)."""
    page = _Page(model)
    example_env = page.env(("auth", "dev", "enabled")) + "=false"
    example_json = page.env(("allowed_hosts",)) + """='["aml.internal:*"]'"""
    intro = _INTRO.format(
        prefix=page.prefix, delimiter=page.delimiter, example_env=example_env, example_json=example_json
    )
    return "\n".join([intro, *page.sections()])
