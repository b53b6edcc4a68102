"""Repeated passes of the microbenchmarks: their median, and each pass on its own.

Owns merging P passes of the compute suite (``microbench.compute_suite`` runs every GEMM,
attention, memory, overhead and optimizer microbenchmark once per pass, one pass after the other,
so a disturbance of the host that lasts a few seconds slows the entries of one pass, not one
entry in every pass) or of the collective sweep (``microbench_comm.collective_suite``) into the entry
set the profile is fitted on (every timing the median over the passes), and handing out each
pass's own entries (``fit.fit_profile`` fits one profile per pass: their spread is the profile's
own confidence, ``FitReport.passes``). Pure Python, no torch, no
numpy, so the ranks and the fit apply the same rule. It measures nothing and fits nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from clustersim.simulator.calibration.torch_backend import stats
from clustersim.simulator.errors import CalibrationError

SECTIONS: tuple[str, ...] = ("gemm", "attention", "memory")
"""The compute suite's lists of entries (one entry per shape or size, the same order in every pass)."""
COLD_SECTIONS: tuple[str, ...] = tuple(f"{s}_cold" for s in SECTIONS)
"""The same entries measured on cold operands (``microbench.OperandPool``), where recorded."""
OPERANDS: tuple[str, ...] = ("hot", "cold")
"""The operands a profile can be fitted on (``with_operands``)."""
OPERANDS_DEFAULT = "cold"
"""What ``calibrate check`` and ``calibrate fit`` fit on unless told (``--micro-operands``), where
recorded (``chosen_operands``; folders measured before the option: hot). Cold since the A/B of
one ``torch_backend_check.sh`` round measured with both (issue 21, load 4.7-7.2 on 2 shared
cores): every plan of both models predicted closer, small GPT median |error| 59.1 -> 56.9 %, max
66.0 -> 63.8 %; holdout GPT (out of sample) 52.6 -> 48.2 %, max 56.3 -> 54.2 %; one misordered
pair fewer in each."""
SINGLE: tuple[str, ...] = ("overhead", "optimizer", "host")
"""The compute suite's single entries (``host``: since issue 21's eager-host microbenchmark; a
folder measured before has none)."""


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
            raise CalibrationError(f"microbenchmark passes disagree on {where}.{key}: {values}; the passes must "
                                   "benchmark the same shapes in the same order")
    return out


def merge(passes: Sequence[Mapping[str, Any]], sections: Sequence[str] = SECTIONS,
          singles: Sequence[str] = SINGLE) -> dict[str, Any]:
    """The entries of ``passes`` (each a ``compute_suite`` pass, or with ``sections=("entries",)``
    a collective sweep's) with every timing the median over the passes; the shapes, sizes, kinds
    and layouts must be the same in every pass."""
    if not passes:
        raise CalibrationError("microbenchmark passes: none measured; run at least one pass")
    out: dict[str, Any] = {}
    for section in sections:
        lists = [list(p.get(section, [])) for p in passes]
        if len({len(x) for x in lists}) != 1:
            raise CalibrationError(f"microbenchmark passes disagree on {section}: {[len(x) for x in lists]} entries; "
                                   "the passes must benchmark the same shapes")
        out[section] = [_merge_entry([x[i] for x in lists], f"{section}[{i}]") for i in range(len(lists[0]))]
    for single in singles:
        if all(single in p for p in passes):
            out[single] = _merge_entry([p[single] for p in passes], single)
    return out


def of(section: Mapping[str, Any], passes: int | None = None) -> list[dict[str, Any]]:
    """Each pass of a ``compute`` or ``collectives`` section as a section of its own (the shared
    fields kept, each pass's entries in place of the merged ones); the section itself once per pass
    asked for (``passes``, default 1) when it was measured in one pass or before passes existed
    (one pass: no spread to show)."""
    recorded = section.get("passes") or []
    if len(recorded) <= 1:
        return [{k: v for k, v in section.items() if k != "passes"}] * (passes or 1)
    if passes is not None and passes != len(recorded):
        raise CalibrationError(f"microbenchmark passes: {len(recorded)} recorded, {passes} expected; the compute "
                               "and collective sections of one launch run the same passes")
    shared = {k: v for k, v in section.items() if k != "passes"}
    return [{**shared, **p} for p in recorded]


def recorded_operands(section: Mapping[str, Any]) -> list[str]:
    """The operands a compute section has GEMM entries of: "hot" where ``gemm`` is there (every
    folder measured before the option), "cold" where ``gemm_cold`` is."""
    return [k for k, key in (("hot", "gemm"), ("cold", "gemm_cold")) if section.get(key)]


def chosen_operands(section: Mapping[str, Any], operands: str | None) -> str:
    """``operands`` when given, else ``OPERANDS_DEFAULT`` where recorded, else what was recorded
    (a folder measured ``--micro-operands cold`` fits cold, one measured before the option hot)."""
    if operands is not None:
        return operands
    have = recorded_operands(section)
    return OPERANDS_DEFAULT if OPERANDS_DEFAULT in have or not have else have[0]


def with_operands(section: Mapping[str, Any], operands: str | None) -> dict[str, Any]:
    """The compute section (and each of its passes) with the GEMM, attention and memory entries
    of ``operands`` ("hot": as recorded; "cold": the ``*_cold`` ones in their place), so the fit
    reads either under the same keys; None: ``chosen_operands``; a clear error when they were not
    recorded."""
    operands = chosen_operands(section, operands)
    if operands not in OPERANDS:
        raise CalibrationError(f"microbenchmark operands = {operands!r} are unknown; use one of "
                               f"{', '.join(OPERANDS)} (--micro-operands)")
    have = recorded_operands(section)
    if operands not in have:
        raise CalibrationError(f"microbenchmark operands = {operands!r} were not recorded (recorded: "
                               f"{', '.join(have) or 'none'}); measure with `calibrate measure --micro-operands "
                               f"{operands}` or both, or check with --micro-operands {have[0] if have else 'hot'}")
    if operands == "hot":
        return dict(section)

    def swap(d: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in d.items() if k not in COLD_SECTIONS}
        out.update({hot: d[cold] for hot, cold in zip(SECTIONS, COLD_SECTIONS) if cold in d})
        return out

    out = swap(section)
    if "passes" in section:
        out["passes"] = [swap(p) for p in section["passes"]]
    return out
