"""``clustersim search``: the engine's best plans for a scenario's model on N GPUs, proven by branch and bound."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from clustersim.simulator.bounds import GPU_LIMIT
from clustersim.simulator.profile import default_profile, load_profile
from clustersim.simulator.cli import output
from clustersim.simulator.scenario import load_scenario
from clustersim.simulator.search import (
    OBJECTIVES,
    Ranked,
    SearchReport,
    TokenPrice,
    price_per_token,
    search_plans as search,
)
from clustersim.simulator.step import J_PER_KWH
from clustersim.topologies.power import FacilitySpec

console = Console(width=None if sys.stdout.isatty() else 140)
MAX_DEFAULT_WORKERS = 8
"""``--workers 0`` runs one engine process per core up to this many: each batch prices that many plans at
once, and those past the serial stopping point are wasted."""
err_console = Console(stderr=True)


def losses(breakdown: dict[str, float], step: float, n: int = 3) -> str:
    """The ``n`` largest non-compute causes as ``tp 9% bubble 6%``."""
    parts = sorted(((v, k) for k, v in breakdown.items() if k != "compute" and v > 0), reverse=True)[:n]
    return " ".join(f"{k.replace('exposed_', '')} {v / step * 100:.0f}%" for v, k in parts)


def _bound(r: Ranked, price: TokenPrice | None, objective: str) -> dict[str, float]:
    """The plan's bound in the objective's unit: GiB (memory), kWh per M tokens (energy), $ per M
    tokens and, for a rental price, seconds (cost), else seconds."""
    match objective:
        case "memory":
            return {"bound_gib": r.bound / 2**30}
        case "energy":
            return {"bound_kwh_per_million_tokens": r.bound / J_PER_KWH * 1e6}
        case "cost" if price is not None:
            seconds = {"bound_s": r.bound / price.per_second} if price.per_joule == 0 else {}
            return {**seconds, "bound_cost_per_million_tokens": r.bound * 1e6}
    return {"bound_s": r.bound}


def step_interval(step_time: float, kind: str | None, accelerator: str, num_gpus: int) -> dict[str, Any]:
    """The 80 % interval of a predicted step time from the held-out residuals of its regime
    (``simulator.intervals``): low, high, regime, extrapolated and the nearest validated evidence;
    empty when ``kind`` is None or no interval table is bundled."""
    from clustersim.simulator.intervals import INTERVALS_PATH, interval_for  # loaded when used

    if kind is None or not INTERVALS_PATH.exists():
        return {}
    iv = interval_for(step_time, kind, accelerator, num_gpus)
    return {"step_time_low_s": iv.low_s, "step_time_high_s": iv.high_s, "interval_level": iv.level,
            "interval_regime": iv.regime, "interval_extrapolated": iv.extrapolated, "interval_nearest": iv.nearest}


def ranked_rows(plans: tuple[Ranked, ...], price: TokenPrice | None, objective: str = "time",
                kind: str | None = None) -> list[dict[str, Any]]:
    """One flat row per engine-priced plan: time (with its 80 % interval when ``kind``, the model's
    dense | moe | hybrid, is given), $/M tokens, kWh/M tokens, MFU, TFLOP/s/GPU, GiB, bound, tiers.
    The bound is in the objective's unit: seconds (time, cost), GiB (memory) or kWh per million
    tokens (energy)."""
    rows = []
    for i, r in enumerate(plans, 1):
        res = r.result
        if res is None:
            continue
        iv = step_interval(res.step_time, kind, str(res.labels.get("accelerator", "")), res.num_gpus)
        rows.append({"rank": i, "plan": r.plan.describe(), "step_time_s": res.step_time, **iv, **_bound(r, price, objective),
                     "cost_per_million_tokens": price.of(res.step_time, r.energy) * 1e6 if price else None,
                     "energy_j_per_token": r.energy,
                     "kwh_per_million_tokens": r.energy / J_PER_KWH * 1e6 if r.energy is not None else None,
                     "tokens_per_s_per_gpu": res.tokens_per_s_per_gpu, "mfu": res.mfu, "tflops_per_gpu": res.tflops_per_gpu,
                     "peak_memory_gib": res.peak_memory / 2**30, "hbm_capacity_gib": res.hbm_capacity / 2**30,
                     "memory_headroom_gib": res.memory_headroom / 2**30,
                     "analytic_step_time_s": r.estimate.step_time if r.estimate else None,
                     "analytic_vs_engine": r.disagreement, "losses": losses(dict(res.breakdown), res.step_time)})
    return rows


def _interval_cell(row: dict[str, Any]) -> str:
    """``lo-hi`` of the 80 % interval, ``*`` when extrapolated."""
    return f"{row['step_time_low_s']:.3g}-{row['step_time_high_s']:.3g}{'*' if row['interval_extrapolated'] else ''}"


def report_table(rep: SearchReport, title: str, price: TokenPrice | None = None, caption: str = "",
                 kind: str | None = None) -> Table:
    """The ranked plans: step time and its 80 % interval, $/M tokens, kWh/M tokens, MFU, TFLOP/s/GPU,
    memory, the bound and both tiers."""
    rows = ranked_rows(rep.ranked, price, rep.objective, kind)
    with_iv = any("step_time_low_s" in r for r in rows)
    extrapolated = [r for r in rows if r.get("interval_extrapolated")]
    if extrapolated:
        caption = (f"{caption}\n* EXTRAPOLATED ({extrapolated[0]['interval_regime']}): no held-out evidence for this "
                   f"regime or scale; nearest validated: {extrapolated[0]['interval_nearest']}").lstrip("\n")
    table = Table(title=title, caption=caption)
    bound_col, bound_key, bound_fmt = {"memory": ("bound GiB", "bound_gib", ".1f"),
                                       "energy": ("bound kWh/M", "bound_kwh_per_million_tokens", ".3f"),
                                       "cost": ("bound $/M", "bound_cost_per_million_tokens", ".3f")}.get(
                                           rep.objective, ("bound s", "bound_s", ".3f"))
    cols = ["#", "plan", "step s", *(["80% interval s"] if with_iv else []), *(["$/M tok"] if price else []), "kWh/M tok", "MFU", "TFLOP/s/GPU", "GiB / cap",
            bound_col, "analytic", "losses"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("plan", "losses") else "right")
    for row in rows:
        cells = [str(row["rank"]), row["plan"], f"{row['step_time_s']:.3f}"]
        cells += [_interval_cell(row)] if with_iv else []
        cells += [f"{row['cost_per_million_tokens']:.3f}"] if price else []
        cells += [f"{row['kwh_per_million_tokens']:.3f}" if row["kwh_per_million_tokens"] is not None else "-",
                  f"{row['mfu'] * 100:.1f}%", f"{row['tflops_per_gpu']:.0f}",
                  f"{row['peak_memory_gib']:.1f} / {row['hbm_capacity_gib']:.0f}", f"{row[bound_key]:{bound_fmt}}",
                  f"{row['analytic_vs_engine'] * 100:+.1f}%", row["losses"]]
        table.add_row(*cells)
    return table


def search_header(sc: Any, rep: SearchReport, profile_name: str, profile_date: str) -> dict[str, Any]:
    """What was searched: the scenario, the objective and what the search cost."""
    m, t, c = sc.model, sc.training, sc.cluster
    return {"model": m.name, "model_params": m.num_params(), "num_layers": m.num_layers, "hidden_size": m.hidden_size,
            "global_batch_size": t.global_batch_size, "seq_len": t.seq_len, "precision": t.precision,
            "cluster": c.name, "accelerator": c.accelerator.name, "num_gpus": c.num_gpus, "fabric": c.fabric,
            "hbm_capacity_gib": c.accelerator.hbm_capacity / 2**30, "profile": profile_name,
            "profile_fit_date": profile_date or "not recorded", "objective": rep.objective,
            "candidates": rep.candidates, "valid": rep.valid, "engine_calls": rep.engine_calls,
            "memory_rejected": rep.memory_rejected, "pruned_by_bound": rep.pruned}


def owner_facility(pue: float, price_per_kwh: float, capex_per_gpu: float, life_years: float) -> FacilitySpec:
    """The owner's prices as a facility (they replace any GPU-hour price), each bad value one error
    naming its option."""
    for option, value, ok in (("--pue", pue, pue >= 1.0), ("--price-per-kwh", price_per_kwh, price_per_kwh >= 0),
                              ("--capex-per-gpu", capex_per_gpu, capex_per_gpu >= 0), ("--life-years", life_years, life_years > 0)):
        if not (ok and math.isfinite(value)):
            raise ValueError(f"{option} = {value}: use a finite number ({'>= 1' if option == '--pue' else '> 0' if option == '--life-years' else '>= 0'})")
    return FacilitySpec(pue=pue, price_per_kwh=price_per_kwh, capex_per_gpu=capex_per_gpu, life_years=life_years,
                        price_per_gpu_hour=0.0)  # the owner's prices, given explicitly, win over a GPU-hour price


def register(app: typer.Typer) -> None:
    """Add ``search`` to ``app``."""

    @app.command("search")
    def search_cmd(
        scenario: Path = typer.Argument(..., help="Scenario YAML; its plan is ignored."),
        gpus: Optional[int] = typer.Option(None, "--gpus", help="GPU count (default: the scenario's).", min=1, max=GPU_LIMIT),
        top: int = typer.Option(5, "--top", help="How many plans to print.", min=1, max=1000),
        objective: str = typer.Option("time", "--objective", help="time, cost ($/token: cluster.cost_per_gpu_hour, or --price-per-kwh and --capex-per-gpu), memory or energy (facility J/token)."),
        pue: float = typer.Option(1.0, "--pue", help="Facility PUE for the owner's energy price (cost)."),
        price_per_kwh: float = typer.Option(0.0, "--price-per-kwh", help="Electricity price per kWh (owner pricing, cost)."),
        capex_per_gpu: float = typer.Option(0.0, "--capex-per-gpu", help="Capital cost per GPU, amortised (owner pricing, cost)."),
        life_years: float = typer.Option(4.0, "--life-years", help="Years over which capex is amortised."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field."),
        calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration profile YAML (default: the accelerator's bundled profile)."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Write the ranked plans, Pareto front and scenario as JSON ('-': standard output)."),
        csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write the ranked plans as CSV ('-': standard output)."),
        workers: int = typer.Option(0, "--workers", help="Local processes for the engine re-check (0: one per CPU core, "
                                                         "at most 8; 1: this process). The result does not depend on it.", min=0, max=256),
    ) -> None:
        """The engine's best plan, proven: every valid plan bounded, the engine prices best bound first until none can win."""
        started = time.perf_counter()
        if objective not in OBJECTIVES:
            raise ValueError(f"--objective = {objective!r}: use one of {', '.join(OBJECTIVES)}")
        goal = next(o for o in OBJECTIVES if o == objective)
        sc = load_scenario(scenario, [*set_, *([f"cluster.num_gpus={gpus}"] if gpus is not None else [])])
        profile = load_profile(calibration) if calibration else sc.profile
        owner = price_per_kwh > 0 or capex_per_gpu > 0
        facility = owner_facility(pue, price_per_kwh, capex_per_gpu, life_years) if owner else None
        price = price_per_token(sc.cluster, sc.training, facility) if objective == "cost" or owner else None
        quiet = output.STDOUT in (str(json_out), str(csv_out))
        say = err_console if quiet else console
        # no refresh thread: the engine workers are forked, and a fork must not copy a lock a thread holds
        with Progress(console=err_console, transient=True, auto_refresh=False) as bar:
            task = bar.add_task("bounding plans", total=None)
            rep = search(sc.model, sc.training, sc.cluster, top=top, objective=goal, profile=profile,
                         progress=lambda n: bar.update(task, completed=n, refresh=True), facility=facility,
                         workers=workers or min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS))
        from clustersim.simulator.intervals import model_kind  # loaded when used

        kind = model_kind(sc.model.layer_pattern, sc.model.is_moe)
        prof = profile or default_profile(sc.cluster.accelerator.name)
        header = {**search_header(sc, rep, prof.name, prof.fit_date),
                  **({"price_basis": price.basis} if price else {}),
                  **({"pue": pue, "price_per_kwh": price_per_kwh, "capex_per_gpu": capex_per_gpu, "life_years": life_years}
                     if owner else {})}
        title, caption = search_texts(sc, rep, prof, objective, time.perf_counter() - started)
        if not quiet:
            print_search(rep, title, caption, price, kind)
        if not rep.ranked:
            raise ValueError("no plan fits in memory; try more GPUs, a smaller global batch or a bigger accelerator")
        write_search(rep, header, price, objective, kind, json_out, csv_out, say)


def search_texts(sc: Any, rep: SearchReport, prof: Any, objective: str, elapsed: float) -> tuple[str, str]:
    """The ranked table's title (what was searched) and caption (why #1 is proven, the tiers' speeds)."""
    title = (f"{sc.model.name} on {sc.cluster.num_gpus}x {sc.cluster.accelerator.name} ({sc.cluster.name}), objective {objective}: "
             f"{rep.valid:,} valid plans bounded, {rep.engine_calls} priced by the engine, {rep.pruned:,} pruned by the bound")
    caption = (f"#1 is the engine's best over all {rep.valid:,} valid plans (no unpriced plan's bound beats it); "
               f"GBS {sc.training.global_batch_size} x seq {sc.training.seq_len}, {sc.training.precision}; profile {prof.name} "
               f"(fit {prof.fit_date or 'not recorded'}); analytical tier {rep.valid:,} plans checked and bounded in "
               f"{rep.analytic_seconds + rep.bound_seconds:.2f} s = {rep.plans_per_second:,.0f} plans/s "
               f"({rep.plans_per_cpu_second:,.0f} per CPU second); engine "
               f"{rep.engine_seconds:.2f} s on {rep.workers} process{'es' if rep.workers > 1 else ''}"
               f"{f' ({rep.speculative} run past the stopping point, dropped)' if rep.speculative else ''}; "
               f"search command {elapsed:.2f} s after start-up")
    return title, caption


def print_search(rep: SearchReport, title: str, caption: str, price: Any, kind: str) -> None:
    """The ranked plans and the Pareto front of the priced ones, on the terminal."""
    console.print(report_table(rep, title, price, caption, kind))
    console.print(report_table(SearchReport(ranked=rep.pareto, candidates=0, valid=0, fitting=0, analytic_seconds=0.0,
                                            objective=rep.objective),
                               "Pareto front of the priced plans: step time vs peak memory vs energy per token "
                               "(also the front with $/token: a price is a non-negative sum of time and energy)",
                               price, kind=kind))


def write_search(rep: SearchReport, header: dict[str, Any], price: Any, objective: str, kind: str,
                 json_out: Optional[Path], csv_out: Optional[Path], say: Any) -> None:
    """The ranked plans, the Pareto front and the scenario as JSON; the ranked plans as CSV."""
    if json_out:
        doc = {"scenario": header, "ranked": ranked_rows(rep.ranked, price, objective, kind),
               "pareto": ranked_rows(rep.pareto, price, objective, kind)}
        output.emit_json(output.stamped(doc), json_out, say)
    if csv_out:
        import pandas as pd  # heavy: imported when a table is written

        output.emit_csv(pd.DataFrame(ranked_rows(rep.ranked, price, objective, kind)), csv_out, say, output.stamped(header))
