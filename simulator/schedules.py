"""Pipeline schedules: the ordered list of passes each stage runs in one step.

Owns the orders of GPipe, 1F1B, interleaved 1F1B (Megatron's virtual pipeline) and ZB-H1
(zero-bubble, backward split into input-gradient B and weight-gradient W, Qi et al. 2023), and
the dependency rule between passes. It knows nothing of durations: the engine times the passes.
An action is ``(kind, micro_batch, chunk)``; ``chunk`` is the virtual stage index on that device
(model chunk ``chunk * pp + stage``).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["F", "B", "W"]
Action = tuple[str, int, int]


def stage_program(schedule: str, stage: int, pp: int, m: int, vpp: int = 1) -> list[Action]:
    """The passes of ``stage`` in execution order for ``m`` micro-batches."""
    match schedule:
        case "gpipe":
            return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
        case "1f1b":
            return _one_f_one_b(stage, pp, m)
        case "interleaved":
            return _interleaved(stage, pp, m, vpp)
        case "zb-h1":
            return _zb_h1(stage, pp, m)
    raise ValueError(f"unknown schedule {schedule!r}")


def _one_f_one_b(stage: int, pp: int, m: int) -> list[Action]:
    warmup = min(pp - stage - 1, m)
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


def _interleaved(stage: int, pp: int, m: int, vpp: int) -> list[Action]:
    total = m * vpp
    warmup = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
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


def dependency(action: Action, stage: int, pp: int, vpp: int) -> tuple[Action, int] | None:
    """The (action, stage) whose output ``action`` on ``stage`` needs, or None.

    Forward of chunk v needs the previous stage's forward (stage 0 of chunk v needs the last
    stage of chunk v-1); backward runs the other way; the last chunk's backward starts from its own
    forward (the loss). W needs only its own B, which precedes it on the same stage.
    """
    kind, mb, v = action
    if kind == "F":
        if stage > 0:
            return ("F", mb, v), stage - 1
        return (("F", mb, v - 1), pp - 1) if v > 0 else None
    if kind == "B":
        if stage < pp - 1:
            return ("B", mb, v), stage + 1
        return (("B", mb, v + 1), 0) if v < vpp - 1 else None
    return None


def in_flight_peak(program: list[Action]) -> int:
    """Most forward passes whose activations are held at once (F adds one, B frees one)."""
    live = peak = 0
    for kind, _, _ in program:
        live += 1 if kind == "F" else -1 if kind == "B" else 0
        peak = max(peak, live)
    return peak
