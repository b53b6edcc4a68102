"""``clustersim watch SCENARIO LOG [--follow]``: a running job's log against its prediction.

Owns the command: simulate the scenario once (the prediction and its exposed-communication
share), take the interval from ``--interval``, else from the fit report beside the profile
(``calibrate fit --runs``), else a stated default; parse the log so far, print every finding of
``clustersim.simulator.calibration.watch.assess`` once, and with ``--follow`` keep reading as lines
arrive. Per-rank timings in the log (``calibration.ranks``) name a slow rank or node;
``--scale-runs DIR`` (imported runs of the same model at other GPU counts) lets the cause tell
growth with scale (communication) from compute. Exit status 3 (and one ``ACTION`` line a
scheduler can parse) when the run is slower than the threshold; 2 for bad input; 0 otherwise.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from clustersim.simulator.profile import CalibrationProfile, load_profile
from clustersim.simulator.calibration import (
    Assessment,
    Event,
    Prediction,
    RunLogError,
    ScalePoint,
    SlowRank,
    WatchRules,
    assess,
    detection_delay,
    detection_reports,
    has_rank_times,
    parse_log,
    slow_rank,
)
from clustersim.simulator.errors import CalibrationError
from clustersim.simulator.scenario import Scenario, load_scenario, read_yaml
from clustersim.simulator.step import simulate_step as simulate

console = Console(width=None if sys.stdout.isatty() else 160)
DEFAULT_INTERVAL = (0.9, 1.1)
"""Used when neither --interval nor a fit report gives one: +-10%, stated as not fitted."""
EXPOSED = ("exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "exposed_dp", "exposed_offload")
ALERT_EXIT = 3


def _interval(raw: str | None, scenario_path: Path, calibration: Path | None) -> tuple[tuple[float, float], str]:
    """(interval, where it came from)."""
    if raw:
        try:
            lo, hi = (float(x) for x in raw.split(","))
        except ValueError:
            raise CalibrationError(f"--interval {raw!r}: give two percentages, e.g. -5,8") from None
        if not lo < 0 < hi:
            raise CalibrationError(f"--interval {raw!r}: the low edge must be negative and the high one positive")
        return (1 + lo / 100, 1 + hi / 100), "--interval"
    profile = calibration or _scenario_profile(scenario_path)
    from clustersim.simulator.fitted_interval import read_interval

    found = read_interval(profile) if profile else None
    if found:
        return found, f"held-out runs of {profile}"
    return DEFAULT_INTERVAL, "default +-10% (not fitted: run calibrate fit --runs for one)"


def _scenario_profile(path: Path) -> Path | None:
    ref = read_yaml(path).get("calibration")
    if not isinstance(ref, str):
        return None
    p = Path(ref)
    return p if p.is_absolute() or p.exists() else path.parent / p


def _intervals(scenario_path: Path) -> tuple[int | None, int | None]:
    """Checkpoint and eval intervals from run.json beside an imported scenario."""
    doc = scenario_path.parent / "run.json"
    if not doc.is_file():
        return None, None
    data = json.loads(doc.read_text())
    return data.get("checkpoint_interval"), data.get("eval_interval")


def _predicted(sc: Scenario, profile: CalibrationProfile | None) -> tuple[float, float, float]:
    """(step time, exposed-communication share, compute share) of a scenario's prediction."""
    res = simulate(sc.model, sc.training, sc.cluster, sc.plan, profile=profile, mode=sc.mode, seed=sc.seed)
    share = sum(res.breakdown.get(k, 0.0) for k in EXPOSED) / res.step_time
    return res.step_time, share, res.breakdown.get("compute", 0.0) / res.step_time


def prediction(sc: Scenario, scenario_path: Path, calibration: Path | None, raw: str | None) -> tuple[Prediction, str]:
    """The prediction the log is compared with, and where its interval came from."""
    profile = load_profile(calibration) if calibration else sc.profile
    step, share, compute = _predicted(sc, profile)
    interval, origin = _interval(raw, scenario_path, calibration)
    ckpt, ev = _intervals(scenario_path)
    return Prediction(step_time_s=step, interval=interval, exposed_comm_share=share, compute_share=compute,
                      checkpoint_interval=ckpt, eval_interval=ev, num_gpus=sc.cluster.num_gpus), origin


def scale_points(root: Path, sc: Scenario, calibration: Path | None) -> list[ScalePoint]:
    """Imported runs under ``root`` of the same model at other GPU counts, each predicted with the
    watch's profile (or its own): measured / predicted and the exposed-communication share."""
    from clustersim.simulator.calibration.fit_logs import load_runs  # heavy (pandas): imported when used

    profile = load_profile(calibration) if calibration else None
    points = []
    for run in load_runs(root):
        other = run.scenario
        if other.model != sc.model or other.cluster.num_gpus == sc.cluster.num_gpus:
            continue
        step, share, _ = _predicted(other, profile or other.profile)
        points.append(ScalePoint(gpus=other.cluster.num_gpus, ratio=run.measured_s / step, comm_share=share, name=run.name))
    if not points:
        raise CalibrationError(f"--scale-runs {root}: no imported run of model {sc.model.name} at another GPU count "
                               f"than {sc.cluster.num_gpus}; import the same job at other scales with import-run")
    return points


def _complete(text: str) -> str:
    """The text up to its last newline or carriage return (a line still being written waits;
    NeMo's progress bar ends each refresh with a carriage return)."""
    return text[: max(text.rfind("\n"), text.rfind("\r")) + 1]


def _report(a: Assessment, seen: set[tuple[str, str]]) -> None:
    for e in a.events:
        # a slow rank is re-found at every read: print it once per rank or node it names
        key = (e.kind, e.message.split(" is ")[0] if e.kind == "slow_rank" else str(e.step))
        if key not in seen:
            seen.add(key)
            colour = {"slow": "red", "slow_rank": "red", "drift": "yellow", "tail": "yellow", "periodic": "cyan"}.get(e.kind, "white")
            console.print(f"[{colour}]step {e.step:>7}  {e.kind:<9}[/{colour}] {e.message}")


def action_line(a: Assessment, last: Event | None, pred: Prediction, slow: SlowRank | None = None) -> str:
    """One line a scheduler can parse (key=value, no spaces in a value); ``step``: where the
    slowdown was flagged (else the last finding)."""
    flagged = next((e for e in reversed(a.events) if e.kind == "slow"), last)
    step = flagged.step if flagged else -1
    cause = re.sub(r"[^a-z]+", "_", a.cause.split(":")[0].strip().lower()).strip("_") or "none"
    where = "" if slow is None else (f" rank={slow.rank} node={slow.node}" + (
        f" node_ranks={','.join(map(str, slow.node_ranks))}" if slow.whole_node else ""))
    return (f"ACTION clustersim-watch status={a.status.replace(' ', '_')} step={step} "
            f"slower_pct={(a.ratio - 1) * 100:.1f} predicted_s={pred.step_time_s:.4g} cause={cause}{where}")


def register(app: typer.Typer) -> None:
    """Add ``watch`` to ``app``."""

    @app.command("watch")
    def watch_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML of the job (e.g. from import-run)."),
        log: Path = typer.Argument(..., help="The job's training log."),
        follow: bool = typer.Option(False, "--follow", help="Keep reading as the job writes."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Profile (its .fit.json gives the interval)."),
        interval: Optional[str] = typer.Option(None, "--interval", help="Interval in percent, e.g. -5,8."),
        threshold: Optional[float] = typer.Option(None, "--threshold", help="Alert above this % slower (default: the interval's top)."),
        window: int = typer.Option(8, "--window", help="Records of the rolling median."),
        warmup: int = typer.Option(2, "--warmup", help="Records dropped at the start."),
        framework: Optional[str] = typer.Option(None, "--framework", help="megatron, nemo, torchtitan, composer (default: detected)."),
        poll: float = typer.Option(2.0, "--poll", help="Seconds between reads with --follow."),
        idle_timeout: float = typer.Option(600.0, "--idle-timeout", help="Stop following after this many seconds without a new line."),
        stop_on_alert: bool = typer.Option(False, "--stop-on-alert", help="With --follow, exit 3 at the first alert."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field."),
        scale_runs: Optional[Path] = typer.Option(None, "--scale-runs", help="Imported runs of the same job at other GPU counts: tells growth with scale from compute."),
        rank_threshold: float = typer.Option(5.0, "--rank-threshold", help="A rank this % slower than its stage's median (per-rank timers) is slow."),
    ) -> None:
        """Compare every logged step with the prediction: on plan, slower by X%, drift, spikes, tail; the cause."""
        if not log.is_file():
            raise RunLogError(f"log {log} does not exist; pass the path of the job's training log")
        sc = load_scenario(scenario, set_)
        pred, origin = prediction(sc, scenario, calibration, interval)
        scales = scale_points(scale_runs, sc, calibration) if scale_runs is not None else []
        rules = WatchRules(window=window, warmup=warmup, threshold=None if threshold is None else threshold / 100)
        tokens = sc.training.tokens_per_step / sc.cluster.num_gpus
        console.print(f"predicted {pred.step_time_s * 1e3:.1f} ms/step, interval [{(pred.interval[0] - 1) * 100:+.1f}%, "
                      f"{(pred.interval[1] - 1) * 100:+.1f}%] ({origin}); alert above {(rules.limit(pred) - 1) * 100:+.1f}%; "
                      f"exposed communication {pred.exposed_comm_share * 100:.0f}% of the step; a sustained slowdown is "
                      f"flagged after {detection_delay(rules)} slow records" + (
                          f"; a slow rank after {detection_reports(2 * window)} slow per-rank reports of the last {2 * window}"
                          if has_rank_times(log.read_text(errors="replace")) else ""))
        seen: set[tuple[str, str]] = set()
        size, idle_since, a, last, slow = -1, time.monotonic(), None, None, None
        while True:
            text = _complete(log.read_text(errors="replace"))
            if len(text) != size:
                size, idle_since = len(text), time.monotonic()
                try:
                    records = parse_log(text, str(log), framework=framework, tokens_per_gpu_step=tokens).steps
                except RunLogError:
                    if not follow:
                        raise
                    records = ()
                slow = slow_rank(text, pp=sc.plan.pp, gpus_per_node=sc.cluster.gpus_per_node,
                                 threshold=rank_threshold / 100, last=2 * window)
                a = assess(records, pred, rules, slow=slow, scale=scales)
                last = next((e for e in reversed(a.events)), None)
                _report(a, seen)
                if follow and stop_on_alert and a.alert:
                    break
            if not follow or time.monotonic() - idle_since > idle_timeout:
                break
            time.sleep(poll)
        assert a is not None
        console.print(f"status: {a.status}" + (f" ({(a.ratio - 1) * 100:+.1f}% vs predicted)" if a.ratio == a.ratio else "")
                      + (f"; cause that fits: {a.cause}" if a.cause else ""))
        for note in a.notes:
            console.print(f"note: {note}")
        if a.alert:
            console.print(action_line(a, last, pred, slow), soft_wrap=True, markup=False, highlight=False)
            raise typer.Exit(ALERT_EXIT)
