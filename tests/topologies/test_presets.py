"""Cluster presets, lookups, YAML loading and the CPU loopback cluster."""

from __future__ import annotations

import csv
from pathlib import Path

import networkx as nx
import pytest

from clustersim.topologies import (
    CLUSTER_PRESETS, A100_40GB, TopologyError, cpu_accelerator, cpu_loopback, dgx_a100_pod, dgx_h100_pod,
    gb200_nvl72, gb300_nvl72, get_accelerator, get_cluster, load_cluster, validate_cluster,
)
from clustersim.topologies.presets import aws_p4d, aws_p5, dgx_b300_pod

ROOT = Path(__file__).resolve().parents[2]
GBIT = 1e9 / 8


@pytest.mark.parametrize("name", sorted(CLUSTER_PRESETS))
@pytest.mark.parametrize("num_gpus", [8, 64])
def test_every_preset_builds_a_valid_cluster(name: str, num_gpus: int) -> None:
    c = get_cluster(name, num_gpus)
    validate_cluster(c)
    assert c.num_gpus == num_gpus and c.num_gpus % c.gpus_per_node == 0
    gpus = [n for n, k in c.graph.nodes(data="kind") if k == "gpu"]
    assert len(gpus) == num_gpus


@pytest.mark.parametrize(
    ("build", "nic_gbps"),
    # DGX A100: HDR 200 Gb/s; DGX H100: NDR 400; DGX B300: ConnectX-8 800; GB200 NVL72: 400 per GPU;
    # GB300 NVL72: ConnectX-8 800 per GPU; p5: 3,200 Gb/s EFA / 8 GPUs; p4d: 400 Gb/s / 8 GPUs.
    [(dgx_a100_pod, 200), (dgx_h100_pod, 400), (dgx_b300_pod, 800), (gb200_nvl72, 400), (gb300_nvl72, 800),
     (aws_p5, 400), (aws_p4d, 50)],
)
def test_nic_bandwidth_per_gpu(build, nic_gbps: float) -> None:  # type: ignore[no-untyped-def]
    c = build(16 if build not in (gb200_nvl72, gb300_nvl72) else 8)
    assert c.nic_bandwidth == pytest.approx(nic_gbps * GBIT)
    uplinks = [d["bandwidth"] for u, v, d in c.graph.edges(data=True) if u == "gpu0" and d["link_class"] == "nic"]
    assert uplinks == [pytest.approx(nic_gbps * GBIT)]


def test_aws_instance_network_totals() -> None:
    # AWS: p5.48xlarge 3,200 Gbps EFA per instance; p4d.24xlarge 400 Gbps.
    for build, total in ((aws_p5, 3200), (aws_p4d, 400)):
        c = build(16)
        assert c.nic_bandwidth * c.gpus_per_node == pytest.approx(total * GBIT)
    assert aws_p4d(16).accelerator is A100_40GB


def test_nvl72_domains() -> None:
    c = gb200_nvl72(144)
    g = c.graph
    assert c.nvlink_domain_size == 72 and c.gpus_per_node == 4
    assert nx.shortest_path_length(g, "gpu0", "gpu71") == 2  # one NVLink switch tier
    assert nx.shortest_path_length(g, "gpu0", "gpu72") > 2  # next rack: through the network
    assert g.nodes["nvsw0"]["in_network_reduction"] and g.nodes["nvsw1"]["domain"] == 1
    assert gb200_nvl72(64).nvlink_domain_size == 64  # a partial rack


def test_dgx_nvswitch_reduction_by_generation() -> None:
    assert not dgx_a100_pod(8).graph.nodes["nvsw0"]["in_network_reduction"]  # NVLS came with Hopper
    assert dgx_h100_pod(8).graph.nodes["nvsw0"]["in_network_reduction"]


def test_gpu_count_not_a_multiple_of_node_names_numbers() -> None:
    with pytest.raises(TopologyError, match=r"num_gpus = 12 is not a multiple of gpus_per_node = 8; use 8 or 16"):
        dgx_h100_pod(12)


def test_job_smaller_than_a_server_uses_part_of_it() -> None:
    c = dgx_h100_pod(4)  # published_runs.csv has 4-GPU H100 rows
    assert c.gpus_per_node == 4 and c.num_gpus == 4
    for build, n in ((dgx_h100_pod, 3), (gb200_nvl72, 2)):
        small = build(n)
        assert small.gpus_per_node == small.nvlink_domain_size == n


def test_unknown_preset_lists_names() -> None:
    with pytest.raises(TopologyError, match="dgx-h100"):
        get_cluster("dgx-h900", 8)


def test_published_gpu_types_resolve_to_presets_with_that_accelerator() -> None:
    with (ROOT / "workloads" / "data" / "published_runs.csv").open(newline="") as fh:
        types = {row["gpu_type"] for row in csv.DictReader(fh)}
    for t in types:
        assert get_cluster(t, 8).accelerator is get_accelerator(t)


def test_overrides_change_the_fabric_and_bisection() -> None:
    full = dgx_h100_pod(64, rail_optimized=False, hosts_per_leaf=16)
    half = dgx_h100_pod(64, rail_optimized=False, hosts_per_leaf=16, oversubscription=2.0)
    assert full.fabric == half.fabric == "fat_tree"
    flows = []
    for c in (full, half):
        h = nx.DiGraph(c.graph)
        for i in range(64):
            h.add_edge(*(("S", f"gpu{i}") if i < 32 else (f"gpu{i}", "T")))
        flows.append(nx.maximum_flow_value(h, "S", "T", capacity="bandwidth"))
    assert flows[0] == pytest.approx(2 * flows[1]) and flows[0] == pytest.approx(32 * 400 * GBIT)


def test_unknown_override_is_named() -> None:
    with pytest.raises(TopologyError, match="'oversubscripton'"):
        dgx_h100_pod(16, oversubscripton=2)


def test_load_cluster_converts_units_once() -> None:
    c = load_cluster({"preset": "dgx-h100", "num_gpus": 64, "nic_bandwidth_gbps": 200, "oversubscription": 2,
                      "rail_optimized": True, "nvlink_bandwidth_gb_s": 300, "cost_per_gpu_hour": 2.5})
    assert c.nic_bandwidth == 25e9 and c.fabric == "rail_optimized" and c.cost_per_gpu_hour == 2.5
    assert c.graph.edges["gpu0", "nvsw0"]["bandwidth"] == 300e9
    assert c.params["oversubscription"] == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"preset": "dgx-h100", "num_gpus": 64, "nic_bandwidth": 5e10}, "unknown cluster key 'nic_bandwidth'"),
        ({"num_gpus": 64}, "missing key 'preset'"),
        ({"preset": "dgx-h100"}, "num_gpus"),
        ({"preset": "dgx-h100", "num_gpus": 64, "fabric": "torus"}, "needs 'dims'"),
        ({"preset": "dgx-h100", "num_gpus": 64, "fabric": "torus", "dims": [4, 4]}, "16 servers x 8 GPUs = 128"),
        ({"preset": "dgx-h100", "num_gpus": 64, "fabric": "hypercube"}, "fabric 'hypercube' is unknown"),
        ({"preset": "cpu-loopback", "num_gpus": 4, "oversubscription": 2}, "cpu-loopback does not take"),
    ],
)
def test_load_cluster_errors(data: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        load_cluster(data)


def test_load_cluster_torus_and_dragonfly() -> None:
    t = load_cluster({"preset": "dgx-h100", "num_gpus": 128, "fabric": "torus", "dims": [4, 4],
                      "link_bandwidth_gbps": 3200})
    assert t.fabric == "torus" and t.graph.edges["router0", "router1"]["bandwidth"] == 400e9
    d = load_cluster({"preset": "dgx-h100", "num_gpus": 128, "fabric": "dragonfly", "groups": 4,
                      "routers_per_group": 2, "hosts_per_router": 2})
    assert d.fabric == "dragonfly"


@pytest.mark.parametrize("path", sorted((ROOT / "topologies" / "presets").glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_yaml_files_load(path: Path) -> None:
    validate_cluster(load_cluster(path))


def test_yaml_file_errors(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="does not exist"):
        load_cluster(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: [dgx-h100\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_cluster(bad)


def test_cpu_loopback_uses_measured_numbers() -> None:
    cpu = cpu_accelerator(peak_flops=1e11, memory_capacity=8e9, memory_bandwidth=2e10)
    c = cpu_loopback(4, accelerator=cpu, loopback_bandwidth=3e9)
    assert c.accelerator is cpu and c.gpus_per_node == 4 and c.nic_bandwidth == 0.0
    assert {d["link_class"] for *_, d in c.graph.edges(data=True)} == {"loopback"}
    assert c.graph.edges["gpu0", "host0"]["bandwidth"] == 3e9
