"""DualPipe's own pass order (deepseek-ai/DualPipe ``dualpipe/dualpipe.py``, ``DualPipe.step``), as
the engine runs it (issue 13): the program's structure against the reference's step counts, the
DeepSeek-V3 report's Table 2 (bubble (PP/2 - 1)(F&B + B - 3W), PP + 1 micro-batches of activations),
and a steady state whose all-to-alls are hidden whatever the number of micro-batches."""

from __future__ import annotations

import pytest

from clustersim.simulator.plan.schedules import dualpipe_program, in_flight_peak, stage_program
from tests.simulator.test_moe_overlap import _run


def _pairs_expected(stage: int, pp: int, m: int) -> int:
    """Overlapped F&B steps of the reference: step 4 runs two per iteration (the middle ranks' first
    F0 and B1 apart), step 5 one per iteration."""
    half_rank = min(stage, pp - 1 - stage)
    middle = half_rank == pp // 2 - 1
    return 2 * (m // 2 - pp + half_rank + 1) - (1 if middle else 0) + (pp // 2 - half_rank - 1)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 32), (8, 16), (8, 40), (16, 64)])
def test_every_pass_once_in_causal_order_with_the_reference_pairs(pp: int, m: int) -> None:
    for s in range(pp):
        program = dualpipe_program(s, pp, m)
        flat = [a for step in program for a in step]
        half = m // 2
        expected = {(k, mb, 0) for k in "FBW" for mb in range(half)} | {(k, mb, 1) for k in "FBW" for mb in range(half, m)}
        assert len(flat) == len(set(flat)) == 3 * m and set(flat) == expected
        pos = {a: i for i, a in enumerate(flat)}
        assert all(pos[("F", mb, v)] < pos[("B", mb, v)] < pos[("W", mb, v)] for _, mb, v in expected)
        pairs = [step for step in program if len(step) == 2]
        assert all(f[0] == "F" and b[0] == "B" and f[2] != b[2] for f, b in pairs)
        assert len(pairs) == _pairs_expected(s, pp, m)


def test_the_first_steps_follow_the_reference() -> None:
    # pp 4, m 16 (8 per direction): stage 0 runs step 1 (two F0), step 2 (F0 F1), step 3 (B1 W1 F1)
    text = [" & ".join(f"{k}{mb}.{v}" for k, mb, v in step) for step in dualpipe_program(0, 4, 16)]
    assert text[:8] == ["F0.0", "F1.0", "F2.0", "F8.1", "B8.1", "W8.1", "F9.1", "F3.0 & B9.1"]
    # the last stage mirrors it: its phase 0 is the upward chunk
    last = [" & ".join(f"{k}{mb}.{v}" for k, mb, v in step) for step in dualpipe_program(3, 4, 16)]
    assert last[:8] == ["F8.1", "F9.1", "F10.1", "F0.0", "B0.0", "W0.0", "F1.0", "F11.1 & B1.0"]


@pytest.mark.parametrize("pp", [4, 8, 16])
def test_activations_peak_at_pp_plus_one_chunks(pp: int) -> None:
    # DeepSeek-V3 report Table 2: DualPipe keeps PP + 1 micro-batches' activations
    m = 4 * pp
    assert [in_flight_peak(stage_program("dualpipe", s, pp, m)) for s in range(pp)] == [pp + 1.0] * pp


@pytest.mark.parametrize(("pp", "m"), [(4, 16), (4, 32), (8, 32), (8, 64)])
def test_bubble_matches_the_report_formula_without_all_to_all(pp: int, m: int) -> None:
    # F = B = W = 1 s: m (F + B + W) + (pp/2 - 1)(F&B + B - 3W), F&B = 3, B = 1 (as test_moe_overlap)
    t, ep, pairs = _run(0.0, pp, m)
    assert pairs == 0 and ep == 0.0
    assert t == pytest.approx(3.0 * m + (pp / 2 - 1) * (3 + 1 - 3))


@pytest.mark.parametrize("pp", [4, 8])
def test_the_steady_state_hides_every_all_to_all(pp: int) -> None:
    # all-to-alls shorter than a pair's compute: only the unpaired warm-up and cool-down passes expose
    # theirs, so the cost over the step without EP does not grow with the micro-batches
    a2a = 0.4
    extra = [_run(a2a, pp, m)[0] - _run(0.0, pp, m)[0] for m in (4 * pp, 8 * pp)]
    assert extra[0] == pytest.approx(extra[1])
    _, ep, pairs = _run(a2a, pp, 8 * pp)
    assert pairs == _pairs_expected(1, pp, 8 * pp)
    assert ep == pytest.approx((2 * 8 * pp - 2 * pairs) * a2a)  # stage 1: exposed exactly where alone
