"""The layers of docs/architecture.md: a module imports only from its own layer or lower ones.

A layer is a folder of ``climb_bayes/`` (``data/``, ``model/``, ...); the layer of a module is the
folder it sits in.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "climb_bayes"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "atomic", "runtime"),  # utilities: import nothing from the package
    ("data",),
    ("model",),
    ("inference", "laws"),
    ("decisions",),
    ("evaluation",),
    ("viz",),
    ("api", "cli", "__main__", "__init__"),
]
"""Folders (and the few top-level modules) from the bottom layer up: docs/architecture.md."""

ALLOWED_UPWARD: set[tuple[str, str]] = set()  # none left


def _layer_of(name: str) -> int:
    for k, members in enumerate(LAYERS):
        if name in members:
            return k
    raise AssertionError(
        f"climb_bayes.{name} is in no layer of docs/architecture.md (add its folder to LAYERS)"
    )


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] == "climb_bayes":
                if len(parts) > 1:
                    out.add(parts[1])
                else:
                    out.update(a.name for a in node.names if a.name != "__version__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "climb_bayes" and len(parts) > 1:
                    out.add(parts[1])
    return out


def _top_module(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_every_module_is_in_a_layer():
    for path in PKG.rglob("*.py"):
        _layer_of(_top_module(path))


def test_no_module_imports_a_higher_layer():
    bad = []
    for path in PKG.rglob("*.py"):
        me = _top_module(path)
        for dep in _imports(path):
            if dep == me or (me, dep) in ALLOWED_UPWARD:
                continue
            if _layer_of(dep) > _layer_of(me):
                bad.append(f"{path.relative_to(PKG)} imports climb_bayes.{dep}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_training_meets_fitting_only_at_the_runs_format():
    root = PKG.parent / "training"
    for path in root.rglob("*.py"):
        deps = _imports(path)
        assert not deps, (path.name, deps)


def test_tests_mirror_the_packages():
    """tests/ has one folder per subpackage (and one for training/); a test file sits in the
    folder of the package it tests, at the top when it tests a top-level module of climb_bayes
    (``test_api.py`` for ``climb_bayes/api.py``), or at the top when it checks the whole
    repository (architecture, docs)."""
    tests = Path(__file__).resolve().parent
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")} | {"training"}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert packages <= folders, f"no tests/ folder for {sorted(packages - folders)}"
    extra = sorted(folders - packages)
    assert not extra, f"tests/ folders that mirror no package: {extra}"
    for name in packages:
        assert list((tests / name).glob("test_*.py")), f"tests/{name}/ has no test module"
    top = {p.name for p in tests.glob("test_*.py")}
    modules = {f"test_{p.stem}.py" for p in PKG.glob("*.py") if not p.stem.startswith("_")}
    stray = top - modules - {"test_architecture.py", "test_docs.py"}
    assert not stray, f"top-level tests that test no top-level module: {sorted(stray)}"
    assert {"test_api.py", "test_architecture.py", "test_docs.py"} <= top, top
