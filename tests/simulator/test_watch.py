"""The watch detector on synthetic logs drawn from a prediction (seeded numpy Generator noise):
quiet on a clean log, an injected slowdown flagged within the stated delay, drift, periodic
spikes with their cause, a grown tail; and the CLI's exit status and ACTION line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clustersim.simulator.calibration.runlog_records import LogStep
from clustersim.simulator.calibration.watch import (
    Prediction, WatchRules, assess, cause_of, detection_delay,
)

PRED = Prediction(step_time_s=2.0, interval=(0.95, 1.05), exposed_comm_share=0.2, checkpoint_interval=50)
NOISE = 0.01  # 1% per-step noise: well inside the +-5% interval


def synthetic(n: int, rng: np.random.Generator, factor: np.ndarray | None = None, noise: float = NOISE,
              marks: dict[int, tuple[str, ...]] | None = None) -> list[LogStep]:
    """n records of the predicted step x factor x (1 + noise), step numbers 1..n."""
    f = np.ones(n) if factor is None else factor
    t = PRED.step_time_s * f * (1.0 + noise * rng.standard_normal(n))
    return [LogStep(step=k + 1, time_s=float(t[k]), span=1, line=k + 1, marks=(marks or {}).get(k + 1, ())) for k in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_clean_log_stays_quiet(seed: int) -> None:
    a = assess(synthetic(400, np.random.default_rng(seed)), PRED)
    assert a.status == "on plan" and not a.alert
    assert [e.kind for e in a.events] == []


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("slowdown", [0.10, 0.25])
def test_injected_slowdown_is_flagged_within_the_delay(seed: int, slowdown: float) -> None:
    n_start = 120
    factor = np.where(np.arange(1, 301) >= n_start, 1.0 + slowdown, 1.0)
    records = synthetic(300, np.random.default_rng(seed), factor)
    rules = WatchRules()
    slow = [e for e in assess(records, PRED, rules).events if e.kind == "slow"]
    assert slow, "slowdown not flagged"
    assert n_start <= slow[0].step <= n_start + detection_delay(rules) - 1  # 5 slow records for the default window 8
    assert slow[0].value == pytest.approx(slowdown, abs=0.03)
    # as the log grows, the flag comes at the same record (pure function of the records seen so far)
    early = assess(records[: slow[0].step], PRED, rules)
    assert early.alert and early.events[-1].step == slow[0].step
    assert not assess(records[: slow[0].step - 1], PRED, rules).alert


def test_detection_delay_is_half_the_window_plus_one() -> None:
    assert detection_delay(WatchRules(window=8)) == 5 and detection_delay(WatchRules(window=4)) == 3


def test_drift_is_told_from_a_level_shift() -> None:
    rng = np.random.default_rng(7)
    creep = synthetic(400, rng, 1.0 + 0.10 * np.linspace(0.0, 1.0, 400))
    kinds = {e.kind for e in assess(creep, PRED).events}
    assert "drift" in kinds
    shift = synthetic(400, np.random.default_rng(7), np.where(np.arange(400) >= 200, 1.10, 1.0))
    kinds = {e.kind for e in assess(shift, PRED).events}
    assert "slow" in kinds and "drift" not in kinds


def test_periodic_checkpoint_spikes_and_their_cause() -> None:
    factor = np.ones(300)
    factor[49::50] = 4.0  # every 50th step stalls (steps 50, 100, ...)
    a = assess(synthetic(300, np.random.default_rng(3), factor), PRED)
    periodic = [e for e in a.events if e.kind == "periodic"]
    assert periodic and periodic[-1].value == 50 and "checkpoint" in periodic[-1].message
    assert a.status == "on plan"  # the rolling median ignores the spikes
    no_ckpt = Prediction(step_time_s=2.0, interval=(0.95, 1.05), exposed_comm_share=0.2)
    factor = np.ones(300)
    factor[36::37] = 3.0
    msg = [e.message for e in assess(synthetic(300, np.random.default_rng(3), factor), no_ckpt).events if e.kind == "periodic"]
    assert msg and "every 37 steps" in msg[-1] and "GC" in msg[-1]


def test_grown_tail_points_at_stragglers() -> None:
    rng = np.random.default_rng(11)
    records = synthetic(400, rng)
    late = rng.random(200) < 0.08  # 8% of the late steps wait 20-40% for a slow rank
    for k in np.nonzero(late)[0]:
        r = records[200 + k]
        records[200 + k] = LogStep(step=r.step, time_s=r.time_s * (1.2 + 0.2 * rng.random()), span=1, line=r.line)
    kinds = [e.kind for e in assess(records, PRED).events]
    assert "tail" in kinds
    assert cause_of(0.1, PRED, WatchRules(), tail=True).startswith("stragglers")


def test_cause_network_vs_compute_follows_the_exposed_share() -> None:
    rules = WatchRules()
    # +20% with 20% exposed communication: communication 2x slower explains it -> network
    assert cause_of(0.20, PRED, rules, tail=False).startswith("network")
    # +20% with 5% exposed: communication would have to be 5x slower -> compute
    lean = Prediction(step_time_s=2.0, interval=(0.95, 1.05), exposed_comm_share=0.05)
    assert cause_of(0.20, lean, rules, tail=False).startswith("compute")
    none = Prediction(step_time_s=2.0, interval=(0.95, 1.05), exposed_comm_share=0.0)
    assert cause_of(0.20, none, rules, tail=False).startswith("compute")


def test_marked_and_warmup_records_are_not_levels() -> None:
    marks = {k: ("eval",) for k in range(60, 70)}
    factor = np.ones(200)
    factor[:2] = 5.0
    factor[59:69] = 3.0
    a = assess(synthetic(200, np.random.default_rng(5), factor, marks=marks), PRED)
    assert not a.alert and "slow" not in {e.kind for e in a.events}


def megatron_log(times: np.ndarray) -> str:
    """Megatron training_log lines (log interval 1) for the given step times."""
    return "".join(f" [2025-06-01 12:00:00] iteration {k + 1:8d}/{len(times):8d} | consumed samples: {k:12d} | "
                   f"elapsed time per iteration (ms): {t * 1e3:.1f} | learning rate: 1.0E-04 | global batch size:   128 |"
                   f" lm loss: 2.0E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
                   for k, t in enumerate(times))


def test_watch_cli_exit_status_and_action_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    scenario = root / "examples" / "llama3_70b_h100.yaml"
    base = [sys.executable, "-m", "clustersim.simulator.cli"]
    first = subprocess.run(base + ["watch", str(scenario), str(tmp_path / "none.log")], capture_output=True, text=True)
    assert first.returncode == 2 and "does not exist" in first.stderr
    # the prediction, read back from the command's first line on an empty-ish log
    from clustersim.simulator.scenario import load_scenario
    from clustersim.simulator.step.simulate import simulate
    sc = load_scenario(scenario)
    t = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile).step_time
    rng = np.random.default_rng(0)
    clean = t * (1 + 0.01 * rng.standard_normal(60))
    (tmp_path / "clean.log").write_text(megatron_log(clean))
    ok = subprocess.run(base + ["watch", str(scenario), str(tmp_path / "clean.log"), "--interval", "-5,5"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "status: on plan" in ok.stdout and "ACTION" not in ok.stdout
    slow = clean.copy()
    slow[30:] *= 1.2
    (tmp_path / "slow.log").write_text(megatron_log(slow))
    bad = subprocess.run(base + ["watch", str(scenario), str(tmp_path / "slow.log"), "--interval", "-5,5"], capture_output=True, text=True)
    assert bad.returncode == 3, bad.stdout + bad.stderr
    action = [line for line in bad.stdout.splitlines() if line.startswith("ACTION clustersim-watch")]
    assert action and "status=slower" in action[0] and "step=" in action[0]
    step = int(action[0].split("step=")[1].split()[0])
    assert 31 <= step <= 31 + 4


def test_watch_follow_reads_lines_as_they_arrive(tmp_path: Path) -> None:
    import time
    root = Path(__file__).resolve().parents[2]
    scenario = root / "examples" / "llama3_70b_h100.yaml"
    from clustersim.simulator.scenario import load_scenario
    from clustersim.simulator.step.simulate import simulate
    sc = load_scenario(scenario)
    t = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=sc.profile).step_time
    times = t * (1 + 0.01 * np.random.default_rng(1).standard_normal(60))
    times[30:] *= 1.3
    text = megatron_log(times)
    cut = text.index(" [2025", text.index("iteration       30/")) + 40  # inside the line of iteration 31
    log = tmp_path / "live.log"
    log.write_text(text[:cut])
    proc = subprocess.Popen([sys.executable, "-m", "clustersim.simulator.cli", "watch", str(scenario), str(log), "--follow",
                             "--poll", "0.2", "--idle-timeout", "30", "--stop-on-alert", "--interval", "-5,5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4.0)  # the follower has read the complete lines and waits on the partial one
    assert proc.poll() is None
    with log.open("a") as f:
        f.write(text[cut:])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err
    assert "ACTION clustersim-watch status=slower" in out


def test_level_shift_residual_matches_the_direct_sum() -> None:
    from clustersim.simulator.calibration.watch import _sse_shift
    y = np.random.default_rng(2).standard_normal(50) + np.where(np.arange(50) > 30, 2.0, 0.0)
    direct = min(float(np.sum((y[:k] - y[:k].mean()) ** 2) + np.sum((y[k:] - y[k:].mean()) ** 2)) for k in range(2, 49))
    assert _sse_shift(y) == pytest.approx(min(direct, float(np.sum((y - y.mean()) ** 2))))


def test_long_log_is_assessed_quickly() -> None:
    import time
    records = synthetic(20000, np.random.default_rng(4))
    start = time.perf_counter()
    a = assess(records, PRED)
    assert a.status == "on plan" and time.perf_counter() - start < 20.0  # a --follow poll on a 20,000-record log
