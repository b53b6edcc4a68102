"""The install layout (issue 16): one `clustersim` namespace in site-packages, data files inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("simulator", "topologies", "workloads", "reports")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_its_namespace_name() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    on_disk = {"clustersim"} | {
        "clustersim." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")}
    assert listed == on_disk


def test_wheel_installs_only_clustersim_with_its_data(tmp_path: Path) -> None:
    source = tmp_path / "src"  # build from a copy: setuptools leaves build/ in the source folder
    for name in ("clustersim", *FOLDERS):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(source), "-w", str(tmp_path)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("clustersim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"clustersim"}
    for data in ("clustersim/workloads/data/published_runs.csv", "clustersim/topologies/presets/dgx_h100_2to1_fat_tree.yaml",
                 "clustersim/simulator/calibration/profiles/h100.yaml", "clustersim/workloads/presets/llama3-70b.yaml",
                 "clustersim/simulator/calibration/intervals.yaml"):
        assert data in names, data


def test_facade_names_resolve() -> None:
    code = ("import clustersim; from clustersim.simulator.step.result import Result;"
            "assert clustersim.Result is Result; print(clustersim.simulate.__module__, clustersim.search.__name__,"
            " clustersim.sweep.__name__, clustersim.load_scenario.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120, check=True)
    assert out.stdout.split() == ["clustersim.simulator.step.simulate", "search", "sweep", "load_scenario"]
