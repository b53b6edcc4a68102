"""Checks of command-line options the CLI does itself, before any work starts.

Owns closed choices (``--mode``, ``--objective``), ranges (``--top``, ``--gpus``, counts and
times) and output paths: a file option must not name a folder nor sit under a file, a folder
option must not name a file, and the place must be writable. Each failure is a ``ScenarioError``
naming the option, the value and the fix, so ``app.main`` prints one line and exits 2. It does
not parse scenarios (``clustersim.simulator.scenario``) nor write files (``clustersim.files``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from clustersim.simulator.errors import ScenarioError
from clustersim.simulator.network import FabricLoad

C = TypeVar("C", bound=str)


class OptionError(ScenarioError):
    """A command-line option has a value outside its choices or range."""

    stage = "options"


def choice(option: str, value: str, choices: Sequence[C]) -> C:
    """The one of ``choices`` that ``value`` spells (typed as the choices: a Literal), else an
    OptionError listing them."""
    for known in choices:
        if value == known:
            return known
    raise OptionError(f"{option} {value!r} is not a choice; use one of {', '.join(choices)}")


def fabric_load_option(background: Sequence[str], degraded: Sequence[str]) -> FabricLoad | None:
    """``--background CLASS=FRACTION`` and ``--degraded U->V=FRACTION`` as a ``FabricLoad`` (None
    when neither is given); the classes and links are checked against the fabric when it is built."""
    if not background and not degraded:
        return None
    return FabricLoad(background=_pairs("--background", background, "nic=0.3"),
                      degraded=_pairs("--degraded", degraded, "gpu0->nic0=0.25"))


def _pairs(option: str, items: Sequence[str], example: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            out[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise OptionError(f"{option} {item!r}: write NAME=FRACTION, e.g. {example}")
    return out


def int_range(option: str, value: int, low: int, high: int) -> int:
    """``value`` if low <= value <= high."""
    if not low <= value <= high:
        raise OptionError(f"{option} {value} is out of range; use an integer in {low:,}..{high:,}")
    return value


def real_range(option: str, value: float, low: float, high: float, *, open_low: bool = False) -> float:
    """``value`` if finite and in [low, high] ((low, high] when ``open_low``)."""
    above = value > low if open_low else value >= low
    if not (math.isfinite(value) and above and value <= high):
        bracket = "(" if open_low else "["
        raise OptionError(f"{option} {value:g} is out of range; use a number in {bracket}{low:g}, {high:g}]")
    return value


def gpu_counts(option: str, text: str, high: int) -> list[int]:
    """A comma-separated list of GPU counts, each an integer in 1..high."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise OptionError(f"{option} {text!r} must list positive GPU counts, e.g. 64,128,256")
    return [int_range(option, int(p), 1, high) for p in parts]


def _writable_dir(option: str, folder: Path) -> None:
    """The nearest existing ancestor of ``folder`` is a writable folder."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise OptionError(f"{option} {folder}: {probe} is a file, not a folder; choose another path")
    if not os.access(probe, os.W_OK | os.X_OK) or str(probe.resolve()).startswith(("/proc", "/sys")):
        raise OptionError(f"{option} {folder}: {probe} is not writable; choose a folder you can write to")


def output_file(option: str, path: Path | None) -> Path | None:
    """Check a file to be written: not a folder, its folder creatable and writable."""
    if path is None or str(path) == "-":
        return path
    if path.is_dir():
        raise OptionError(f"{option} {path} is a folder; give a file name, e.g. {path / 'out.json'}")
    _writable_dir(option, path.parent if str(path.parent) else Path("."))
    if path.exists() and not os.access(path, os.W_OK):
        raise OptionError(f"{option} {path} exists and is not writable; choose another file")
    return path


def output_dir(option: str, path: Path) -> Path:
    """Check a folder to be (re)written: not a file, creatable and writable."""
    if path.exists() and not path.is_dir():
        raise OptionError(f"{option} {path} is a file; give a folder name (it is created)")
    _writable_dir(option, path)
    return path
