"""Routing tables from a preset's columns (no networkx graph) against those from its graph, and the
all-to-all priced from per-switch sums against the same all-to-all as explicit flows."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.profile import CalibrationProfile
from clustersim.simulator.network.algorithms import pairwise_flows
from clustersim.simulator.network.routing import Fabric, fabric_of
from clustersim.topologies.presets import get_cluster

PROFILE = CalibrationProfile()
CLUSTERS = [
    ("dgx-h100", 64, {}), ("dgx-h100", 512, {"fabric": "fat_tree", "oversubscription": 2.0}),
    ("dgx-h100", 256, {"fabric": "multi_plane"}), ("gb200-nvl72", 144, {}), ("dgx-h100", 8, {}),
    ("aws-p5", 32, {}), ("dgx-a100", 128, {"fabric": "fat_tree", "tiers": 3, "hosts_per_leaf": 4, "leaves_per_pod": 2}),
]


def _by_name(fab: Fabric, per_edge: np.ndarray) -> dict[tuple[str, str], float]:
    return {e: float(v) for e, v in zip(fab.edges, per_edge)}


def _table(fab: Fabric, tab: object) -> list[set[tuple[tuple[str, str], float]]]:
    edges, frac = tab.edges, tab.edge_frac  # type: ignore[attr-defined]
    return [{(fab.edges[e], round(float(f), 12)) for e, f in zip(row, frow) if e >= 0} for row, frow in zip(edges, frac)]


@pytest.mark.parametrize("preset,gpus,kw", CLUSTERS)
def test_tables_from_columns_equal_tables_from_the_graph(preset: str, gpus: int, kw: dict) -> None:
    cluster = get_cluster(preset, gpus, **kw)
    cols = fabric_of(cluster, PROFILE)
    assert "graph" not in vars(cluster)  # the columns sufficed
    graph = Fabric(cluster.graph, PROFILE)
    assert set(cols.nodes) == set(graph.nodes) and set(cols.edges) == set(graph.edges)
    for field in ("capacity", "latency", "bandwidth"):
        assert _by_name(cols, getattr(cols, field)) == _by_name(graph, getattr(graph, field))
    names = lambda fab, ids: [fab.nodes[i] if i >= 0 else None for i in ids]  # noqa: E731
    assert names(cols, cols.local_switch) == names(graph, graph.local_switch)
    assert [cols.edges[e] if e >= 0 else None for e in cols.local_down] == \
           [graph.edges[e] if e >= 0 else None for e in graph.local_down]
    assert _table(cols, cols.egress) == _table(graph, graph.egress)
    assert _table(cols, cols.ingress) == _table(graph, graph.ingress)
    fab_c = [cols.nodes[i] for i in np.flatnonzero(cols.fabric_index >= 0)]
    fab_g = [graph.nodes[i] for i in np.flatnonzero(graph.fabric_index >= 0)]
    order = [fab_g.index(n) for n in fab_c]
    assert np.array_equal(cols._fabric_dist(), graph._fabric_dist()[np.ix_(order, order)])
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, gpus, 200), rng.integers(0, gpus, 200)
    w = rng.uniform(1.0, 2.0, 200)
    (lc, tc), (lg, tg) = cols.loads(src, dst, w), graph.loads(src, dst, w)
    got, want = _by_name(cols, lc), _by_name(graph, lg)
    assert all(got[e] == pytest.approx(want[e], rel=1e-12, abs=1e-12) for e in want)
    assert tc == pytest.approx(tg, rel=1e-12)


@pytest.mark.parametrize("preset,gpus,kw", CLUSTERS)
@pytest.mark.parametrize("group", [8, 16, 64])
def test_dense_all_to_all_equals_explicit_flows(preset: str, gpus: int, kw: dict, group: int) -> None:
    if gpus % group or group > gpus:
        pytest.skip("group does not divide the cluster")
    cluster = get_cluster(preset, gpus, **kw)
    fab = fabric_of(cluster, PROFILE)
    rng = np.random.default_rng(group)
    groups = np.sort(rng.permutation(gpus).reshape(-1, group), axis=1)  # scattered, irregular groups
    dense = fab.all_to_all(groups, 1.0 / group)
    assert dense is not None
    step = pairwise_flows(groups)
    loads, lat = fab.loads(step.src, step.dst, step.weight)
    rep_loads, _ = fab.loads(step.src[step.rep], step.dst[step.rep], step.weight[step.rep])
    np.testing.assert_allclose(dense[0], loads, rtol=1e-9, atol=1e-12)
    assert np.array_equal(dense[1] > 1e-12, rep_loads > 1e-12)
    assert dense[2] == pytest.approx(float(lat[step.rep].max()), rel=1e-12)
