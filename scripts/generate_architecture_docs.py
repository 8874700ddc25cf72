"""Write docs/architecture.md's layers from the contracts: `python scripts/generate_architecture_docs.py`.

The contracts in `pyproject.toml` (`[tool.importlinter]`) are what CI enforces; a layer line typed
into the page by hand stops being true the first time a package moves. So the block between the
markers in the page's "Layers" section is rendered from the contracts, never edited by hand: change
the contracts, then run this script. `tests/test_architecture_docs.py` fails while the page and the
contracts differ. `--check` only reports whether the page is current (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PYPROJECT = ROOT / "pyproject.toml"
REGENERATE = "python scripts/generate_architecture_docs.py"
BEGIN = f"<!-- generated from pyproject.toml's import contracts by `{REGENERATE}`: edit those, not this -->"
END = "<!-- end of the generated layers -->"
WIDTH = 100
"""The page's line length; a layer line wraps before it, continuing with an indented `>`."""

Contract = Mapping[str, Any]


def contracts(pyproject: Path = PYPROJECT) -> list[Contract]:
    """The import-linter contracts, in the order `pyproject.toml` declares them."""
    declared: list[Contract] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"][
        "contracts"
    ]
    return declared


def _short(module: str, prefix: str) -> str:
    return module.removeprefix(prefix + ".")


def _layer_line(layers: Sequence[str], prefix: str) -> str:
    """`a > b | c > d`, wrapped before WIDTH at a `>`, never inside a group of siblings."""
    names = [" | ".join(_short(m.strip(), prefix) for m in layer.split("|")) for layer in layers]
    lines = [names[0]]
    for name in names[1:]:
        if len(lines[-1]) + len(" > ") + len(name) > WIDTH:
            lines.append(f"    > {name}")
        else:
            lines[-1] += f" > {name}"
    return "\n".join(lines)


def _modules(expressions: Sequence[str], root: str, everything: Sequence[str], every: str = "every") -> str:
    """Backticked names, or "every layer" (but one or two) of the top line when that is the list."""
    named = [_short(e, root) for e in expressions]
    left_out = [m for m in everything if m not in named]
    if set(named) >= set(everything) and len(everything) > 3:
        extra = [m for m in named if m not in everything]
        return f"{every} layer" + "".join(f", `{m}`" for m in extra)
    if set(named) <= set(everything) and 0 < len(left_out) <= 2 and len(everything) > 3:
        return f"{every} layer but " + " and ".join(f"`{m}`" for m in left_out)
    return ", ".join(f"`{m}`" for m in named)


def layers_markdown(declared: Sequence[Contract]) -> str:
    """The generated block: each `layers` contract as a line, the `forbidden` ones as a table."""
    root = next(c["layers"][0].split(".")[0].strip() for c in declared if c["type"] == "layers")
    parts: list[str] = []
    top_layers: list[str] = []
    for contract in declared:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers") or []
        if not containers:
            top_layers = [_short(m.strip(), root) for layer in contract["layers"] for m in layer.split("|")]
            parts.append(f"```\n{_layer_line(contract['layers'], root)}\n```")
        for container in containers:
            folder = _short(container, root).replace(".", "/") + "/"
            parts.append(f"Inside `{folder}`:\n\n```\n{_layer_line(contract['layers'], container)}\n```")
    forbidden = [
        f"| {contract['name']} | {_modules(contract['source_modules'], root, top_layers)} "
        f"| {_modules(contract['forbidden_modules'], root, top_layers, 'any')} |"
        for contract in declared
        if contract["type"] == "forbidden"
    ]
    if forbidden:
        parts.append("\n".join(["| Contract | Modules | May not import |", "|---|---|---|", *forbidden]))
    return "\n\n".join(parts)


def render(page: str, declared: Sequence[Contract]) -> str:
    """`page` with the block between the markers replaced by what the contracts say now."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"the page needs one generated block, between\n{BEGIN}\nand\n{END}")
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{layers_markdown(declared)}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Write the layers of docs/architecture.md from the contracts."
    )
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the page is stale")
    args = parser.parse_args()
    current = PAGE.read_text(encoding="utf-8")
    page = render(current, contracts())
    if args.check:
        if current != page:
            print(f"{PAGE} is out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if current != page:
        PAGE.write_text(page, encoding="utf-8")
        print(f"wrote {PAGE}")
    else:
        print(f"{PAGE} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
