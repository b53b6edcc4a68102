"""The key findings of a scaling report, in words computed from the result rows.

Owns the sentences at the top of the report: per cluster, the best plan's MFU and scaling
efficiency at its largest scale beside the naive DP baseline and the largest loss; across
clusters, the cheapest (or fastest) hardware; the count of failed points. It does not compute
the underlying numbers (``reports.scaling``, ``reports.tables``) nor format HTML.
"""

from __future__ import annotations

from typing import Any, Hashable

import pandas as pd

from clustersim.reports.scaling import LOSS_CAUSES, largest_loss, lost_time_fractions, scaling_table
from clustersim.reports.tables import (
    BEST_SERIES, NAIVE_SERIES, best_rows, error_table, hardware_table, plan_label, series_rows,
)


def summary_sentences(frame: pd.DataFrame) -> list[str]:
    """The report's findings, one sentence per item, from checked rows with costs filled in."""
    sentences = []
    curves = scaling_table(frame)
    best = best_rows(frame)
    for cluster, rows in best.groupby("cluster", sort=True):
        sentences.append(_cluster_sentence(str(cluster), rows, curves))
    if best["cluster"].nunique() > 1:
        sentences.append(_hardware_sentence(hardware_table(frame)))
    failed = len(error_table(frame))
    if failed:
        verb = "points failed to simulate and are" if failed != 1 else \
            "point failed to simulate and is"
        sentences.append(f"{failed:,} {verb} listed under Errors.")
    if best.empty:
        sentences.insert(0, "No point simulated successfully; see Errors.")
    return sentences


def verdict_sentences(frame: pd.DataFrame) -> list[str]:
    """The verdict, first on the page: per cluster, how far the best plan and naive DP scale from the
    smallest to the largest GPU count, and the cause whose share of the step grew most for each."""
    out = []
    curves = scaling_table(frame)
    for cluster, on in curves.groupby("cluster", sort=True):
        best = on[on["series"] == BEST_SERIES].sort_values("num_gpus")
        naive = on[on["series"] == NAIVE_SERIES].sort_values("num_gpus")
        if len(best) < 2:
            continue
        lo, hi = int(best["num_gpus"].iloc[0]), int(best["num_gpus"].iloc[-1])
        text = (f"{cluster}, {lo:,} to {hi:,} GPUs: the best plan keeps {best['scaling_efficiency'].iloc[-1]:.0%} "
                f"of its per-GPU throughput (MFU {best['mfu'].iloc[0]:.0%} to {best['mfu'].iloc[-1]:.0%})")
        grown = _grown(series_rows(frame, BEST_SERIES) if (frame["series"] == BEST_SERIES).any() else best_rows(frame), str(cluster))
        text += f"; what it loses most to at {hi:,} GPUs: {grown}" if grown else ""
        if len(naive) >= 2:
            text += (f". Naive DP keeps {naive['scaling_efficiency'].iloc[-1]:.0%} at "
                     f"{int(naive['num_gpus'].iloc[-1]):,} GPUs and loses mainly to "
                     f"{_grown(series_rows(frame, NAIVE_SERIES), str(cluster)) or 'nothing that grows'}")
        out.append(text + ".")
    return out


def _grown(rows: pd.DataFrame, cluster: str) -> str:
    """The loss whose share of the step grew most from the smallest to the largest scale, in words."""
    rows = rows[rows["cluster"] == cluster].sort_values("num_gpus")
    if len(rows) < 2:
        return ""
    fr = lost_time_fractions(rows.iloc[[0, -1]])
    growth = [(float(fr[c.key].iloc[1] - fr[c.key].iloc[0]), c) for c in LOSS_CAUSES]
    delta, cause = max(growth, key=lambda pair: pair[0])
    if delta <= 0:
        cause, share = largest_loss(fr.iloc[1])
        return f"{cause.label} ({share:.0%} of the step; no loss grows with scale)"
    return (f"{cause.label} ({float(fr[cause.key].iloc[0]):.0%} of the step at {int(rows['num_gpus'].iloc[0]):,} GPUs, "
            f"{float(fr[cause.key].iloc[1]):.0%} at {int(rows['num_gpus'].iloc[-1]):,})")


def _row_at(frame: pd.DataFrame, label: Hashable) -> pd.Series[Any]:
    """The row labelled ``label`` (from ``idxmax``/``idxmin``, which pandas-stubs type as Hashable)."""
    return frame.loc[[label]].iloc[0]


def _cluster_sentence(cluster: str, rows: pd.DataFrame, curves: pd.DataFrame) -> str:
    """Best plan at the cluster's largest scale: MFU, efficiency, naive DP, largest loss."""
    top = _row_at(rows, rows["num_gpus"].idxmax())
    n = int(top["num_gpus"])
    on_cluster = curves[curves["cluster"] == cluster]
    best_eff = _efficiency(on_cluster, BEST_SERIES, n)
    smallest = int(on_cluster[on_cluster["series"] == BEST_SERIES]["num_gpus"].min())
    text = (f"At {n:,} GPUs on {cluster}, the best plan ({plan_label({str(k): v for k, v in top.items()})}) "
            f"reaches {top['mfu']:.0%} MFU")
    if smallest < n:
        text += f" and {best_eff:.0%} scaling efficiency (against {smallest:,} GPUs)"
    text += f"; {_naive_clause(on_cluster, n, float(top['tokens_per_s_per_gpu']), smallest < n)}"
    fractions = lost_time_fractions(top.to_frame().T).iloc[0]
    cause, share = largest_loss(fractions)
    return text + f"; the largest loss is {cause.label} ({share:.0%} of step time)."


def _efficiency(curves: pd.DataFrame, series: str, num_gpus: int) -> float | None:
    """Scaling efficiency of ``series`` at ``num_gpus``, or None when it has no such point."""
    hit = curves[(curves["series"] == series) & (curves["num_gpus"] == num_gpus)]
    return None if hit.empty else float(hit["scaling_efficiency"].iloc[0])


def _naive_clause(curves: pd.DataFrame, num_gpus: int, best_tps: float, scaled: bool) -> str:
    """What the naive DP baseline reaches at the same scale, in words."""
    naive = curves[(curves["series"] == NAIVE_SERIES) & (curves["num_gpus"] == num_gpus)]
    if naive.empty:
        return "naive DP has no successful point at this scale"
    row = naive.iloc[0]
    speedup = best_tps / float(row["tokens_per_s_per_gpu"])
    efficiency = f"{row['scaling_efficiency']:.0%} scaling efficiency and " if scaled else ""
    return (f"naive DP reaches {efficiency}{row['mfu']:.0%} MFU (the best plan is "
            f"{speedup:.2f}x faster per GPU)")


def _hardware_sentence(table: pd.DataFrame) -> str:
    """The cheapest cluster per million tokens, or the fastest per GPU when prices are unknown;
    then the most frugal in energy per token where the rows carry it."""
    priced = table.dropna(subset=["cost_per_million_tokens"])
    if not priced.empty:
        row = _row_at(priced, priced["cost_per_million_tokens"].idxmin())
        first = (f"Cheapest per token: {row['cluster']} at ${row['cost_per_million_tokens']:.2f} "
                 f"per million tokens ({row['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU at "
                 f"{int(row['num_gpus']):,} GPUs, ${row['cost_per_gpu_hour']:.2f}/GPU-hour).")
    else:
        row = _row_at(table, table["tokens_per_s_per_gpu"].idxmax())
        first = (f"Fastest per GPU: {row['cluster']} with {row['tokens_per_s_per_gpu']:,.0f} "
                 f"tokens/s/GPU at {int(row['num_gpus']):,} GPUs (no $/GPU-hour given, so no cost).")
    return f"{first} {_energy_sentence(table)}".strip()


def _energy_sentence(table: pd.DataFrame) -> str:
    """The cluster with the least kWh per million tokens ('' when the rows carry no energy)."""
    if "kwh_per_million_tokens" not in table.columns or table["kwh_per_million_tokens"].isna().all():
        return ""
    row = _row_at(table, table["kwh_per_million_tokens"].astype(float).idxmin())
    return (f"Least energy per token: {row['cluster']} at {row['kwh_per_million_tokens']:.3g} kWh "
            f"per million tokens ({row['mean_gpu_power_w']:.0f} W per GPU on average, PUE 1).")
