"""Dispatch bytes per tier (``step.dispatch``): closed forms, node-limited routing checked against a
seeded sampling of the routing, and the limits (one NVLink domain, no limit)."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import numpy as np
import pytest

from clustersim.simulator.step.dispatch import EpShape, dispatch_bytes, expected_nodes, node_limit
from clustersim.workloads import get_model

DSV3 = get_model("deepseek-v3")  # 256 routed experts, top-8, n_group 8, topk_group 4 (config.json)
T, B = 4096, 7168 * 2  # tokens entering the MoE block on a GPU; bytes per token (hidden x bf16)


def test_flat_all_to_all_splits_every_pair_by_where_its_expert_lives() -> None:
    ep = EpShape(ranks=64, per_domain=8)  # DeepSeek-V3's EP64 over 8 nodes of 8 GPUs
    tiers = dispatch_bytes("alltoall", DSV3, T, B, ep)
    pairs = T * 8 * B
    assert tiers.nvlink == pytest.approx(pairs * 7 / 64)
    assert tiers.network == pytest.approx(pairs * 56 / 64)
    assert tiers.nvlink + tiers.network == pytest.approx(pairs * 63 / 64)  # all but the pairs kept local


def test_node_limited_routing_matches_a_seeded_sampling() -> None:
    # DeepSeek-V3 report sec. 2.1.2: a token picks 4 of the 8 nodes (groups), then its 8 experts
    # among their 4 x 32 experts. Sample that and count the distinct nodes reached.
    rng = np.random.default_rng(7)
    draws = []
    for _ in range(20000):
        chosen = rng.choice(8, size=4, replace=False)
        experts = rng.choice(np.concatenate([c * 32 + np.arange(32) for c in chosen]), size=8, replace=False)
        draws.append(len(set(experts // 32)))
    assert node_limit(DSV3, 8) == 4
    d = expected_nodes(8, 32, 4)
    assert d == pytest.approx(float(np.mean(draws)), rel=0.01)
    assert d == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)))
    tiers = dispatch_bytes("deepep", DSV3, T, B, EpShape(ranks=64, per_domain=8))
    assert tiers.network == pytest.approx(T * B * d * 7 / 8)  # once per remote node reached
    assert tiers.nvlink == pytest.approx(T * 8 * B * 7 / 8)  # forwarded to the experts' GPUs
    flat = dispatch_bytes("alltoall", DSV3, T, B, EpShape(ranks=64, per_domain=8))
    assert tiers.network < 0.5 * flat.network  # dedup per node + the 4-node limit: under half the IB bytes


def test_without_a_group_limit_a_token_may_reach_every_node() -> None:
    free = replace(DSV3, expert_groups=0, expert_groups_per_token=0)
    assert node_limit(free, 8) == 8
    d_free, d_limited = expected_nodes(8, 32, 8), expected_nodes(8, 32, 4)
    assert 4 < d_free < 8 and d_limited < 4
    more = dispatch_bytes("deepep", free, T, B, EpShape(ranks=64, per_domain=8)).network
    less = dispatch_bytes("deepep", DSV3, T, B, EpShape(ranks=64, per_domain=8)).network
    assert more == pytest.approx(less * d_free / d_limited)


@pytest.mark.parametrize("kind", ["alltoall", "allgather", "deepep"])
def test_inside_one_nvlink_domain_nothing_crosses_the_network(kind: str) -> None:
    # EP 64 inside one NVL72 domain: every byte on NVLink
    tiers = dispatch_bytes(kind, DSV3, T, B, EpShape(ranks=64, per_domain=64))
    assert tiers.network == 0.0 and tiers.nvlink > 0.0


def test_allgather_moves_every_token_to_every_rank() -> None:
    tiers = dispatch_bytes("allgather", DSV3, T, B, EpShape(ranks=16, per_domain=8))
    assert tiers.nvlink == pytest.approx(7 * T * B) and tiers.network == pytest.approx(8 * T * B)


def test_an_unknown_dispatcher_names_the_field() -> None:
    with pytest.raises(ValueError, match="plan.moe_dispatcher"):
        dispatch_bytes("ring", DSV3, T, B, EpShape(ranks=8, per_domain=8))
