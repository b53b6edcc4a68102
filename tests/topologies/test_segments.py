"""Slurm segment placement on multi-node NVLink racks: Megatron-Bridge's rule, the cluster options
it gives, and what it changes for groups that would straddle two racks (issue 14, NVL72 finding)."""

from __future__ import annotations

import pytest

from clustersim.topologies import get_cluster, segment_overrides, slurm_segment
from clustersim.topologies.errors import TopologyError


@pytest.mark.parametrize("nodes,want", [(1, 1), (12, 12), (18, 18), (24, 12), (32, 16), (36, 18), (64, 16),
                                        (128, 16), (512, 16), (19, 1), (38, 2), (54, 18)])
def test_the_launcher_rule_on_known_node_counts(nodes: int, want: int) -> None:
    # Megatron-Bridge slurm_executor: nodes <= 18 -> nodes; else the largest of 18..1 dividing nodes
    assert slurm_segment(nodes, 18) == want


def test_the_segment_is_the_largest_divisor_that_fits_one_rack() -> None:
    for nodes in range(1, 400):
        s = slurm_segment(nodes, 18)
        assert nodes % s == 0 and 1 <= s <= 18
        assert s == nodes or not any(nodes % t == 0 for t in range(s + 1, 19))


def test_bad_counts_raise() -> None:
    with pytest.raises(TopologyError, match="nodes"):
        slurm_segment(0, 18)


def test_overrides_leave_the_spare_trays_of_each_rack_empty() -> None:
    assert segment_overrides("gb200-nvl72", 256) == {"nvlink_domain_size": 64, "servers_per_leaf": 16}
    assert segment_overrides("gb300_nvl72", 576) == {"nvlink_domain_size": 72, "servers_per_leaf": 18}
    assert segment_overrides("gb200", 96) == {"nvlink_domain_size": 48, "servers_per_leaf": 12}
    # within one rack, one-server domains, other presets: placed as before
    assert segment_overrides("gb200-nvl72", 72) == {}
    assert segment_overrides("dgx-h100", 1024) == {}
    assert segment_overrides("cpu-loopback", 8) == {}
    c = get_cluster("gb200-nvl72", 256, **segment_overrides("gb200-nvl72", 256))
    assert c.nvlink_domain_size == 64 and c.num_gpus == 256
    assert get_cluster("gb200-nvl72", 256).nvlink_domain_size == 72  # the preset itself is unchanged
