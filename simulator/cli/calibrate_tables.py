"""The tables and lines the ``clustersim calibrate`` commands print: a fitted profile, held-out runs, a check.

Owns the formatting of what ``calibrate fit`` (``_fit_table``: each fitted field, its fit quality
and its range over the microbenchmark passes; ``_held_out_table``: predictions of the runs a
``--runs`` fit held out) and ``calibrate check`` (``_check_table``, ``_summary_lines``,
``_interval_lines``: the error per plan, the ranking and the profile's own interval) print. It
runs no command, fits and simulates nothing (``clustersim.simulator.cli.calibrate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rich.table import Table

from clustersim.simulator.calibration import CheckRow, FitReport, StepRecord, fastest_gap, misordered

if TYPE_CHECKING:  # annotations only; fit_logs (pandas) loads when its command runs
    from clustersim.simulator.calibration.fit_logs import HeldOut, LogsFit


def _fit_table(report: FitReport) -> Table:
    p, table = report.profile, Table(title="fitted profile (quality = median |relative error| on its own microbenchmarks)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("fit quality", justify="right")
    table.add_column(f"range over {len(report.passes)} passes", justify="right")
    m, iv = p.machine, report.intervals

    def span(key: str, scale: float = 1.0, fmt: str = ".1f") -> str:
        return f"{iv[key][0] * scale:{fmt}}-{iv[key][1] * scale:{fmt}}" if key in iv and len(report.passes) > 1 else ""

    table.add_row("peak matmul (per rank)", f"{m['peak_flops'] / 1e9:.1f} GFLOP/s", "", span("machine.peak_flops", 1e-9))
    table.add_row("memory bandwidth (copy)", f"{m['memory_bandwidth'] / 1e9:.1f} GB/s", "",
                  span("machine.memory_bandwidth", 1e-9))
    if "link_bandwidth" in m:
        table.add_row("loopback bus bandwidth", f"{m['link_bandwidth'] / 1e9:.2f} GB/s", "")
    for name, curve in (("gemm_efficiency", p.gemm_efficiency), ("attention_efficiency", p.attention_efficiency)):
        table.add_row(name, " ".join(f"{x:.0e}:{e:.2f}" for x, e in curve), f"{report.quality[name] * 100:.0f}%",
                      " ".join(span(f"{name}@{x:.0e}", 1.0, ".2f") for x, _ in curve))
    table.add_row("memory_efficiency", f"{p.memory_efficiency:.3f}", f"{report.quality['memory_efficiency'] * 100:.0f}%",
                  span("memory_efficiency", 1.0, ".3f"))
    table.add_row("kernel_overhead", f"{p.kernel_overhead * 1e6:.1f} us", "", span("kernel_overhead", 1e6))
    table.add_row("step_overhead", f"{p.step_overhead * 1e6:.1f} us", "", span("step_overhead", 1e6))
    table.add_row("optimizer_efficiency", f"{p.optimizer_efficiency:.3f}", "", span("optimizer_efficiency", 1.0, ".3f"))
    for key, value in p.eager_layer_overhead.items():  # per layer; absent in folders measured before
        table.add_row(f"eager_layer_overhead.{key}", f"{value * 1e6:.1f} us", "",
                      span(f"eager_layer_overhead.{key}", 1e6))
    if "sync_skew" in m:
        table.add_row("sync_jitter_cv (slowest rank's wait)", f"{p.sync_jitter_cv:.3f} (measured skew "
                      f"{m['sync_skew'] * 100:.1f}%, wait {m['sync_wait'] * 1e6:.0f} us)",
                      f"{report.quality.get('sync_jitter_cv', 0.0) * 100:.0f}%", "")
    if "tp_call_b2b" in m:
        table.add_row(f"TP call of {m['tp_call_bytes'] / 2**20:.2f} MiB (priced: blocking_call_wait {p.blocking_call_wait * 1e3:.2f} ms a TP call)",
                      f"back to back {m['tp_call_b2b'] * 1e3:.2f} ms, after a GEMM chunk {m['tp_call_after'] * 1e3:.2f} ms, "
                      f"overlapped with one {m['tp_call_overlap'] * 1e3:.2f} ms", "", "")
    table.add_row("collective_overhead (per call, TP/FSDP)", f"{p.collective_overhead * 1e6:.0f} us", "")
    table.add_row("p2p_overhead", f"{p.p2p_overhead * 1e6:.0f} us", "")
    for ab in report.collectives:
        law = f"collective_laws.{ab.kind}"
        table.add_row(f"{ab.kind}", f"alpha {ab.alpha * 1e6:.0f} us, busbw {ab.bus_bandwidth / 1e9:.2f} GB/s",
                      f"{ab.median_abs_error * 100:.0f}%",
                      " ".join(x for x in (span(f"{law}.alpha", 1e6, ".0f"), span(f"{law}.bus_bandwidth", 1e-9, ".2f"))
                               if x))
    return table


def _held_out_table(fit: LogsFit, rows: tuple[HeldOut, ...], title: str) -> Table:
    from clustersim.simulator.calibration.fit_logs import within  # heavy (pandas): imported when the command runs

    table = Table(title=title)
    for col in ("run", "family", "measured ms", "predicted ms", "error %", "in interval"):
        table.add_column(col, justify="left" if col in ("run", "family") else "right")
    for h in rows:
        table.add_row(h.name, h.family, f"{h.measured_s * 1e3:.1f}", f"{h.predicted_s * 1e3:.1f}",
                      f"{(h.predicted_s / h.measured_s - 1) * 100:+.1f}", "yes" if within(h, fit.interval) else "no")
    return table


def _check_table(rows: Sequence[CheckRow], records: Sequence[StepRecord], statistic: str, source: Path) -> Table:
    table = Table(title=f"predicted vs measured ({statistic}), profile fitted on the microbenchmarks of {source} only")
    for col in ("plan", "ranks", "threads", "measured ms", "CI width %", "predicted ms", "profile's range ms",
                "outside %", "error %", "spread %", "pass spread %", "CPU withheld %", "load"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for r, rec in zip(rows, records):
        span = "-" if r.predicted_low is None or r.predicted_high is None else \
            f"{r.predicted_low * 1e3:.1f}-{r.predicted_high * 1e3:.1f}"
        table.add_row(r.plan, str(r.world_size), str(rec.threads_per_rank or "?"), f"{r.measured * 1e3:.1f}",
                      f"{r.ci_width * 100:.1f}", f"{r.predicted * 1e3:.1f}", span,
                      f"{r.outside * 100:+.1f}" if r.outside else "", f"{r.error * 100:+.1f}",
                      f"{r.spread * 100:.0f}", f"{r.pass_spread * 100:.0f}", f"{rec.contention * 100:.0f}",
                      f"{rec.load_average:.1f}" if rec.load_average >= 0 else "?")
    return table


def _summary_lines(rows: Sequence[CheckRow], s: dict[str, float], records: Sequence[StepRecord], *,
                   from_file: bool = False) -> list[str]:
    """The headline: error, ranking (Spearman, misordered pairs, fastest plan) and the load."""
    pred_fast, meas_fast, gap = fastest_gap(rows)
    loads = [r.load_average for r in records if r.load_average >= 0]
    lines = [f"median |error| {s['median_abs_error'] * 100:.1f}%, max |error| {s['max_abs_error'] * 100:.1f}%, "
             f"mean error {s['mean_error'] * 100:+.1f}% over {len(rows)} plans",
             f"rank correlation (Spearman) {s['rank_correlation']:.2f}; predicted fastest {pred_fast}, measured "
             f"fastest {meas_fast} ({gap * 100:+.1f}% slower than it)"]
    bad = misordered(rows)
    lines.append(f"{len(bad)} of {len(rows) * (len(rows) - 1) // 2} pairs ordered wrongly" + (":" if bad else ""))
    lines += [f"  {m.slower} predicted no slower than {m.faster}, measured {m.measured_gap * 100:+.1f}% slower"
              + (" (within the measured intervals)" if m.within_noise else "") for m in bad]
    lines += _interval_lines(rows, from_file)
    probed = [(row, rec) for row, rec in zip(rows, records) if rec.probes]
    if probed:
        lines.append("host drift by the probes, plan / microbenchmarks (compute x / latency x; 1.00 where "
                     "--drift leaves it or there is no reference): " + ", ".join(f"{row.plan} {row.drift_compute:.2f}/"
                                                                 f"{row.drift_latency:.2f}" for row, _ in probed))
    if loads:
        lines.append(f"host load (1-min average) when the plans started: {min(loads):.1f}-{max(loads):.1f}")
    return lines


def _interval_lines(rows: Sequence[CheckRow], from_file: bool = False) -> list[str]:
    """Which plans were measured outside the range of the predictions made with each pass's profile."""
    ranged = [r for r in rows if r.predicted_low is not None]
    if not ranged and from_file:
        return ["no interval for the predictions: a profile file (--calibration) keeps no microbenchmark passes; "
                "check against the measure folder (or --micro FOLDER) for one"]
    if not ranged:
        return ["no interval for the predictions: the microbenchmarks hold one pass (measure with "
                "--micro-passes 3 or more)"]
    out = [r for r in ranged if r.outside]
    lines = [f"{len(out)} of {len(ranged)} plans measured outside the profile's own interval (the predictions with "
             "each microbenchmark pass's fit)" + (":" if out else "")]
    lines += [f"  {r.plan}: measured {r.outside * 100:+.1f}% " + ("above" if r.outside > 0 else "below") +
              " the range" for r in sorted(out, key=lambda r: -abs(r.outside))]
    return lines
