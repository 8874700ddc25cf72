"""The "Connect a client" snippets of docs/connecting-clients.md are the code the interop tests run:
the TypeScript one is `ts/connect.mjs` (which `ts-client.mjs` connects with), the Python one is
`python_client.py`, run here against the real server with a token from `aml-mcp token`. (The
Inspector's command line is read from the same section by `test_typescript_clients.py`.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.interop import python_client
from tests.interop.conftest import Served

pytestmark = [pytest.mark.interop]

HERE = Path(__file__).resolve().parent
PAGE = HERE.parents[1] / "docs" / "connecting-clients.md"


def _snippet(path: Path, start: str, end: str) -> list[str]:
    """The non-blank lines between the markers, without the indentation they have in the file."""
    body = path.read_text().split(start, 1)[1].split(end, 1)[0]
    lines = [line for line in body.splitlines() if line.strip()]
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    return [line[indent:] for line in lines]


def _documented_block(language: str) -> list[str]:
    section = PAGE.read_text().split("## Connect a client", 1)[1].split("\n## ", 1)[0]
    block = section.split(f"```{language}\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_typescript_snippet_is_the_one_the_interop_client_runs() -> None:
    assert _documented_block("js") == _snippet(
        HERE / "ts" / "connect.mjs", "// docs:typescript", "// docs:end"
    )
    assert 'versionNegotiation: { mode: "auto" }' in "\n".join(_documented_block("js"))


def test_the_python_snippet_is_the_one_run_here() -> None:
    assert _documented_block("python") == _snippet(HERE / "python_client.py", "# docs:python", "# docs:end")


@pytest.mark.anyio
async def test_the_python_snippet_lists_and_searches_with_a_bearer_token(
    served: Served, token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = await python_client.search(served.mcp_url, token, "structuring cash deposits")
    assert "MRD-" in text and "HBT-" not in text
    assert "search_aml_notes" in capsys.readouterr().out
