"""The public API is exactly what `aml_mcp.__all__` and `aml_mcp.catalog.__all__` list, and it works.

Anything not exported is internal; a change to these lists is a change to what embedders and
tool authors may rely on, so it must be made here on purpose.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import aml_mcp
import aml_mcp.catalog

PUBLIC = [
    "Catalog",
    "Component",
    "Execution",
    "InputRequest",
    "InvocationContext",
    "Principal",
    "PromptRegistry",
    "PromptSpec",
    "ResourceRegistry",
    "ResourceSpec",
    "ResourceTemplateSpec",
    "Settings",
    "ToolRegistry",
    "ToolSpec",
    "__version__",
    "arguments_schema",
    "build_app",
    "elicit_form",
    "load_settings",
    "request_input",
    "tool_error",
]

CATALOG = [
    "Catalog",
    "Contents",
    "Execution",
    "InputRequest",
    "InvocationContext",
    "PromptRegistry",
    "PromptSpec",
    "ResourceRegistry",
    "ResourceSpec",
    "ResourceTemplateSpec",
    "ToolBody",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "arguments_schema",
    "client_supports",
    "elicit_form",
    "list_roots",
    "missing_capability",
    "request_input",
    "sample",
    "tool_error",
]


def test_exported_members_are_pinned() -> None:
    assert aml_mcp.__all__ == PUBLIC
    assert aml_mcp.catalog.__all__ == CATALOG


def test_every_exported_name_exists_and_classes_and_functions_say_where_they_live() -> None:
    for package, names in ((aml_mcp, PUBLIC), (aml_mcp.catalog, CATALOG)):
        for name in names:
            member = getattr(package, name)
            if inspect.isclass(member) or inspect.isfunction(member):
                assert member.__module__.startswith("aml_mcp."), name
                assert member.__doc__ or name in {"Catalog"}, f"{name} has no docstring"


def test_the_version_has_one_home() -> None:
    assert aml_mcp.__version__ == importlib.import_module("aml_mcp._version").__version__
    from importlib.metadata import version

    assert version("aml-mcp") == aml_mcp.__version__


def test_the_conformance_fixtures_use_only_the_public_api() -> None:
    source = inspect.getsource(importlib.import_module("aml_mcp.conformance.fixtures"))
    imported = [
        line.split()[1]
        for line in source.splitlines()
        if line.startswith("from aml_mcp") or line.startswith("import aml_mcp")
    ]
    assert imported, "the fixtures import nothing from aml_mcp?"
    assert set(imported) <= {"aml_mcp", "aml_mcp.catalog", "aml_mcp.conformance.media"}, imported


def test_the_aml_domain_exports_the_drafter_seam() -> None:
    import aml_mcp.aml

    assert aml_mcp.aml.__all__ == ["AnalystFacts", "CaseFile", "Drafter", "SarDraft"]
    assert hasattr(aml_mcp.aml.Drafter, "draft")


def test_the_package_is_marked_typed() -> None:
    """Embedders who run mypy read the inline types instead of being told there are no stubs."""
    assert (Path(aml_mcp.__file__).parent / "py.typed").is_file()


def test_the_client_is_its_own_public_subpackage() -> None:
    """`aml_mcp.client` is public on its own (`aml_mcp.__all__` stays the server's API)."""
    import aml_mcp.client

    assert aml_mcp.client.__all__ == [
        "DEFAULT_MAX_ANSWER_BYTES",
        "TASKS_EXTENSION",
        "AnswerRefused",
        "AnswerTooLarge",
        "BearerAuth",
        "CompressedAnswer",
        "InputHandler",
        "InputUnavailable",
        "McpClient",
        "TaskCancelled",
        "TaskEnded",
        "TaskFailed",
        "TaskHandle",
        "TaskState",
        "WrongTask",
        "new_traceparent",
    ]
    for name in aml_mcp.client.__all__:
        assert hasattr(aml_mcp.client, name), name
