"""engine/'s import graph, read from the real source with ``ast``: no file imports another
that (directly or through others) imports it back, and each package imports only what its
docstring's ``May import:`` line names. Lazy imports inside functions and ``TYPE_CHECKING``
imports count: a cycle that only type checking sees is still a knot for a reader.
Nothing is mocked."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in ENGINE.rglob("*.py")}


def _imported(name: str, path: Path) -> Iterator[str]:
    """The engine modules one file imports, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "engine")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, base] if base else stem)
            if base.split(".")[0] != "engine":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in MODULES else base


GRAPH = {name: {dep for dep in _imported(name, path) if dep != "engine"} for name, path in MODULES.items()}


def _package(name: str) -> str:
    """engine.<package> for a file in one of engine's packages, else the file's own name."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (ENGINE / parts[1]).is_dir() else name


def _cycle_from(start: str) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, trail = stack.pop()
        for dep in GRAPH.get(node, ()):
            if dep == start:
                return [*trail, start]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, [*trail, dep]))
    return None


def test_no_engine_file_imports_itself_back() -> None:
    cycles = [cycle for name in sorted(GRAPH) if (cycle := _cycle_from(name))]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _allowed(package: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((ENGINE / package.split(".")[1] / "__init__.py").read_text(encoding="utf-8")))
    match = re.search(r"^May import:(.*?)(?:\n\n|\Z)", doc or "", re.MULTILINE | re.DOTALL)
    assert match, f"{package}/__init__.py: its docstring has no 'May import:' line"
    return {word.strip(" .\n") for word in match.group(1).split(",") if word.strip(" .\n")}


def test_each_package_imports_only_what_its_docstring_allows() -> None:
    packages = sorted({_package(name) for name in MODULES if _package(name) != name or name.count(".") > 1})
    assert packages, "no packages found under engine/"
    wrong = []
    for package in packages:
        allowed = _allowed(package)
        for name in (n for n in GRAPH if _package(n) == package):
            for dep in GRAPH[name]:
                target = _package(dep)
                if target != package and target not in allowed:
                    wrong.append(f"{name} imports {dep} ({package} may import: {', '.join(sorted(allowed))})")
    assert not wrong, "\n".join(wrong)


def test_every_allowed_import_names_a_real_part_of_the_engine() -> None:
    """A stale 'May import:' line (naming a file or package that moved) fails here."""
    real = {_package(name) for name in MODULES}
    for package in sorted({_package(n) for n in MODULES if (ENGINE / n.split(".")[-1]).is_dir() or n.count(".") > 1}):
        if package in real and (ENGINE / package.split(".")[1]).is_dir():
            assert _allowed(package) <= real, package
