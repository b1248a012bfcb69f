"""The layout's conventions, checked on the real tree: rooms list their modules, modules
import only the module API, the engine knows no room. Nothing is mocked."""

from __future__ import annotations

import ast
from pathlib import Path

from engine import registry

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_every_room_lists_exactly_its_task_modules() -> None:
    for room in registry.rooms():
        folder = Path(room.__file__ or "").parent
        files = {p.stem for p in folder.glob("*.py") if "def plan(" in p.read_text(encoding="utf-8")}
        assert set(room.MODULES) == files, room.__name__


def test_modules_import_only_the_module_api_from_the_engine() -> None:
    for path in (REPO / "modules").rglob("*.py"):
        if "probes" in path.parts:
            continue
        engine_imports = {name for name in _imports(path) if name.split(".")[0] == "engine"}
        assert engine_imports <= {"engine.module_api"}, f"{path}: {sorted(engine_imports)}"


def test_the_engine_imports_no_room() -> None:
    for path in (REPO / "engine").rglob("*.py"):
        rooms = {name for name in _imports(path) if name.split(".")[0] == "modules"}
        assert not rooms, f"{path}: {sorted(rooms)}"
