"""Bad inputs a new user types, run against a clustersim command, classified one by one.

Each case is a command line (and the small files it needs, written into a fresh folder that is
the working directory). The outcome of a case is one of:

- ``traceback``: a Python traceback on stderr;
- ``hang``: still running after the timeout (20 s);
- ``silent``: exit 0, the bad value was accepted;
- ``wrong message``: exit not 2, or the message does not name the field (the ``needle``);
- ``good``: exit 2, one error naming the field, no traceback.

Run the same cases against the code before and after a change::

    # before (the pre-move checkout)
    python benchmarks/bad_inputs.py --python /work/main/.venv/bin/python --module simulator.cli \
        --pythonpath /tmp/old
    # after
    python benchmarks/bad_inputs.py --python .venv/bin/python --module clustersim.simulator.cli

The same case list drives ``tests/test_bad_inputs.py``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

BASE = """\
model: llama3-8b
training: {seq_len: 2048, global_batch_size: 16, precision: bf16}
cluster: {preset: dgx-h100, num_gpus: 8}
plan: {tp: 2, pp: 2, dp: 2, micro_batch: 1}
"""
"""A small valid scenario every case starts from (s.yaml in the case folder)."""

SWEEP = """\
base: s.yaml
grid:
  plan.micro_batch: [1, 2]
"""

TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Case:
    """One bad input: a command line, the word its error must name, and extra files."""

    name: str
    argv: tuple[str, ...]
    needle: str
    """Regular expression the error line must contain (the field or option at fault)."""
    files: dict[str, str] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    """Folders to create in the case folder before running."""


def _sim(name: str, sets: list[str], needle: str) -> Case:
    argv = ("simulate", "s.yaml", *[x for s in sets for x in ("--set", s)])
    return Case(name, argv, needle)


def _scenario(name: str, text: str, needle: str, command: str = "simulate") -> Case:
    return Case(name, (command, "bad.yaml"), needle, files={"bad.yaml": text})


PLAN = [
    _sim("plan.tp word", ["plan.tp=four"], r"plan\.tp"),
    _sim("plan.tp quoted number", ['plan.tp="8"'], r"\btp\b"),
    _sim("plan.tp float", ["plan.tp=8.0"], r"\btp\b"),
    _sim("plan.tp bool", ["plan.tp=true"], r"\btp\b"),
    _sim("plan.tp null", ["plan.tp=null"], r"\btp\b"),
    _sim("plan.tp empty", ["plan.tp="], r"\btp\b"),
    _sim("plan.tp negative", ["plan.tp=-2"], r"\btp\b"),
    _sim("plan.pp zero", ["plan.pp=0"], r"\bpp\b"),
    _sim("plan.dp zero", ["plan.dp=0"], r"\bdp\b"),
    _sim("plan.micro_batch zero", ["plan.micro_batch=0"], r"micro_batch"),
    _sim("plan.micro_batch float", ["plan.micro_batch=1.5"], r"micro_batch"),
    _sim("plan.vpp zero", ["plan.vpp=0"], r"\bvpp\b"),
    _sim("plan.dp_shard negative", ["plan.fsdp=hybrid", "plan.dp_shard=-2"], r"dp_shard"),
    _sim("plan.recompute_layers negative", ["plan.recompute=full", "plan.recompute_layers=-1"], r"recompute_layers"),
    _sim("plan.recompute_layers too many", ["plan.recompute=full", "plan.recompute_layers=1000"], r"recompute_layers"),
    _sim("plan.grad_dtype_bytes zero", ["plan.grad_dtype_bytes=0"], r"grad_dtype_bytes"),
    _sim("plan.grad_dtype_bytes three", ["plan.grad_dtype_bytes=3"], r"grad_dtype_bytes"),
    _sim("plan.recompute_saved without full", ["plan.recompute_saved=[qkv_proj]"], r"recompute_saved"),
    _sim("plan.recompute_saved unknown", ["plan.recompute=full", "plan.recompute_saved=[mlp]"], r"recompute_saved"),
    _sim("plan.zero_quantized_weights without zero 3", ["plan.zero_quantized_weights=true"], r"zero_quantized_weights"),
    _sim("plan.zero_hpz_partition_size not dividing", ["plan.zero=3", "plan.zero_hpz_partition_size=3"],
         r"zero_hpz_partition_size"),
    _sim("plan.zero_quantized_gradients string", ['plan.zero_quantized_gradients="on"'], r"zero_quantized_gradients"),
    _sim("plan.cuda_graph_scope unknown", ["plan.cuda_graph_scope=[router]"], r"cuda_graph_scope"),
    _sim("plan.cross_entropy_fusion_impl unknown", ["plan.cross_entropy_fusion_impl=triton"], r"cross_entropy_fusion_impl"),
    _sim("plan.cuda_graph_scope a string", ["plan.cuda_graph_scope=attn"], r"cuda_graph_scope"),
    _sim("plan.cuda_graph_scope full_iteration with attn", ["plan.cuda_graph_scope=[full_iteration, attn]"],
         r"cuda_graph_scope"),
    _sim("plan.sp string", ['plan.sp="yes"'], r"\bsp\b"),
    _sim("plan.overlap_grad_reduce string", ['plan.overlap_grad_reduce="no"'], r"overlap_grad_reduce"),
    _sim("plan.bucket_size one byte", ["plan.bucket_size=1"], r"bucket_size"),
    _sim("plan.bucket_size nan", ["plan.bucket_size=.nan"], r"bucket_size"),
    _sim("plan.bucket_size negative", ["plan.bucket_size=-1"], r"bucket_size"),
    _sim("plan.tp_comm_overlap above 1", ["plan.tp_comm_overlap=2"], r"tp_comm_overlap"),
    _sim("plan.tp_overlap without sp", ["plan.tp_overlap=true", "plan.sp=false"], r"tp_overlap.*sp"),
    _sim("plan.tp_overlap string", ['plan.tp_overlap="on"'], r"tp_overlap"),
    _sim("plan.expert_imbalance below 1", ["plan.expert_imbalance=0.5"], r"expert_imbalance"),
    _sim("plan.schedule unknown", ["plan.schedule=fast"], r"schedule"),
    _sim("plan.recompute unknown", ["plan.recompute=some"], r"recompute"),
    _sim("plan.zero five", ["plan.zero=5"], r"\bzero\b"),
    _sim("plan.fsdp unknown", ["plan.fsdp=half"], r"fsdp"),
    _sim("plan.order partial", ["plan.order=tp-dp"], r"order"),
    _sim("plan.layer_split wrong sum", ["plan.layer_split=[1,2]"], r"layer_split"),
    _sim("plan.layer_split strings", ["plan.layer_split=[a,b]"], r"layer_split"),
    _sim("plan.pipeline_layout bad letter", ["plan.pipeline_layout=Et*16|x*16L"], r"pipeline_layout"),
    _sim("plan.pipeline_layout chunks", ["plan.pipeline_layout=Et*32L"], r"pipeline_layout"),
    _sim("plan.pipeline_layout layers", ["plan.pipeline_layout=Et*8|t*8L"], r"layer_split|pipeline_layout"),
    _sim("plan.bogus key", ["plan.bogus=1"], r"bogus"),
    _sim("set without equals", ["plan.tp"], r"plan\.tp"),
    _sim("set bad yaml value", ["plan.tp=[1"], r"plan\.tp"),
    _sim("set under a number", ["plan.tp.x=1"], r"plan\.tp"),
]

TRAINING = [
    _sim("training.seq_len nan", ["training.seq_len=.nan"], r"seq_len"),
    _sim("training.seq_len zero", ["training.seq_len=0"], r"seq_len"),
    _sim("training.seq_len float", ["training.seq_len=2048.5"], r"seq_len"),
    _sim("training.seq_len huge", ["training.seq_len=1000000000000"], r"seq_len"),
    _sim("training.global_batch_size huge", ["training.global_batch_size=1000000000000000000000000000000"],
         r"global_batch_size"),
    _sim("training.global_batch_size 1e30", ["training.global_batch_size=1e30"], r"global_batch_size"),
    _sim("training.global_batch_size bool", ["training.global_batch_size=true"], r"global_batch_size"),
    _sim("training.precision unknown", ["training.precision=fp4"], r"precision"),
    _sim("training.optimizer_state_dtype_bytes three", ["training.optimizer_state_dtype_bytes=3"],
         r"optimizer_state_dtype_bytes"),
    _sim("training.master_param_dtype_bytes one", ["training.master_param_dtype_bytes=1"], r"master_param_dtype_bytes"),
    _sim("training.bogus key", ["training.bogus=1"], r"bogus"),
]

MODEL = [
    _sim("model.num_layers zero", ["model.num_layers=0"], r"num_layers"),
    _sim("model.num_layers bool", ["model.num_layers=true"], r"num_layers"),
    _sim("model.num_layers huge", ["model.num_layers=10000000"], r"num_layers"),
    _sim("model.hidden_size negative", ["model.hidden_size=-1"], r"hidden_size"),
    _sim("model.vocab_size nan", ["model.vocab_size=.nan"], r"vocab_size"),
    _sim("model.gated_mlp string", ['model.gated_mlp="no"'], r"gated_mlp"),
    _sim("model.num_experts negative", ["model.num_experts=-1"], r"num_experts"),
    _sim("model.moe_latent_size without experts", ["model.moe_latent_size=64"], r"moe_latent_size"),
    _sim("model.mtp_layer_pattern unknown", ['model.mtp_layers=1', 'model.mtp_layer_pattern="*X"'], r"mtp_layer_pattern"),
    _sim("model.bogus key", ["model.bogus=1"], r"bogus"),
]

CLUSTER = [
    _sim("cluster.num_gpus zero", ["cluster.num_gpus=0"], r"num_gpus"),
    _sim("cluster.num_gpus 1e30", ["cluster.num_gpus=1e30"], r"num_gpus"),
    _sim("cluster.num_gpus huge", ["cluster.num_gpus=1073741824"], r"num_gpus"),
    _sim("cluster.gpus_per_node zero", ["cluster.gpus_per_node=0"], r"gpus_per_node"),
    _sim("cluster.nvlink_domain_size zero", ["cluster.nvlink_domain_size=0"], r"nvlink_domain_size"),
    _sim("cluster.nvlink_bandwidth zero", ["cluster.nvlink_bandwidth_gb_s=0"], r"nvlink_bandwidth"),
    _sim("cluster.nvlink_bandwidth nan", ["cluster.nvlink_bandwidth_gb_s=.nan"], r"nvlink_bandwidth"),
    _sim("cluster.nic_bandwidth word", ["cluster.nic_bandwidth_gbps=fast"], r"nic_bandwidth"),
    _sim("cluster.nic_bandwidth negative", ["cluster.nic_bandwidth_gbps=-400"], r"nic_bandwidth"),
    _sim("cluster.oversubscription zero", ["cluster.oversubscription=0"], r"oversubscription"),
    _sim("cluster.cost negative", ["cluster.cost_per_gpu_hour=-1"], r"cost_per_gpu_hour"),
    _sim("cluster.rail_optimized string", ['cluster.rail_optimized="no"'], r"rail_optimized"),
    _sim("cluster.preset unknown", ["cluster.preset=nope"], r"preset"),
]

TOP = [
    _scenario("mode unknown in file", BASE + "mode: fast\n", r"mode"),
    _scenario("seed word", BASE + "seed: abc\n", r"seed"),
    _scenario("seed float", BASE + "seed: 1.5\n", r"seed"),
    _scenario("calibration missing", BASE + "calibration: missing.yaml\n", r"missing\.yaml"),
    _scenario("scenario is a list", "- 1\n- 2\n", r"mapping"),
    _scenario("plan is a number", BASE.replace("plan: {tp: 2, pp: 2, dp: 2, micro_batch: 1}", "plan: 4"), r"plan"),
]

OPTIONS = [
    Case("simulate --mode fast", ("simulate", "s.yaml", "--mode", "fast"), r"--mode"),
    Case("search --top 0", ("search", "s.yaml", "--top", "0"), r"--top"),
    Case("search --top -1", ("search", "s.yaml", "--top", "-1"), r"--top"),
    Case("search --objective speed", ("search", "s.yaml", "--objective", "speed"), r"--objective"),
    Case("search --gpus 0", ("search", "s.yaml", "--gpus", "0"), r"--gpus"),
    Case("search --gpus 12", ("search", "s.yaml", "--gpus", "12"), r"num_gpus"),
    Case("scale --gpus 0", ("scale", "s.yaml", "--gpus", "0", "--out", "rep"), r"--gpus"),
    Case("scale --gpus word", ("scale", "s.yaml", "--gpus", "8,x", "--out", "rep"), r"--gpus"),
    Case("collective --gpus 1048576", ("collective", "--gpus", "1048576"), r"--gpus"),
    Case("collective --gpus 0", ("collective", "--gpus", "0"), r"--gpus"),
    Case("collective --kind unknown", ("collective", "--kind", "broadcastish"), r"kind"),
    Case("goodput --mtbf-hours 1e-9", ("goodput", "s.yaml", "--mtbf-hours", "1e-9"), r"mtbf"),
    Case("goodput --mtbf-hours 0", ("goodput", "s.yaml", "--mtbf-hours", "0"), r"mtbf"),
    Case("goodput --days negative", ("goodput", "s.yaml", "--days", "-1"), r"days"),
    Case("goodput --days huge", ("goodput", "s.yaml", "--days", "1e9"), r"days"),
    Case("goodput --repetitions 0", ("goodput", "s.yaml", "--repetitions", "0"), r"repetitions"),
    Case("goodput --repetitions huge", ("goodput", "s.yaml", "--repetitions", "100000000"), r"repetitions"),
    Case("goodput --distribution unknown", ("goodput", "s.yaml", "--distribution", "normal"), r"distribution"),
    Case("stragglers --steps 0", ("stragglers", "s.yaml", "--steps", "0"), r"steps"),
    Case("stragglers --slow-fraction 2", ("stragglers", "s.yaml", "--slow-fraction", "2"), r"slow.fraction"),
    Case("stragglers --jitter-cv negative", ("stragglers", "s.yaml", "--jitter-cv", "-1"), r"jitter"),
    Case("simulate --co-tenant missing", ("simulate", "s.yaml", "--co-tenant", "missing.yaml"), r"missing\.yaml"),
    Case("simulate --job-placement unknown", ("simulate", "s.yaml", "--co-tenant", "s.yaml", "--job-placement", "spread"),
         r"--job-placement"),
    Case("validate --fit-only unknown stem", ("validate", "--fit-only", "b999", "--fit-profiles", "fo"), r"--fit-only 'b999'"),
    Case("validate --fit-only without --fit-profiles", ("validate", "--fit-only", "b300"), r"--fit-profiles"),
    Case("validate --fit-only a profile no row uses", ("validate", "--fit-only", "h200", "--fit-profiles", "fo"), r"h200"),
    Case("colocate one scenario", ("colocate", "s.yaml"), r"two or more"),
    Case("colocate --placement unknown", ("colocate", "s.yaml", "s.yaml", "--placement", "scattered"), r"--placement"),
    Case("colocate other cluster", ("colocate", "s.yaml", "t.yaml"), r"cluster\.preset",
         files={"t.yaml": BASE.replace("dgx-h100", "gb200-nvl72")}),
    Case("sweep --scheduler unreachable", ("sweep", "sw.yaml", "--out", "o", "--scheduler", "tcp://127.0.0.1:9"),
         r"--scheduler", files={"sw.yaml": SWEEP}),
    Case("sweep --workers negative", ("sweep", "sw.yaml", "--out", "o", "--workers", "-3"), r"--workers|workers",
         files={"sw.yaml": SWEEP}),
]

PATHS = [
    Case("simulate --json is a folder", ("simulate", "s.yaml", "--json", "d"), r"--json", dirs=("d",)),
    Case("simulate --json under a file", ("simulate", "s.yaml", "--json", "f/r.json"), r"--json",
         files={"f": "x"}),
    Case("simulate --json unwritable", ("simulate", "s.yaml", "--json", "/proc/clustersim/r.json"), r"--json"),
    Case("simulate --trace is a folder", ("simulate", "s.yaml", "--trace", "d"), r"--trace", dirs=("d",)),
    Case("simulate --plot under a file", ("simulate", "s.yaml", "--plot", "f/w.png"), r"--plot", files={"f": "x"}),
    Case("scale --out is a file", ("scale", "s.yaml", "--gpus", "8", "--out", "f"), r"--out", files={"f": "x"}),
    Case("goodput --json is a folder", ("goodput", "s.yaml", "--json", "d", "--repetitions", "2"), r"--json",
         dirs=("d",)),
    Case("sweep --out is a file", ("sweep", "sw.yaml", "--out", "f"), r"--out|f", files={"sw.yaml": SWEEP, "f": "x"}),
]

CASES: list[Case] = [*PLAN, *TRAINING, *MODEL, *CLUSTER, *TOP, *OPTIONS, *PATHS]
OUTCOMES = ("traceback", "hang", "silent", "wrong message", "good")


def prepare(case: Case, folder: Path) -> None:
    """Write the base scenario, the case's files and folders into ``folder``."""
    (folder / "s.yaml").write_text(BASE)
    for name, text in case.files.items():
        (folder / name).write_text(text)
    for name in case.dirs:
        (folder / name).mkdir()


def classify(returncode: int | None, stderr: str, needle: str) -> str:
    """The outcome of one run (``returncode`` None: it timed out)."""
    if returncode is None:
        return "hang"
    if "Traceback" in stderr:
        return "traceback"
    if returncode == 0:
        return "silent"
    if returncode != 2 or not re.search(needle, stderr):
        return "wrong message"
    return "good"


def run_case(case: Case, command: list[str], env: dict[str, str], timeout_s: float) -> tuple[str, str]:
    """Run ``case`` with ``command`` (the clustersim command) in a fresh folder."""
    with tempfile.TemporaryDirectory(prefix="bad-input-") as tmp:
        prepare(case, Path(tmp))
        try:
            proc = subprocess.run([*command, *case.argv], cwd=tmp, env=env, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "hang", ""
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return classify(proc.returncode, proc.stderr, case.needle), (lines[-1] if lines else "")[:150]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--module", default="clustersim.simulator.cli")
    parser.add_argument("--pythonpath", default=None, help="prepended to PYTHONPATH (e.g. /tmp/old)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default=None, help="regular expression on case names")
    parser.add_argument("--verbose", action="store_true", help="print every case and its last line")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    command = [os.path.abspath(args.python), "-m", args.module]
    cases = [c for c in CASES if not args.only or re.search(args.only, c.name)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, command, env, args.timeout), cases))
    counts = collections.Counter(outcome for outcome, _ in results)
    for case, (outcome, line) in zip(cases, results):
        if args.verbose or outcome != "good":
            print(f"{outcome:14s} {case.name:40s} {line}")
    print(f"\n{' '.join(command)}: {len(cases)} cases")
    print("| " + " | ".join(OUTCOMES) + " |")
    print("|" + "---|" * len(OUTCOMES))
    print("| " + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES) + " |")


if __name__ == "__main__":
    main()
