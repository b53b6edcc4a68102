"""The scaling rows carry the prediction interval the report draws as a band (issue 15 item 4)."""

from __future__ import annotations

from clustersim.simulator.cli.scale import with_interval


def test_interval_brackets_the_prediction_and_scales_with_throughput() -> None:
    row = {"step_time_s": 10.0, "tokens_per_s_per_gpu": 1000.0, "accelerator": "H100 SXM 80GB", "num_gpus": 64}
    out = with_interval(row, "dense")
    assert out["tokens_per_s_per_gpu_low"] <= 1000.0 <= out["tokens_per_s_per_gpu_high"]
    # throughput = tokens / step: halving the step doubles both bounds
    faster = with_interval({**row, "step_time_s": 5.0, "tokens_per_s_per_gpu": 2000.0}, "dense")
    assert faster["tokens_per_s_per_gpu_low"] == 2 * out["tokens_per_s_per_gpu_low"]
    assert faster["tokens_per_s_per_gpu_high"] == 2 * out["tokens_per_s_per_gpu_high"]


def test_a_failed_row_gets_no_interval() -> None:
    row = {"step_time_s": None, "tokens_per_s_per_gpu": None, "accelerator": "H100 SXM 80GB", "num_gpus": 64}
    assert "tokens_per_s_per_gpu_low" not in with_interval(row, "dense")


def test_a_fitted_profile_gives_the_band_its_own_held_out_interval() -> None:
    """With ``scale --calibration P.yaml`` beside ``P.fit.json`` (issue 17 item 2), the band is the
    fitted interval: measured = predicted x [0.9, 1.25] is throughput / 1.25 .. throughput / 0.9."""
    row = {"step_time_s": 10.0, "tokens_per_s_per_gpu": 1000.0, "accelerator": "H100 SXM 80GB", "num_gpus": 64}
    out = with_interval(row, "dense", (0.9, 1.25))
    assert (out["tokens_per_s_per_gpu_low"], out["tokens_per_s_per_gpu_high"]) == (1000.0 / 1.25, 1000.0 / 0.9)
    assert out != with_interval(row, "dense")  # not the published-runs band
