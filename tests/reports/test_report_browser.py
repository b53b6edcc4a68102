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


def test_report_renders_in_chromium(tmp_path: Path,
                                    results_factory: Callable[..., pd.DataFrame]) -> None:
    frame = results_factory(clusters=("h100", "a100"), counts=(8, 64, 512))
    page = write_scaling_report(frame, tmp_path / "out", title="browser check",
                                cost_per_gpu_hour=2.0)
    dom = _dump_dom(page, tmp_path / "profile")
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    attributes = dict(re.findall(r'data-([a-z-]+)="(\d+)"', body.group(0)))
    assert attributes.get("images-total") == "6"  # 5 scaling figures + hardware
    assert attributes.get("images-loaded") == attributes["images-total"]
    assert attributes.get("tables") == "4"
    for table_id in ("scaling-table", "plan-table", "hardware-table", "errors-table"):
        assert f'id="{table_id}"' in dom
