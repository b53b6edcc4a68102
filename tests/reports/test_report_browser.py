"""Render report.html in headless Chromium: every figure decodes and every table is there.

The page's own inline script writes, on window load, the number of decoded images and of tables
into data attributes of <body>; Chromium's --dump-dom prints the DOM after that script ran.
Skipped only when /usr/bin/chromium is absent outside CI (`.ci/run` installs Debian's chromium).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest

from clustersim.reports.report import write_scaling_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=5000")


def _dump_dom(page: Path, profile: Path) -> str:
    """The DOM of ``page`` after load, as printed by headless Chromium."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install chromium (apt-get install -y chromium)")
        pytest.skip("/usr/bin/chromium is absent (apt-get install -y chromium)")
    done = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, profile: Path, png: Path, height: int = 4000) -> Path:
    """A full-width PNG of ``page`` as headless Chromium renders it (to look at, not to compare)."""
    subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", f"--window-size=1200,{height}",
                    f"--screenshot={png}", page.as_uri()], capture_output=True, text=True, timeout=90, check=True)
    return png


def test_report_renders_in_chromium(tmp_path: Path,
                                    results_factory: Callable[..., pd.DataFrame]) -> None:
    frame = results_factory(clusters=("h100", "a100"), counts=(8, 64, 512))
    page = write_scaling_report(frame, tmp_path / "out", title="browser check",
                                cost_per_gpu_hour=2.0)
    dom = _dump_dom(page, tmp_path / "profile")
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    attributes = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body.group(0)))
    assert attributes.get("images-total") == "8"  # 5 scaling figures + hardware + a waterfall per cluster
    assert attributes.get("images-loaded") == attributes["images-total"]
    assert attributes.get("tables") == "6"
    for table_id in ("scaling-table", "plan-table", "compute-table", "pareto-table", "hardware-table",
                     "errors-table", "scenario", "verdict"):
        assert f'id="{table_id}"' in dom
    # the scenario header: model size and shape, batch x sequence, scaling kind, profile and fit date, version
    for needle in ("7.0B parameters, 32 layers, hidden 4096", "1024 sequences x 4096 tokens", "strong",
                   "h100-test-profile (fit 2026-11-30)", "clustersim version", "input hash"):
        assert needle in dom, needle
    # units: memory in GiB (never GB) next to capacity, TFLOP/s next to MFU, $ per million tokens
    for needle in ("peak mem (GiB)", "headroom (GiB)", "TFLOP/s/GPU", "MFU", "$/M tokens", "kWh/M tokens",
                   "W/GPU (mean)", "Least energy per token"):
        assert needle in dom, needle
    assert "(GB)" not in dom
    # the compute breakdown, and the verdict before the figures
    for needle in ("GEMM at peak (s)", "GEMM eff. loss (s)", "attention (s)", "element-wise (s)", "recompute (s)"):
        assert needle in dom, needle
    assert dom.index('id="verdict"') < dom.index("<h2>Figures</h2>")
    # the failed point shows its plan and its reason
    errors = dom[dom.index('id="errors-table"'):]
    assert "tp1 pp1" in errors and "OutOfMemoryError" in errors
    # no prediction intervals in these rows: the page says so instead of drawing a band
    assert "prediction interval" in dom
    shot = screenshot(page, tmp_path / "profile2", tmp_path / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
