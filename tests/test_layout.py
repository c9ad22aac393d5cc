"""The package's layout: imports flow one way, and no module imports itself back in a circle.

Layers, from the top: the command line, the service and the integrations call the methods;
the methods call the stores and the text pipeline; the stores and the text pipeline call only
the shared vocabulary (errors, results, inputs). Imports done inside functions count too (the
optional drivers are imported lazily), and so do ``importlib.import_module("nshash....")``
calls.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nshash"

#: Layer of each part of the package (a higher layer may import a lower one, never back).
LAYERS = {
    "errors": 0,
    "results": 0,
    "inputs": 1,  # checks texts with the compiled kernel when it is built
    "options": 1,  # the tuning settings' schema (every surface reads it)
    "text": 1,
    "stores": 2,
    "methods": 3,
    "method": 3,
    "toolkit": 3,
    "cli": 4,
    "client": 4,
    "scrapy": 4,
    "export": 4,
    "spark": 4,
    "__init__": 5,
    "__main__": 5,
}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The nshash modules *path* imports (absolute dotted names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("nshash"):
                found.add(target)
                for alias in node.names:  # "from . import x" may name a module
                    candidate = f"{target}.{alias.name}"
                    if (ROOT / (candidate.replace(".", "/") + ".py")).exists() or (
                        ROOT / candidate.replace(".", "/")
                    ).is_dir():
                        found.add(candidate)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nshash"))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("nshash")
        ):
            found.add(str(node.args[0].value))
    found.discard(mod)
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYERS["__init__"]
    return LAYERS[parts[1]]


MODULES = {_module(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down(module: str) -> None:
    """A module imports only from its own layer or below (and never the package's top)."""
    if module.count(".") == 0:
        return  # nshash/__init__.py re-exports the public names
    upward = sorted(t for t in MODULES[module] if t != "nshash" and _layer(t) > _layer(module))
    assert not upward, f"{module} imports {upward} from a higher layer"
    assert "nshash" not in MODULES[module] or module.startswith("nshash.cli"), (
        f"{module} imports the package's top; import the module that defines the name"
    )


def test_no_import_cycles() -> None:
    """No module reaches itself again through the imports of the modules it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, targets in MODULES.items():
        for t in targets:
            while t not in MODULES and "." in t:  # "from .x import name": x is the module
                t = t.rpartition(".")[0]
            if t in MODULES and t != module and t != "nshash":
                graph[module].add(t)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(MODULES):
        if node not in state:
            visit(node)


def test_every_part_has_a_layer() -> None:
    """A new folder or top-level module gets a place in LAYERS (and so in the layout)."""
    parts = {m.split(".")[1] for m in MODULES if "." in m}
    assert parts <= set(LAYERS), sorted(parts - set(LAYERS))


@pytest.mark.parametrize("old", ["similarity", "soft404", "keyed", "memory_store", "fingerprint"])
def test_old_module_paths_still_import(old: str) -> None:
    """The modules of the flat 0.1 layout import under their old names, as the same module,
    with a DeprecationWarning that names the new place."""
    import importlib
    import sys

    import nshash

    new = importlib.import_module(f"nshash.{nshash.MOVED_MODULES[old]}")
    sys.modules.pop(f"nshash.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"nshash.{old} moved to {new.__name__}"):
        moved = importlib.import_module(f"nshash.{old}")
    assert moved is new


def test_every_moved_module_exists() -> None:
    """Each old path points at a module that is there."""
    import nshash

    for new in nshash.MOVED_MODULES.values():
        path = PACKAGE.joinpath(*new.split("."))
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), new
