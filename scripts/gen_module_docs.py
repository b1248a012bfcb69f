"""Regenerate the module reference, docs/modules/, from the modules' docstrings and schemas.

python scripts/gen_module_docs.py          # rewrite docs/modules/ (one page per module + README.md)
python scripts/gen_module_docs.py --check  # exit 1 if any page there is stale, missing or left over
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine import docs, registry

OUT = REPO / "docs" / "modules"


def pages() -> dict[str, str]:
    """File name -> content, for every page the reference should have."""
    by_room = sorted((registry.room_of(name), name) for name in registry.module_names())
    specs = [(room, registry.get(name)) for room, name in by_room]
    found = {f"{spec.name}.md": docs.render_markdown(spec) for _, spec in specs}
    found["README.md"] = docs.render_index(specs)
    return found


def stale(fresh: dict[str, str]) -> list[str]:
    current = {path.name: path.read_text(encoding="utf-8") for path in OUT.glob("*.md")}
    return sorted(name for name in fresh.keys() | current.keys() if fresh.get(name) != current.get(name))


def main() -> int:
    fresh = pages()
    if "--check" in sys.argv:
        names = stale(fresh)
        if names:
            print(f"docs/modules is stale ({', '.join(names)}): run python scripts/gen_module_docs.py")
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path in OUT.glob("*.md"):
        if path.name not in fresh:
            path.unlink()
    for name, text in fresh.items():
        (OUT / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
