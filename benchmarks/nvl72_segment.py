"""The GB200/GB300 NVL72 rows with the job placed by Slurm segments (16 of each rack's 18 trays
for 64+ nodes) against the default placement (every rack full, 72 GPUs per NVLink domain).

    .venv/bin/python benchmarks/nvl72_segment.py [--fidelity analytic|flow] [--flows] [--out DIR]

Megatron-Bridge's performance launcher asks Slurm for ``--segment`` placement on 4-GPU trays
(``topologies.slurm_segment``, its source there), so a 256-GPU job runs 64 GPUs per rack and its
64-wide EP groups never straddle two racks. This re-predicts every bundled row on a multi-node NVLink
system at the default profiles, with ``validate``'s cluster built as is and with
``topologies.segment_overrides`` added, and prints MAPE and bias per regime and GPU, both ways, and
the rows that move most. ``--flows``: also with ``fabric_sharing="flows"`` (the EP flows' translate
guard then keeps more stages on flows). Not part of the test run (minutes).
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from clustersim.files import write_atomic
from clustersim.simulator.calibration import validate as validation
from clustersim.simulator.calibration.validate import load_runs, validate_row
from clustersim.simulator.step.simulate import simulate
from clustersim.topologies import Cluster, get_cluster, segment_overrides


def _segmented(name: str, num_gpus: int, **overrides: Any) -> Cluster:
    return get_cluster(name, num_gpus, **{**segment_overrides(name, num_gpus), **overrides})


def _run(rows: pd.DataFrame, segmented: bool, fidelity: str, sharing: str) -> pd.DataFrame:
    validation.get_cluster = _segmented if segmented else get_cluster  # type: ignore[assignment]
    validation.simulate = functools.partial(simulate, fabric_sharing=sharing)  # type: ignore[assignment]
    try:
        cache: dict = {}
        recs = [validate_row({str(k): v for k, v in r.items()}, fidelity=fidelity, cache=cache)  # type: ignore[arg-type]
                for r in rows.to_dict("records")]
    finally:
        validation.get_cluster = get_cluster  # type: ignore[assignment]
        validation.simulate = simulate  # type: ignore[assignment]
    return pd.DataFrame.from_records(recs).set_index("row_id")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fidelity", default="analytic", choices=("analytic", "flow"))
    ap.add_argument("--flows", action="store_true", help="fabric_sharing=flows as well")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    print(f"load average (1, 5, 15 min): {os.getloadavg()}, {os.cpu_count()} CPUs")
    table = load_runs()
    gpu = table.gpu_type.astype(str).str.lower()
    rows = table[gpu.isin(["gb200", "gb300"])]
    runs = {}
    for sharing in ("static", "flows") if args.flows else ("static",):
        for seg in (False, True):
            t0 = time.perf_counter()
            runs[(sharing, seg)] = _run(rows, seg, args.fidelity, sharing)
            print(f"{sharing} {'segments' if seg else 'full racks'}: {len(rows)} rows, {time.perf_counter() - t0:.0f} s")
    meta = rows.set_index("row_id")
    ep = meta.ep.fillna(1).astype(float)
    for (sharing, seg), f in runs.items():
        ok = f[f.status == "ok"]
        print(f"\n{sharing}, {'segments' if seg else 'full racks'}: {len(ok)} ok rows")
        for gname in ("gb200", "gb300"):
            for lab, mask in (("ep > 1", ep > 1), ("ep = 1", ep <= 1)):
                ids = [i for i in ok.index if meta.gpu_type[i].lower() == gname and bool(mask[i])]
                e = ok.loc[ids, "error_pct"].astype(float)
                print(f"  {gname} {lab:6s}: {len(e):3d} rows  MAPE {e.abs().mean():6.2f} %  bias {e.mean():+6.2f} %")
        e = ok.error_pct.astype(float)
        print(f"  all        : {len(e):3d} rows  MAPE {e.abs().mean():6.2f} %  bias {e.mean():+6.2f} %")
    base, seg = runs[("static", False)], runs[("static", True)]
    both = base[base.status == "ok"].index.intersection(seg[seg.status == "ok"].index)
    move = (seg.loc[both, "predicted_step_time_s"] / base.loc[both, "predicted_step_time_s"] - 1) * 100
    print(f"\nstatic: {int((move.abs() > 1e-9).sum())} of {len(both)} rows move; mean {move.mean():+.3f} %, "
          f"largest moves:")
    for i in move.abs().sort_values(ascending=False).index[:12]:
        print(f"  row {i}: {meta.model[i]} {meta.gpu_type[i]} {int(meta.num_gpus[i])} GPUs {base.plan[i]}: "
              f"{move[i]:+.2f} %  error {base.error_pct[i]:+.1f} -> {seg.error_pct[i]:+.1f} %")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for (sharing, s), f in runs.items():
            write_atomic(out / f"{sharing}_{'segments' if s else 'racks'}.csv", f.to_csv())


if __name__ == "__main__":
    main()
