"""The rooms talk through their faces (issue 16, item 5).

Each room of ``clustersim.simulator`` has one import-linter contract (pyproject.toml) that forbids
the other rooms, the CLI and the simulator's own modules to import its submodules directly. These
tests keep the contracts' lists equal to the rooms on disk (a new module or room cannot escape
them), keep the faces light (they import eagerly, so no heavy library may sit behind one), and
keep each face from hiding a submodule under a name it exports.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = ROOT / "simulator"
PKG = "clustersim.simulator"
HEAVY = ("pandas", "matplotlib", "dask", "distributed", "pyarrow", "torch", "scipy")


def _rooms() -> list[str]:
    """The rooms on disk: the simulator's subpackages, the CLI (which nothing imports) aside."""
    return sorted(p.parent.name for p in SIMULATOR.glob("*/__init__.py") if p.parent.name != "cli")


def _submodules(room: str) -> list[str]:
    """Every module and nested package of a room on disk, the face itself excluded."""
    folder = SIMULATOR / room
    names = set()
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts and "__pycache__" not in parts:
            names.add(".".join((PKG, room, *parts)))
    return sorted(names)


def _top_modules() -> list[str]:
    """The simulator's own modules beside the rooms (errors, scenario, profile, ...)."""
    return sorted(f"{PKG}.{p.stem}" for p in SIMULATOR.glob("*.py") if p.stem != "__init__")


def _face_contracts() -> dict[str, dict[str, Any]]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    prefix, suffix = "other rooms reach ", " through its face"
    return {c["name"][len(prefix):-len(suffix)]: c for c in contracts
            if c["name"].startswith(prefix) and c["name"].endswith(suffix)}


def _loaded_after(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of ``prefixes`` that a fresh interpreter holds after ``statement``."""
    code = (f"import sys\n{statement}\n"
            f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {prefixes!r} "
            f"or m.startswith({prefixes!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.split()


def test_every_room_has_a_face_contract() -> None:
    assert sorted(_face_contracts()) == _rooms()
    assert {"plan", "step", "network", "longrun", "search", "sweep", "calibration"} <= set(_rooms())


@pytest.mark.parametrize("room", _rooms())
def test_the_contract_lists_the_room_and_its_importers_as_on_disk(room: str) -> None:
    contract = _face_contracts()[room]
    assert contract["type"] == "forbidden" and contract["allow_indirect_imports"] is True
    assert contract["forbidden_modules"] == _submodules(room)
    others = [f"{PKG}.{r}" for r in (*_rooms(), "cli") if r != room]
    assert sorted(contract["source_modules"]) == sorted(others + _top_modules())


@pytest.mark.parametrize("room", [r for r in _rooms() if "ignore_imports" in _face_contracts()[r]])
def test_only_the_cli_skips_a_face_and_only_for_a_heavy_module(room: str) -> None:
    """The one kind of crossing a face contract ignores: the CLI importing a module that loads a
    heavy library (so the module cannot sit behind the eager face)."""
    for rule in _face_contracts()[room]["ignore_imports"]:
        importer, target = (side.strip() for side in rule.split("->"))
        assert importer == f"{PKG}.cli.**", rule
        assert target in _submodules(room), rule
        assert set(_loaded_after(f"import {target}", HEAVY)) & set(HEAVY), f"{target} is light: import it from the face"


@pytest.mark.parametrize("room", _rooms())
def test_a_face_loads_no_heavy_library(room: str) -> None:
    assert [m for m in _loaded_after(f"import {PKG}.{room}", HEAVY) if m.split(".")[0] in HEAVY] == []


@pytest.mark.parametrize("room", _rooms())
def test_a_face_offers_every_name_it_lists_and_hides_no_submodule(room: str) -> None:
    face = __import__(f"{PKG}.{room}", fromlist=["__all__"])
    names = list(face.__all__)
    assert names == sorted(set(names), key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    missing = [n for n in names if not hasattr(face, n)]
    assert missing == []
    children = {m.split(".")[3] for m in _submodules(room)}
    assert sorted(set(names) & children) == []  # `simulate` here would hide the module step.simulate


def test_the_cli_starts_without_the_rooms_its_commands_load_later() -> None:
    """``clustersim --help`` loads no room (each command's module loads its rooms, issue 18); the
    simulate command needs plan, network and step, and loads search, sweep and longrun only inside
    the commands that use them (import cost, issue 16)."""
    rooms = ("plan", "step", "network", "calibration", "search", "sweep", "longrun")
    loaded = _loaded_after(f"import {PKG}.cli.app", (f"{PKG}.",))
    assert [m for m in loaded if m.split(".")[2] in rooms] == []
    loaded = _loaded_after(f"import {PKG}.cli.simulate", (f"{PKG}.",))
    assert [m for m in loaded if m.split(".")[2] in ("search", "sweep", "longrun")] == []
    assert {f"{PKG}.step", f"{PKG}.network", f"{PKG}.plan"} <= set(loaded)
