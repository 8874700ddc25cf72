"""docs/configuration.md is generated from the settings models, and says what the server does.

The page must equal what `configuration_markdown()` renders today (so a changed field, default or
docstring without a regenerated page fails here); every setting must carry a description; every
environment variable the page names must be one the server reads, with the effect stated; and
the links between the README and the docs pages must lead somewhere.
"""

from __future__ import annotations

import enum
import json
import os
import re
import types
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools import aml_catalog
from aml_mcp.config import Settings, load_settings
from aml_mcp.config_reference import configuration_markdown

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
REGENERATE = "python scripts/generate_configuration_docs.py"
ENV_NAME = re.compile(r"\bAML_MCP_[A-Z0-9_]*[A-Z0-9]\b")
PREFIX, DELIMITER = "AML_MCP_", "__"

SAMPLES: dict[str, str] = {
    "AML_MCP_HOST": "127.0.0.2",
    "AML_MCP_LOG_LEVEL": "debug",
    "AML_MCP_PUBLIC_URL": "https://aml.bank.example/mcp",
    "AML_MCP_AUTH__DEV__PATH": "/dev-oauth",
    "AML_MCP_AML__DRAFTER": "bank_drafters:make_drafter",
    "AML_MCP_AUTH__SCOPE_HIERARCHY": '{"aml:lead": ["aml:read", "aml:draft"]}',
    "AML_MCP_AUTH__ISSUERS": '[{"issuer": "https://login.bank.example", "algorithms": ["ES256"]}]',
    "AML_MCP_AUTH__INTROSPECTION": json.dumps(
        {
            "endpoint": "https://login.bank.example/introspect",
            "issuer": "https://login.bank.example",
            "client_id": "aml-mcp",
            "client_secret": "from-a-vault",
        }
    ),
    "AML_MCP_AUTH__INTROSPECTION__ENDPOINT": "https://login.bank.example/oauth2/introspect",
    "AML_MCP_AUTH__INTROSPECTION__ISSUER": "https://sso.bank.example",
    "AML_MCP_DATABASE_URL": "postgresql://aml@db.bank.example:5432/aml",
    "AML_MCP_DATABASE_SCHEMA": "aml_prod",
    "AML_MCP_ROLE": "api",
    "AML_MCP_METRICS_PORT": "9464",
}
"""Values for variables whose type alone does not give a valid one (a URL, an import path, JSON)."""

INTROSPECTION_KEYS = {
    "AML_MCP_AUTH__INTROSPECTION__ENDPOINT": "https://login.bank.example/introspect",
    "AML_MCP_AUTH__INTROSPECTION__ISSUER": "https://login.bank.example",
    "AML_MCP_AUTH__INTROSPECTION__CLIENT_ID": "aml-mcp",
    "AML_MCP_AUTH__INTROSPECTION__CLIENT_SECRET": "from-a-vault",
}
"""The required keys of `auth.introspection`: one of them alone is not a valid setting."""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets may count (a developer's own AML_MCP_* must not)."""
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (directly, or as `X | None`); lists of models are values."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and _model_in(args[0]) is not None:
        return _model_in(args[0])
    return None


def _settings_models(model: type[BaseModel] = Settings) -> list[type[BaseModel]]:
    """Every model the settings are made of: groups, optional groups and list items."""
    found = [model]
    for info in model.model_fields.values():
        inner = _model_in(info.annotation) or _list_item_model(info.annotation)
        if inner is not None and inner not in found:
            found += [m for m in _settings_models(inner) if m not in found]
    return found


def _field(env_name: str) -> tuple[tuple[str, ...], FieldInfo]:
    """The setting an environment variable names, found by walking the models (KeyError: none)."""
    path = tuple(env_name.removeprefix(PREFIX).lower().split(DELIMITER))
    model: type[BaseModel] | None = Settings
    info: FieldInfo | None = None
    for part in path:
        if model is None:
            raise KeyError(env_name)
        info = model.model_fields[part]
        model = _model_in(info.annotation)
    assert info is not None
    return path, info


def _loaded(settings: Settings, path: tuple[str, ...]) -> Any:
    value: Any = settings
    for part in path:
        value = getattr(value, part)
    return value


def _sample(env_name: str, info: FieldInfo) -> str:
    """A valid value for the variable, as the environment spells it, that differs from the default."""
    if env_name in SAMPLES:
        return SAMPLES[env_name]
    default = info.get_default(call_default_factory=True)
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # `X | None`: a sample of X
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if annotation is bool:
        return "false" if default else "true"
    if annotation in (int, float):
        return str(default + 1)
    if typing.get_origin(annotation) is list:
        return '["sample-value"]'
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return str(next(m.value for m in annotation if m != default))
    return "sample-value"


def _page_env_names() -> list[str]:
    """The variables the page names (none while it is missing: the first test then says how to make it)."""
    text = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
    return sorted(set(ENV_NAME.findall(text)))


# -- the page is the models' ------------------------------------------------------------------------


def test_the_page_is_what_the_settings_models_generate() -> None:
    assert PAGE.is_file(), f"docs/configuration.md is missing: run {REGENERATE}"
    assert PAGE.read_text(encoding="utf-8") == configuration_markdown(), (
        "docs/configuration.md differs from the settings models (a field, default or docstring changed): "
        f"regenerate it with `{REGENERATE}` (the project's .venv/bin/python) and commit the page"
    )


def test_every_setting_of_every_settings_model_has_a_description() -> None:
    models = _settings_models()
    assert len(models) >= 7, [m.__name__ for m in models]  # Settings, tasks, auth, issuers, ...
    undescribed = [
        f"{model.__name__}.{name}"
        for model in models
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]
    assert not undescribed, f"settings without a docstring: {undescribed}"


def test_the_generator_refuses_an_undescribed_setting_or_an_unexplained_none() -> None:
    class Undescribed(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="X_", use_attribute_docstrings=True)
        size: int = 1

    class UnexplainedNone(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="X_", use_attribute_docstrings=True)
        url: str | None = None
        """Where it is."""

    class ExplainedNone(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="X_", use_attribute_docstrings=True)
        url: str | None = None
        """Where it is.

        Default: wherever it was last time.
        """

    with pytest.raises(ValueError, match="size has no description"):
        configuration_markdown(Undescribed)
    with pytest.raises(ValueError, match="url defaults to None"):
        configuration_markdown(UnexplainedNone)
    assert "| `url` | `X_URL` | wherever it was last time | Where it is. |" in configuration_markdown(
        ExplainedNone
    )


def test_defaults_decided_at_run_time_read_as_what_the_server_uses() -> None:
    page = configuration_markdown()
    # public_url: the audience a token must carry when none is configured.
    assert "| `public_url` | `AML_MCP_PUBLIC_URL` | `http://HOST:PORT/mcp`" in page
    assert load_settings(host="127.0.0.1", port=8123).resource_url == "http://127.0.0.1:8123/mcp"
    # The scope defaults come from the served catalog: the page must name the AML catalog's own.
    catalog = aml_catalog(cast(Any, SimpleNamespace(casework=None)), AmlSettings())
    hierarchy_row = next(line for line in page.splitlines() if line.startswith("| `auth.scope_hierarchy`"))
    assert json.dumps({k: list(v) for k, v in catalog.scope_hierarchy.items()}) in hierarchy_row
    scopes_row = next(line for line in page.splitlines() if line.startswith("| `auth.scopes_supported`"))
    default_cell = scopes_row.split(" | ")[2]
    assert sorted(re.findall(r"`(aml:[a-z]+)`", default_cell)) == sorted(catalog.tools.scopes)


# -- the variables the page names are the ones the server reads ---------------------------------------


def test_the_page_names_a_variable_for_every_setting() -> None:
    named = set(_page_env_names())
    expected: set[str] = set()

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for name, info in model.model_fields.items():
            inner = _model_in(info.annotation)
            if inner is not None and not info.is_required() and info.default is not None:
                walk(inner, (*path, name))  # a group: its settings have the variables
                continue
            expected.add(PREFIX + DELIMITER.join((*path, name)).upper())
            if inner is not None:
                walk(inner, (*path, name))  # an optional group: the whole value and each key

    walk(Settings, ())
    assert expected - named == set(), "settings whose variable the page does not name"


@pytest.mark.parametrize("env_name", _page_env_names())
def test_every_variable_the_page_names_takes_effect(env_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        path, info = _field(env_name)
    except KeyError:
        pytest.fail(f"docs/configuration.md names {env_name}, which is no setting")
    if env_name.startswith("AML_MCP_AUTH__INTROSPECTION__"):
        for name, value in INTROSPECTION_KEYS.items():
            monkeypatch.setenv(name, value)
    if env_name == "AML_MCP_ROLE":  # an API-only replica needs the shared database
        monkeypatch.setenv("AML_MCP_DATABASE_URL", SAMPLES["AML_MCP_DATABASE_URL"])
    raw = _sample(env_name, info)
    monkeypatch.setenv(env_name, raw)
    adapter: TypeAdapter[Any] = TypeAdapter(info.annotation)
    expected = adapter.validate_json(raw) if raw[:1] in "[{" else adapter.validate_python(raw)
    assert expected != info.get_default(call_default_factory=True), (
        f"the sample for {env_name} is the default"
    )
    loaded = _loaded(load_settings(), path)
    if env_name == "AML_MCP_AML__EXTRA_TYPOLOGY_CODES":
        expected = ["sample_value"]  # codes are normalised as they are read
    assert loaded == expected, f"{env_name}={raw} was not read as {'.'.join(path)}"


def test_representative_variables_change_what_the_server_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AML_MCP_PORT", "9123")
    monkeypatch.setenv("AML_MCP_AUTH__DEV__ENABLED", "false")
    monkeypatch.setenv("AML_MCP_AML__EXTRA_TYPOLOGY_CODES", '["Trade-Based Laundering"]')
    monkeypatch.setenv("AML_MCP_TASKS__MAX_CONCURRENT", "4")
    settings = load_settings()
    assert settings.resource_url == "http://127.0.0.1:9123/mcp"
    assert settings.auth.dev.enabled is False
    assert settings.aml.extra_typology_codes == ["trade_based_laundering"]
    assert settings.tasks.max_concurrent == 4
    assert load_settings(port=9200).port == 9200  # a flag still wins

    # "key by key ... a secret from the environment, the rest from the file"
    config = tmp_path / "aml.toml"
    config.write_text(
        '[auth.introspection]\nendpoint = "https://login.bank.example/introspect"\n'
        'issuer = "https://login.bank.example"\nclient_id = "aml-mcp"\n'
    )
    monkeypatch.setenv("AML_MCP_AUTH__INTROSPECTION__CLIENT_SECRET", "from-a-vault")
    introspection = load_settings(config).auth.introspection
    assert introspection is not None
    assert introspection.client_id == "aml-mcp"
    assert introspection.client_secret.get_secret_value() == "from-a-vault"


def test_unknown_names_are_treated_as_the_page_says(monkeypatch: pytest.MonkeyPatch) -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert "a misspelled top-level variable is simply never read" in page
    monkeypatch.setenv("AML_MCP_PORTT", "1")
    assert load_settings().port == 8000
    assert "an unknown name inside a group in the environment" in page
    monkeypatch.setenv("AML_MCP_AUTH__TENANT_CLAIMS", "bank")
    with pytest.raises(ValueError, match="tenant_claims"):
        load_settings()


# -- links --------------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize(
    "document", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
)
def test_links_in_the_readme_and_docs_lead_somewhere(document: str) -> None:
    source = ROOT / document
    text = source.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"^[a-z]+:", target):
            continue  # an absolute URL
        file_part, _, anchor = target.partition("#")
        linked = (source.parent / file_part).resolve() if file_part else source
        missing_anchor = (
            linked.suffix == ".md"
            and linked.exists()
            and bool(anchor)
            and anchor not in _anchors(linked.read_text(encoding="utf-8"))
        )
        if not linked.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{document}: links to nothing: {broken}"
