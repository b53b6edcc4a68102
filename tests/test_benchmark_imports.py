"""Benchmarks are not run by the suite (they print timings), so a module that moves (issue 16's
faces moved ``calibration/profile.py`` to ``simulator/profile.py``) can break them silently: every
``clustersim`` name a benchmark imports must resolve. Imports guarded by ``except ImportError``
(a benchmark that also runs an older tree) are skipped."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def _guarded(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside a try whose handlers catch ImportError."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(path: Path) -> list[tuple[str, str | None]]:
    tree = ast.parse(path.read_text())
    skip = _guarded(tree)
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clustersim"):
            found += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("clustersim")]
    return found


def test_there_are_benchmarks_to_check() -> None:
    assert len(BENCHMARKS) >= 5
    assert any(_imports(p) for p in BENCHMARKS)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_clustersim_name_a_benchmark_imports_resolves(path: Path) -> None:
    missing = []
    for module, name in _imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module}: {exc}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert missing == []
