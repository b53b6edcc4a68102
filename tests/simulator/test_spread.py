"""``network.spread``: a propagation round done by (switch x destination) rows gives the edge loads
and path latencies of the state-by-state expansion bit for bit, in the counting (dense) and the
sorting merge of ``Fabric.propagate`` alike, and declines the rounds it cannot do."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from clustersim.simulator.network import routing, spread
from clustersim.simulator.network.routing import Fabric, fabric_of
from clustersim.simulator.profile import CalibrationProfile
from clustersim.topologies.presets import get_cluster

PROFILE = CalibrationProfile()
CLUSTERS = [
    ("dgx-h100", 1024, {}), ("dgx-h100", 512, {"fabric": "fat_tree", "oversubscription": 2.0}),
    ("gb200-nvl72", 144, {}), ("dgx-h100", 256, {"fabric": "multi_plane"}),
    ("dgx-a100", 128, {"fabric": "fat_tree", "tiers": 3, "hosts_per_leaf": 4, "leaves_per_pod": 2}),
    ("dgx-h100", 2048, {"fabric": "fat_tree", "tiers": 3}),
]
MODES = {  # (SPREAD_FILL, DENSE_STATES, DENSE_FILL): rows off / default / always, counting or sorting merge
    "state by state, counting": (0, routing.DENSE_STATES, routing.DENSE_FILL),
    "state by state, sorting": (0, routing.DENSE_STATES, 0),
    "rows, counting": (spread.SPREAD_FILL, routing.DENSE_STATES, routing.DENSE_FILL),
    "rows, sorting": (spread.SPREAD_FILL, routing.DENSE_STATES, 0),
    "rows always, sorting": (10**9, routing.DENSE_STATES, 0),
}


@pytest.fixture
def spreads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the rounds ``spread`` did (not declined)."""
    done = [0]
    real = spread.spread

    def counted(*args: object) -> spread.Spread | None:
        rnd = real(*args)  # type: ignore[arg-type]
        done[0] += rnd is not None
        return rnd

    monkeypatch.setattr(spread, "spread", counted)
    yield done


def _switch_pairs(fab: Fabric, rng: np.random.Generator, pairs: str, holes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of distinct fabric switches (``pairs``: leaf to leaf, leaf to any switch (one hop to a
    spine, two to a leaf), any to any) but a random share ``holes``, masses over 18 decades (sums
    that round), sorted by key."""
    f = len(fab.hops)
    leaf = np.array([fab.kind[int(np.flatnonzero(fab.fabric_index == i)[0])] == "leaf" for i in range(f)])
    a, b = np.repeat(np.arange(f), f), np.tile(np.arange(f), f)
    keep = (a != b) & (rng.uniform(size=len(a)) >= holes)
    keep &= {"leaf-leaf": leaf[a] & leaf[b], "leaf-any": leaf[a], "any-any": np.ones(len(a), dtype=bool)}[pairs]
    mass = rng.uniform(0.5, 1.0, int(keep.sum())) * rng.choice([1e-9, 1.0, 1e9], int(keep.sum()))
    return a[keep], b[keep], mass


def _run(monkeypatch: pytest.MonkeyPatch, mode: tuple[int, int, int], fab: Fabric,
         u: np.ndarray, b: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fill, states, dense_fill = mode
    monkeypatch.setattr(spread, "SPREAD_FILL", fill)
    monkeypatch.setattr(routing, "DENSE_STATES", states)
    monkeypatch.setattr(routing, "DENSE_FILL", dense_fill)
    loads = np.random.default_rng(0).uniform(0, 1e6, fab.num_edges)  # loads already there stay summed first
    lat = fab.propagate(u, b, mass, loads)
    return loads, lat


@pytest.mark.parametrize("preset,gpus,kw", CLUSTERS)
@pytest.mark.parametrize("pairs", ["leaf-leaf", "leaf-any", "any-any"])
@pytest.mark.parametrize("holes", [0.0, 0.3])
def test_rows_equal_the_state_by_state_rounds_bit_for_bit(monkeypatch: pytest.MonkeyPatch, spreads: list[int], preset: str,
                                                          gpus: int, kw: dict, pairs: str, holes: float) -> None:
    fab = Fabric(get_cluster(preset, gpus, **kw).wiring, PROFILE)  # its own: latencies are varied below
    rng = np.random.default_rng(gpus)
    fab.latency *= rng.uniform(0.5, 2.0, fab.num_edges) * rng.choice([1e-3, 1.0, 1e3], fab.num_edges)  # sums that round
    u, b, mass = _switch_pairs(fab, rng, pairs, holes)
    ref_loads, ref_lat = _run(monkeypatch, MODES["state by state, counting"], fab, u, b, mass)
    assert spreads[0] == 0
    for name, mode in MODES.items():
        loads, lat = _run(monkeypatch, mode, fab, u, b, mass)
        assert np.array_equal(loads, ref_loads), name
        assert np.array_equal(lat, ref_lat), name
    two_tier = kw.get("tiers", 2) == 2 and kw.get("fabric") != "multi_plane"  # multi-plane: a leaf's planes reach no leaf
    if pairs == "leaf-leaf" and kw.get("fabric") != "multi_plane" or pairs == "leaf-any" and two_tier:
        assert spreads[0] > 0  # the rows did run (leaf-any: direct-edge states first on a row's edge)


@pytest.mark.parametrize("preset,gpus,kw", CLUSTERS[:3])
def test_all_to_all_and_pair_loads_unchanged_by_the_rows(monkeypatch: pytest.MonkeyPatch, spreads: list[int],
                                                         preset: str, gpus: int, kw: dict) -> None:
    cluster = get_cluster(preset, gpus, **kw)
    rng = np.random.default_rng(1)
    src, dst, w = rng.integers(0, gpus, 2000), rng.integers(0, gpus, 2000), rng.uniform(1.0, 2.0, 2000)
    got = []
    for fill in (0, spread.SPREAD_FILL):
        monkeypatch.setattr(spread, "SPREAD_FILL", fill)
        fab = Fabric(cluster.wiring, PROFILE)
        every, first, lat = fab.all_to_all(np.arange(gpus).reshape(-1, gpus // 4), 1e6)  # type: ignore[misc]
        got.append((every, first, lat, *fab.loads(src, dst, w)))
    assert spreads[0] > 0
    for old, new in zip(*got):
        assert np.array_equal(old, new)


def test_rows_decline_a_switch_with_an_edge_off_the_shortest_paths() -> None:
    """Spines of a three-tier fat tree send down as well as up: their far states are not all-closer,
    so the round is left to the state-by-state expansion and no load is added."""
    fab = fabric_of(get_cluster("dgx-h100", 2048, fabric="fat_tree", tiers=3), PROFILE)
    f = len(fab.hops)
    kinds = [fab.kind[int(np.flatnonzero(fab.fabric_index == i)[0])] for i in range(f)]
    middle = [i for i, k in enumerate(kinds) if k == "spine"]
    leaves = [i for i, k in enumerate(kinds) if k == "leaf"]
    keys = np.array(sorted({s * f + t for s in middle for t in leaves if fab.hops[s, t] > 1}))
    assert len(keys)
    loads = np.zeros(fab.num_edges)
    assert spread.spread(fab._csr, keys, np.ones(len(keys)), loads) is None
    assert not loads.any()
    assert spread.spread(fab._csr, keys[::-1].copy(), np.ones(len(keys)), loads) is None  # keys not ascending
