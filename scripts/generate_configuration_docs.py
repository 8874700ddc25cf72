"""Write docs/configuration.md from the settings models: `python scripts/generate_configuration_docs.py`.

The page is generated (`aml_mcp.config_reference`), never edited by hand: change a field's docstring
in the settings models, then run this script. `tests/test_configuration_docs.py` fails while the
page and the models differ. `--check` only reports whether the page is current (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aml_mcp.config_reference import configuration_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
REGENERATE = "python scripts/generate_configuration_docs.py"


def main() -> int:
    parser = argparse.ArgumentParser(description="Write docs/configuration.md from the settings models.")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the page is stale")
    args = parser.parse_args()
    page = configuration_markdown()
    current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else None
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
