"""One self-contained HTML page: summary sentences, inlined PNG figures, tables, inline CSS.

Owns the page's markup: images as base64 data URIs, no external resource of any kind, every
string escaped, numbers formatted by column (percentages, thousands separators, dollars). A small
inline script marks, on window load, how many figures decoded and how many tables exist
(``data-images-loaded``, ``data-images-total``, ``data-tables`` on ``<body>``), so a headless
browser can check the page. It does not compute anything or write files (``reports.report``).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd


@dataclass(frozen=True, kw_only=True)
class PageFigure:
    """One figure of the page."""

    key: str
    """Element id and file stem (e.g. ``scaling_efficiency``)."""
    caption: str
    """What the figure shows, in words."""
    png: bytes
    """The rendered PNG image."""


@dataclass(frozen=True, kw_only=True)
class PageTable:
    """One table of the page."""

    key: str
    """Element id (e.g. ``plan-table``)."""
    caption: str
    """Heading shown above the table."""
    frame: pd.DataFrame
    """The rows to show."""
    note: str = ""
    """An optional line under the heading (e.g. what was truncated)."""


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1100px;padding:24px;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:.9em}.summary{background:#f4f7fb;border-left:4px solid #3b6fb6;
padding:12px 18px}.summary li{margin:.3em 0}figure{margin:18px 0}
figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.82em;margin:8px 0;display:block;overflow-x:auto}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f0f0f0}tr:nth-child(even) td{background:#fafafa}
td.txt,th.txt{text-align:left}.note{color:#666;font-size:.85em}
.scenario{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:.9em;
background:#fafafa;border:1px solid #e4e4e4;padding:10px 14px}.scenario dt{color:#555}
.scenario dd{margin:0}.verdict{background:#fff8e6;border-left:4px solid #e69138;padding:12px 18px}
.verdict li{margin:.3em 0}
"""

SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.dataset.imagesLoaded = String(loaded.length);
  document.body.dataset.imagesTotal = String(images.length);
  document.body.dataset.tables = String(document.getElementsByTagName("table").length);
});
"""


def _percent(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):.1%}"


def _number(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):,.0f}"


def _dollars(value: Any) -> str:
    return "—" if pd.isna(value) else f"${float(value):,.3f}"


def _count(value: Any) -> str:
    return "—" if pd.isna(value) else f"{int(value):,}"


def _times(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):.2f}x"


def _gib(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):.1f}"


def _seconds(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):.3f}"


def _general(value: Any) -> str:
    return "—" if pd.isna(value) else f"{float(value):.4g}"


# A DataFrame cell: pandas-stubs type cells as Any (a float, an int, a string or NaN).
FORMATTERS: dict[str, Callable[[Any], str]] = {
    "mfu": _percent, "hfu": _percent, "scaling_efficiency": _percent,
    "tokens_per_s_per_gpu": _number, "tokens_per_s": _number,
    "cost_per_gpu_hour": _dollars, "cost_per_million_tokens": _dollars,
    "step_time_s": _general, "peak_memory_gb": _general, "speedup_vs_naive_dp": _times,
    "num_gpus": _count, "tflops_per_gpu": _number, "peak_memory_gib": _gib, "memory_headroom_gib": _gib,
    "hbm_capacity_gib": _gib, "t_compute": _seconds, "compute_share_of_step": _percent,
    "c_gemm_ideal": _seconds, "c_gemm_efficiency_loss": _seconds, "c_attention_kernel": _seconds,
    "c_elementwise": _seconds, "c_recompute": _seconds, "c_overhead": _seconds,
    "kwh_per_million_tokens": _general, "mean_gpu_power_w": _count,
}
"""How each known numeric column is shown; other columns print as they are."""


HEADERS: dict[str, str] = {
    "num_gpus": "GPUs", "tokens_per_s_per_gpu": "tokens/s/GPU", "mfu": "MFU", "hfu": "HFU",
    "scaling_efficiency": "scaling eff.", "step_time_s": "step (s)",
    "peak_memory_gb": "peak mem (GB)", "cost_per_gpu_hour": "$/GPU-h", "tflops_per_gpu": "TFLOP/s/GPU",
    "peak_memory_gib": "peak mem (GiB)", "memory_headroom_gib": "headroom (GiB)", "hbm_capacity_gib": "HBM (GiB)",
    "t_compute": "compute (s)", "compute_share_of_step": "compute / step",
    "c_gemm_ideal": "GEMM at peak (s)", "c_gemm_efficiency_loss": "GEMM eff. loss (s)",
    "c_attention_kernel": "attention (s)", "c_elementwise": "element-wise (s)", "c_recompute": "recompute (s)",
    "c_overhead": "launch/overhead (s)",
    "cost_per_million_tokens": "$/M tokens", "speedup_vs_naive_dp": "x naive DP",
    "kwh_per_million_tokens": "kWh/M tokens", "mean_gpu_power_w": "W/GPU (mean)",
    "micro_batch": "mb", "point_id": "point",
}
"""Column headings shown on the page (the CSV files keep the contract's names)."""


def _formatted(frame: pd.DataFrame) -> pd.DataFrame:
    """Values as display strings, columns under their page headings."""
    out = frame.astype(object).where(frame.notna(), "—")
    for column, formatter in FORMATTERS.items():
        if column in frame.columns:
            out[column] = frame[column].map(formatter)
    return out.rename(columns=HEADERS)


def _grid(frame: pd.DataFrame, key: str) -> str:
    """The table, numbers right-aligned and text left-aligned by the column's type."""
    shown = _formatted(frame)
    kinds = ["num" if pd.api.types.is_numeric_dtype(frame[c]) else "txt" for c in frame.columns]
    head = "".join(f'<th class="{k}">{html.escape(str(c))}</th>' for c, k in zip(shown.columns, kinds))
    body = "".join("<tr>" + "".join(f'<td class="{k}">{html.escape(str(v))}</td>' for v, k in zip(row, kinds)) + "</tr>"
                   for row in shown.itertuples(index=False))
    return f'<table id="{html.escape(key)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def table_html(table: PageTable) -> str:
    """A heading, an optional note and the table itself (escaped, formatted, aligned by type)."""
    body = (_grid(table.frame, table.key)
            if not table.frame.empty else f'<table id="{html.escape(table.key)}"><tr>'
            "<td>none</td></tr></table>")
    note = f'<p class="note">{html.escape(table.note)}</p>' if table.note else ""
    return f"<h2>{html.escape(table.caption)}</h2>\n{note}\n{body}"


def figure_html(figure: PageFigure) -> str:
    """An ``<img>`` with the PNG inlined as a data URI, and its caption."""
    data = base64.b64encode(figure.png).decode("ascii")
    return (f'<figure id="{html.escape(figure.key)}"><img alt="{html.escape(figure.caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(figure.caption)}'
            "</figcaption></figure>")


def scenario_html(header: Mapping[str, object]) -> str:
    """The scenario as a definition list (what was simulated, by whom, when)."""
    rows = "".join(f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(str(v))}</dd>" for k, v in header.items())
    return f'<dl class="scenario" id="scenario">{rows}</dl>'


def render_page(*, title: str, sentences: list[str], figures: list[PageFigure],
                tables: list[PageTable], meta: str = "", header: Mapping[str, object] | None = None,
                verdict: list[str] | None = None) -> str:
    """The whole self-contained page: title, scenario, verdict, findings, figures, tables."""
    items = "\n".join(f"<li>{html.escape(s)}</li>" for s in sentences)
    judged = "\n".join(f"<li>{html.escape(s)}</li>" for s in verdict or [])
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style>",
        f"<script>{SCRIPT}</script></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<h2>Verdict</h2><ul class="verdict" id="verdict">{judged}</ul>' if judged else "",
        scenario_html(header) if header else "",
        f'<p class="meta">{html.escape(meta)}</p>' if meta else "",
        f'<h2>Findings</h2><ul class="summary" id="summary">{items}</ul>',
        "<h2>Figures</h2>", *[figure_html(f) for f in figures],
        *[table_html(t) for t in tables],
        "</body></html>",
    ])
