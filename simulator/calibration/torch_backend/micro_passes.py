"""Repeated passes of the compute microbenchmarks: their median, and each pass on its own.

Owns merging P passes of the compute suite (``microbench.compute_suite`` runs every GEMM,
attention, memory, overhead and optimizer microbenchmark once per pass, one pass after the other,
so a disturbance of the host that lasts a few seconds slows the entries of one pass, not one
entry in every pass) into the entry set the profile is fitted on (every timing the median over
the passes), and handing out each pass's own entries (``calibrate fit`` fits one profile per pass:
their spread is the profile's own confidence, ``fit.pass_reports``). Pure Python, no torch, no
numpy, so the ranks and the fit apply the same rule. It measures nothing and fits nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from clustersim.simulator.calibration.torch_backend import stats
from clustersim.simulator.errors import CalibrationError

SECTIONS: tuple[str, ...] = ("gemm", "attention", "memory")
"""The compute suite's lists of entries (one entry per shape or size, the same order in every pass)."""
SINGLE: tuple[str, ...] = ("overhead", "optimizer")
"""The compute suite's single entries."""


def _merge_entry(entries: Sequence[Mapping[str, Any]], where: str) -> dict[str, Any]:
    """One entry from its P passes: numbers -> their median; anything else must agree."""
    out: dict[str, Any] = {}
    for key, first in entries[0].items():
        values = [e.get(key) for e in entries]
        if isinstance(first, (int, float)) and not isinstance(first, bool) and all(
                isinstance(v, (int, float)) for v in values):
            out[key] = stats.median([float(v) for v in values])  # type: ignore[arg-type]  # checked numeric above
        elif all(v == first for v in values):
            out[key] = first
        else:
            raise CalibrationError(f"compute passes disagree on {where}.{key}: {values}; the passes must "
                                   "benchmark the same shapes in the same order")
    return out


def merge(passes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The compute entries of ``passes`` (each a ``compute_suite`` pass) with every timing the
    median over the passes; the shapes, sizes, kinds and layouts must be the same in every pass."""
    if not passes:
        raise CalibrationError("compute passes: none measured; run at least one pass")
    out: dict[str, Any] = {}
    for section in SECTIONS:
        lists = [list(p.get(section, [])) for p in passes]
        if len({len(x) for x in lists}) != 1:
            raise CalibrationError(f"compute passes disagree on {section}: {[len(x) for x in lists]} entries; "
                                   "the passes must benchmark the same shapes")
        out[section] = [_merge_entry([x[i] for x in lists], f"{section}[{i}]") for i in range(len(lists[0]))]
    for single in SINGLE:
        if all(single in p for p in passes):
            out[single] = _merge_entry([p[single] for p in passes], single)
    return out


def of(compute: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each pass of a ``compute`` section as a compute section of its own (the run's shared fields
    kept); one pass, the section itself, when it was measured before passes existed."""
    shared = {k: v for k, v in compute.items() if k not in (*SECTIONS, *SINGLE, "passes")}
    recorded = compute.get("passes") or []
    if not recorded:
        return [{k: v for k, v in compute.items() if k != "passes"}]
    return [{**shared, **p} for p in recorded]
