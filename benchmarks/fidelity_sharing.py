"""Fidelity of the flows over time: the bundled published runs re-predicted with
``fabric_sharing="flows"`` against the static pricing (both at ``fidelity="flow"``), on the rows
where the engine's streams can overlap (pp > 1, or ep > 1), and the weak-scaling series (same
source, model, GPU and per-GPU batch at growing GPU counts): predicted growth against published.

    .venv/bin/python benchmarks/fidelity_sharing.py [--all] [--static VALIDATE.csv] [--out DIR]

``--static`` reads the static figures from ``clustersim validate --fidelity flow -o VALIDATE.csv``
(the same predictions: the static path is what validate runs) instead of simulating them again.
``--out DIR`` writes each mode's rows (``static.csv``, ``flows.csv``) there, to compare row by row.

Not part of the test run (minutes). It replaces the simulate that ``validate_row`` calls by one
with ``fabric_sharing`` set; nothing else of the validation changes.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

from pathlib import Path

import pandas as pd

from clustersim.files import write_atomic

from clustersim.simulator.calibration import validate as validation
from clustersim.simulator.calibration.validate import error_stats, load_runs, validate_row
from clustersim.simulator.step.simulate import simulate


def _run(rows: pd.DataFrame, sharing: str) -> pd.DataFrame:
    validation.simulate = functools.partial(simulate, fabric_sharing=sharing)  # type: ignore[assignment]
    try:
        cache: dict = {}
        recs = [validate_row({str(k): v for k, v in r.items()}, fidelity="flow", cache=cache)
                for r in rows.to_dict("records")]
    finally:
        validation.simulate = simulate  # type: ignore[assignment]
    return pd.DataFrame.from_records(recs)


def _weak_series(table: pd.DataFrame) -> list[list[int]]:
    """Row ids of each weak-scaling series: >= 3 GPU counts spanning >= 4x, same per-GPU batch."""
    t = table.assign(bpg=table.global_batch_seqs / table.num_gpus)
    keys = ["source_id", "model", "gpu_type", "tp", "pp", "cp", "ep", "micro_batch", "seq_len", "bpg", "precision"]
    out = []
    for _, g in t.groupby(keys, dropna=False):
        g = g.sort_values("num_gpus")
        if g.num_gpus.nunique() >= 3 and g.num_gpus.max() >= 4 * g.num_gpus.min():
            out.append(g.row_id.astype(int).tolist())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every row, not only pp > 1 or ep > 1")
    ap.add_argument("--static", default=None, help="validate --fidelity flow CSV with the static figures")
    ap.add_argument("--out", default=None, help="folder for static.csv and flows.csv (per-row predictions)")
    args = ap.parse_args()
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    table = load_runs()
    overlap = table if args.all else table[(table.pp.fillna(1) > 1) | (table.ep.fillna(1) > 1)]
    series = _weak_series(table)
    weak_ids = sorted({i for s in series for i in s})
    rows = pd.concat([overlap, table[table.row_id.isin(weak_ids)]]).drop_duplicates("row_id")
    res = {}
    if args.static:
        res["static"] = pd.read_csv(args.static).set_index("row_id").loc[rows.row_id]
    for sharing in ("static", "flows"):
        if sharing in res:
            continue
        t0 = time.perf_counter()
        res[sharing] = _run(rows, sharing).set_index("row_id")
        print(f"{sharing}: {len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        for sharing, frame in res.items():
            write_atomic(Path(args.out) / f"{sharing}.csv", frame.to_csv())
    ok = res["static"].status.eq("ok") & res["flows"].status.eq("ok")
    for name, mask in (("pp > 1", rows.set_index("row_id").pp.fillna(1) > 1),
                       ("ep > 1", rows.set_index("row_id").ep.fillna(1) > 1)):
        sel = ok & mask.reindex(ok.index, fill_value=False)
        for sharing in ("static", "flows"):
            s = error_stats(res[sharing].error_pct[sel])
            print(f"{name:7s} {sharing:6s} rows {int(sel.sum()):4d}  MAPE {s['mape']:.2f} %  bias {s['bias']:+.2f} %")
        moved = (res["flows"].predicted_step_time_s[sel] / res["static"].predicted_step_time_s[sel] - 1) * 100
        print(f"{name:7s} flows/static - 1: max {moved.max():+.3f} %, mean {moved.mean():+.3f} %")
    print("weak scaling: step-time growth from the smallest to the largest GPU count")
    for ids in series:
        a, b = ids[0], ids[-1]
        if not (ok.get(a, False) and ok.get(b, False)):
            continue
        meas = res["static"].measured_step_time_s
        grow = (meas[b] / meas[a] - 1) * 100
        pred = {k: (res[k].predicted_step_time_s[b] / res[k].predicted_step_time_s[a] - 1) * 100 for k in res}
        r = table.set_index("row_id")
        print(f"{r.model[a]:10s} {r.gpu_type[a]:5s} {int(r.num_gpus[a]):5d} -> {int(r.num_gpus[b]):5d} GPUs: "
              f"published {grow:+.1f} %, static {pred['static']:+.2f} %, flows {pred['flows']:+.2f} %")


if __name__ == "__main__":
    main()
