"""Pipeline schedules: the ordered list of passes each stage runs in one step.

Owns the orders of GPipe, 1F1B, interleaved 1F1B (Megatron's virtual pipeline), ZB-H1
(zero-bubble, backward split into input-gradient B and weight-gradient W, Qi et al. 2023) and
DualPipe (DeepSeek-V3 report sec. 3.2.1: two pipelines in opposite directions on the same devices,
each device holding stage s of one and stage pp-1-s of the other; its own pass order from the
reference implementation, ``dualpipe_program``), and the dependency and routing
rules between passes. It knows nothing of durations: the engine times the passes. An action is
``(kind, micro_batch, chunk)``; ``chunk`` is the virtual stage index on that device (model chunk
``chunk * pp + stage``; for DualPipe chunk 0 is the downward pipeline, chunk 1 the upward one).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Literal, Sequence

Kind = Literal["F", "B", "W"]
Action = tuple[str, int, int]


def stage_program(schedule: str, stage: int, pp: int, m: int, vpp: int = 1, paired: bool = False) -> list[Action]:
    """The passes of ``stage`` in execution order for ``m`` micro-batches. ``paired``: the schedule
    runs its steady forward and backward as overlapped pairs (``paired_program``), which takes one
    more warm-up forward on 1F1B and interleaved 1F1B (``extra_warmup``)."""
    extra = extra_warmup(schedule, paired)
    match schedule:
        case "gpipe":  # all forwards, then the backwards in the same order (torch.distributed.pipelining.ScheduleGPipe)
            return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
        case "1f1b":
            return _one_f_one_b(stage, pp, m, extra)
        case "interleaved":
            return _interleaved(stage, pp, m, vpp, extra)
        case "zb-h1":
            return _zb_h1(stage, pp, m)
        case "dualpipe":
            return [a for step in dualpipe_program(stage, pp, m) for a in step]
    raise ValueError(f"unknown schedule {schedule!r}")


Step = tuple[Action, ...]
"""One step of a program: a single pass, or a forward and a backward run as an overlapped pair."""


def extra_warmup(schedule: str, paired: bool) -> int:
    """Warm-up forwards a paired 1F1B or interleaved 1F1B adds: one, so that the forward and the
    backward of every steady step belong to different micro-batches and neither waits for the
    other (Megatron-Core with ``overlap_moe_expert_parallel_comm``: "we schedule one extra
    micro-batch forward step before the 1f1b stages. This is needed to ensure the forward and
    backward computations are independent in all 1f1b steps", NVIDIA/Megatron-LM
    ``megatron/core/pipeline_parallel/schedules.py`` @ 4dabc623, ``get_pp_rank_microbatches``;
    ``combined_1f1b_schedule_for_no_pipelining`` runs the same order at pp = 1: micro-batch 0's
    forward alone, then each backward with the next forward). 0 otherwise."""
    return 1 if paired and schedule in ("1f1b", "interleaved") else 0


def paired_program(schedule: str, stage: int, pp: int, m: int, vpp: int = 1) -> list[Step]:
    """A paired 1F1B or interleaved 1F1B as steps: the warm-up forwards alone, each steady forward
    with the backward that follows it in ``stage_program(..., paired=True)`` (run together, the
    one's EP all-to-alls beside the other's compute), the cool-down backwards alone."""
    if schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"paired_program: schedule {schedule!r} does not pair passes this way")
    program = stage_program(schedule, stage, pp, m, vpp, paired=True)
    total = m * (vpp if schedule == "interleaved" else 1)
    warmup = _warmup(schedule, stage, pp, m, vpp, 1)
    steps: list[Step] = [(a,) for a in program[:warmup]]
    steps += [(program[warmup + 2 * i], program[warmup + 2 * i + 1]) for i in range(total - warmup)]
    i = warmup + 2 * (total - warmup)
    return steps + [(a,) for a in program[i:]]


def dualpipe_program(stage: int, pp: int, m: int) -> list[Step]:
    """DualPipe's own pass order for ``stage`` (deepseek-ai/DualPipe ``dualpipe/dualpipe.py``,
    ``DualPipe.step``, steps 1-8): nF0; nF0F1; nB1W1F1 (zero bubble); the main step nF0B1F1B0
    with F0&B1 and F1&B0 overlapped (the middle ranks run their first F0 and B1 apart); nB1F1B0;
    nB1B0 (the second half with split backward); nWB0; nW.

    Phase 0 is the direction in which this device is near the start (the downward chunk 0 on
    the first half of the stages, the upward chunk 1 on the second half), phase 1 the other. A
    backward without zero bubble is its B followed at once by its W; with zero bubble its W waits
    in a FIFO until a ``weight`` step (DualPipe's ``WeightGradStore``)."""
    half, half_rank = m // 2, min(stage, pp - 1 - stage)
    half_ranks, middle = pp // 2, half_rank == pp // 2 - 1
    chunk_of = (lambda ph: ph ^ 1) if stage >= pp // 2 else (lambda ph: ph)
    b = _DualPipeBuilder(half, chunk_of)
    for _ in range((half_ranks - half_rank - 1) * 2):
        b.forward(0)
    for _ in range(half_rank + 1):
        b.forward(0)
        b.forward(1)
    for _ in range(half_ranks - half_rank - 1):
        b.backward(1, zero_bubble=True)
        b.weight()
        b.forward(1)
    for i in range(half - pp + half_rank + 1):
        if i == 0 and middle:
            b.forward(0)
            b.backward(1)
        else:
            b.pair(0, 1)
        b.pair(1, 0)
    for _ in range(half_ranks - half_rank - 1):
        b.backward(1)
        b.pair(1, 0)
    zero_bubble = False
    steps6 = half_rank + 1
    for i in range(steps6):
        zero_bubble = zero_bubble or (i == steps6 // 2 and half_rank % 2 == 1)
        b.backward(1, zero_bubble=zero_bubble)
        zero_bubble = zero_bubble or (i == steps6 // 2 and half_rank % 2 == 0)
        b.backward(0, zero_bubble=zero_bubble)
    for _ in range(half_ranks - half_rank - 1):
        b.weight()
        b.backward(0, zero_bubble=True)
    for _ in range(half_rank + 1):
        b.weight()
    return b.steps


class _DualPipeBuilder:
    """Appends DualPipe's steps, counting forwards and backwards per phase (module docstring)."""

    def __init__(self, half: int, chunk_of: Callable[[int], int]) -> None:
        self.half, self.chunk_of = half, chunk_of
        self.steps: list[Step] = []
        self.done = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0}
        self.weights: list[Action] = []

    def _next(self, kind: str, phase: int) -> Action:
        chunk = self.chunk_of(phase)
        k = self.done[(kind, phase)]
        self.done[(kind, phase)] = k + 1
        return (kind, k + (self.half if chunk == 1 else 0), chunk)

    def forward(self, phase: int) -> None:
        self.steps.append((self._next("F", phase),))

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        action = self._next("B", phase)
        self.steps.append((action,))
        self._weight_of(action, zero_bubble)

    def pair(self, forward_phase: int, backward_phase: int) -> None:
        f, bwd = self._next("F", forward_phase), self._next("B", backward_phase)
        self.steps.append((f, bwd))
        self._weight_of(bwd, False)

    def weight(self) -> None:
        self.steps.append((self.weights.pop(0),))

    def _weight_of(self, action: Action, zero_bubble: bool) -> None:
        w = ("W", action[1], action[2])
        if zero_bubble:
            self.weights.append(w)
        else:
            self.steps.append((w,))


def lanes(schedule: str, stage: int, pp: int, m: int, vpp: int = 1, paired: bool = False) -> list[list[Action]]:
    """The in-order F/B sequences a stage runs; the engine interleaves lanes as inputs arrive.

    One lane for every schedule but DualPipe, whose two directions each run 1F1B on half of the
    micro-batches (down: micro-batches 0..m/2-1 at position ``stage``; up: the rest at position
    ``pp-1-stage``): the set of passes and their per-direction order, for callers that need only
    those; the engine runs DualPipe's own order (``dualpipe_program``). W passes of split-backward
    schedules are placed by the engine.
    """
    if schedule == "dualpipe":
        half = m // 2
        down = [(k, mb, 0) for k, mb, _ in _one_f_one_b(stage, pp, half)]
        up = [(k, half + mb, 1) for k, mb, _ in _one_f_one_b(pp - 1 - stage, pp, m - half)]
        return [down, up]
    base = "1f1b" if schedule == "zb-h1" else schedule
    return [stage_program(base, stage, pp, m, vpp, paired)]


def program_ends(schedule: str, stage: int, pp: int, m: int, vpp: int = 1) -> tuple[Action, Action]:
    """The first and last pass of ``lanes(schedule, stage, pp, m, vpp)[0]`` without building it
    (single-lane schedules, ``m >= 1``): every one starts with the forward of the first virtual
    micro-batch; GPipe (backwards in forward order), 1F1B and ZB-H1 end with micro-batch m-1's
    backward, interleaved with the backward of the last virtual micro-batch."""
    match schedule:
        case "gpipe" | "1f1b" | "zb-h1":  # a ZB-H1 lane is 1F1B's; the engine places its W passes
            return ("F", 0, 0), ("B", m - 1, 0)
        case "interleaved":
            return ("F", *_virtual(0, pp, vpp, True)), ("B", *_virtual(m * vpp - 1, pp, vpp, False))
    program = lanes(schedule, stage, pp, m, vpp)[0]  # dualpipe's first lane
    return program[0], program[-1]


def pairs_forward_backward(schedule: str, ep_overlap: bool = False) -> bool:
    """Whether the schedule runs a forward and a backward chunk together, each one's EP all-to-all
    hidden behind the other's compute: DualPipe always (DeepSeek-V3 report sec. 3.2.1, Figure 4:
    "for a pair of forward and backward chunks, we rearrange these components ... both all-to-all
    and PP communication can be fully hidden during execution"); 1F1B and interleaved 1F1B with
    Megatron-Core's ``overlap_moe_expert_parallel_comm`` (``ep_overlap``), which merges the steady
    state's forward of one micro-batch with the backward of another the same way."""
    return schedule == "dualpipe" or (ep_overlap and schedule in ("1f1b", "interleaved"))


def chunks_per_stage(schedule: str, vpp: int) -> int:
    """Model chunks each device holds: 2 for DualPipe, vpp otherwise."""
    return 2 if schedule == "dualpipe" else vpp


def model_chunk(schedule: str, stage: int, chunk: int, pp: int) -> int:
    """Model chunk index (0 = embedding end) of virtual chunk ``chunk`` on ``stage``."""
    if schedule == "dualpipe":
        return stage if chunk == 0 else pp - 1 - stage
    return chunk * pp + stage


def num_model_chunks(schedule: str, pp: int, vpp: int) -> int:
    """Distinct model chunks: pp for DualPipe (each held twice), pp * vpp otherwise."""
    return pp if schedule == "dualpipe" else pp * vpp


def _warmup(schedule: str, stage: int, pp: int, m: int, vpp: int, extra: int) -> int:
    """Forwards ``stage`` runs before its first backward under 1F1B (pp - stage - 1) or interleaved
    1F1B ((pp - stage - 1) 2 + (vpp - 1) pp, Megatron-Core's with micro-batch groups of pp), plus
    ``extra``, at most every virtual micro-batch."""
    if schedule == "interleaved":
        return min((pp - stage - 1) * 2 + (vpp - 1) * pp + extra, m * vpp)
    return min(pp - stage - 1 + extra, m)


def _one_f_one_b(stage: int, pp: int, m: int, extra: int = 0) -> list[Action]:
    warmup = _warmup("1f1b", stage, pp, m, 1, extra)
    out: list[Action] = [("F", i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        out += [("F", warmup + i, 0), ("B", i, 0)]
    out += [("B", i, 0) for i in range(m - warmup, m)]
    return out


def _virtual(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """Megatron's mapping of the k-th virtual micro-batch to (micro_batch, chunk)."""
    group = k // pp
    chunk = group % vpp
    if not forward:
        chunk = vpp - 1 - chunk
    mb = (k // (pp * vpp)) * pp + k % pp
    return mb, chunk


def _interleaved(stage: int, pp: int, m: int, vpp: int, extra: int = 0) -> list[Action]:
    total = m * vpp
    warmup = _warmup("interleaved", stage, pp, m, vpp, extra)
    fwd = [("F", *_virtual(k, pp, vpp, True)) for k in range(total)]
    bwd = [("B", *_virtual(k, pp, vpp, False)) for k in range(total)]
    out: list[Action] = fwd[:warmup]
    for i in range(total - warmup):
        out += [fwd[warmup + i], bwd[i]]
    out += bwd[total - warmup:]
    return out


def _zb_h1(stage: int, pp: int, m: int) -> list[Action]:
    """1F1B with W split off: the first ``pp - stage - 1`` W passes wait to fill the cool-down."""
    deferred = min(pp - stage - 1, m)
    base = _one_f_one_b(stage, pp, m)
    last_f = max(i for i, a in enumerate(base) if a[0] == "F")
    out: list[Action] = []
    pending: list[Action] = []
    for i, (kind, mb, chunk) in enumerate(base):
        out.append((kind, mb, chunk))
        if kind != "B":
            continue
        pending.append(("W", mb, chunk))
        if len(pending) > deferred or i > last_f:
            out.append(pending.pop(0))
    return out + pending


def dependency(action: Action, stage: int, pp: int, vpp: int, schedule: str = "1f1b") -> tuple[Action, int] | None:
    """The (action, stage) whose output ``action`` on ``stage`` needs, or None.

    Forward of chunk v needs the previous stage's forward (stage 0 of chunk v needs the last
    stage of chunk v-1); backward runs the other way; the last chunk's backward starts from its own
    forward (the loss). DualPipe's upward chunk flows from stage pp-1 to 0. W needs only its own B.
    """
    kind, mb, v = action
    if schedule == "dualpipe":
        vpp = 1  # two separate pipelines, no wrap-around between chunks
    if schedule == "dualpipe" and v == 1:
        if kind == "F":
            return (action, stage + 1) if stage < pp - 1 else None
        return (action, stage - 1) if kind == "B" and stage > 0 else None
    if kind == "F":
        if stage > 0:
            return ("F", mb, v), stage - 1
        return (("F", mb, v - 1), pp - 1) if v > 0 else None
    if kind == "B":
        if stage < pp - 1:
            return ("B", mb, v), stage + 1
        return (("B", mb, v + 1), 0) if v < vpp - 1 else None
    return None


def destination(action: Action, stage: int, pp: int, vpp: int, schedule: str = "1f1b") -> tuple[int, str] | None:
    """Where the output of ``action`` goes: (link stage, direction) of the p2p link, or None.

    Link ``(s, "fwd")`` carries s -> s+1 and ``(s, "bwd")`` carries s+1 -> s (mod pp for the
    interleaved wrap-around).
    """
    kind, _, v = action
    if kind == "W":
        return None
    if schedule == "dualpipe":
        vpp = 1
    downward = kind == "F"
    if schedule == "dualpipe" and v == 1:
        downward = not downward
        if (stage == 0 and kind == "F") or (stage == pp - 1 and kind == "B"):
            return None
        return (stage, "fwd") if downward else (stage - 1, "bwd")
    if kind == "F" and stage == pp - 1 and v == vpp - 1:
        return None
    if kind == "B" and stage == 0 and v == 0:
        return None
    return (stage, "fwd") if downward else ((stage - 1) % pp, "bwd")


PERIODIC_PEAK: frozenset[str] = frozenset({"1f1b", "zb-h1", "interleaved"})
"""Schedules whose in-flight activations repeat after the warm-up: their F and B sequences do
not depend on m (only their length), and each (F, B) pair of the steady part moves the live set
by one virtual micro-batch, so it repeats every pp * vpp pairs (same chunks, micro-batches + pp)."""


def stage_in_flight_peak(schedule: str, stage: int, pp: int, m: int, vpp: int = 1,
                         chunk_weight: Sequence[float] | None = None, paired: bool = False) -> float:
    """``in_flight_peak(stage_program(schedule, stage, pp, m, vpp, paired), chunk_weight)``, at a cost
    independent of m: for ``PERIODIC_PEAK`` schedules the program of m' = m - k pp micro-batches
    (m' in 4 pp + 2 .. 5 pp + 1: the warm-up, at most (pp - 1) * 2 + (vpp - 1) pp virtual
    micro-batches, then at least two full periods) reaches the same peak, and is what is walked."""
    least = 4 * pp + 2
    if schedule in PERIODIC_PEAK and m > least:
        m -= (m - least) // pp * pp
    if extra_warmup(schedule, paired):
        return paired_in_flight_peak(paired_program(schedule, stage, pp, m, vpp), chunk_weight)
    return in_flight_peak(_stored_program(schedule, stage, pp, m, vpp, paired), chunk_weight)


def paired_in_flight_peak(steps: Sequence[Step], chunk_weight: Sequence[float] | None = None) -> float:
    """Most activations held at once by a program of steps: a single pass as in ``in_flight_peak``;
    a forward-backward pair runs layer by layer (Megatron-Core's combined 1F1B pairs forward layer i
    with backward layer L - 1 - i, ``TransformerLayerSchedulePlan.run``), so the backward frees as
    the forward holds and the pair's peak is the larger of the live set before and after it, which
    is ``in_flight_peak`` with each pair's backward walked first. The extra warm-up forward of a
    paired schedule thus takes the place of the unpaired steady state's forward-before-backward:
    the same peak."""
    return in_flight_peak([a for step in steps for a in sorted(step, key=lambda a: a[0] != "B")], chunk_weight)


@lru_cache(maxsize=128)
def _stored_program(schedule: str, stage: int, pp: int, m: int, vpp: int, paired: bool = False) -> tuple[Action, ...]:
    """``stage_program`` kept (a search asks for the same stage's program of many plans); 128
    programs at most (a GPipe or DualPipe program of m = 8,192 holds ~16k actions, ~1 MB)."""
    return tuple(stage_program(schedule, stage, pp, m, vpp, paired))


def in_flight_peak(program: Sequence[Action], chunk_weight: Sequence[float] | None = None) -> float:
    """Most activations held at once: F of chunk v adds ``chunk_weight[v]`` (1 by default), B frees it."""
    live = peak = 0.0
    for kind, _, v in program:
        w = 1.0 if chunk_weight is None else chunk_weight[v]
        live += w if kind == "F" else -w if kind == "B" else 0.0
        peak = max(peak, live)
    return peak
