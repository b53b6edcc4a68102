"""``clustersim.collector.paused``: the cyclic collector off inside, as it was after (errors
included), and the builders run under it make no reference cycles (so pausing it loses no memory)."""

from __future__ import annotations

import gc

import pytest

from clustersim.collector import paused
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.presets import get_cluster


@pytest.fixture(autouse=True)
def _collector_running() -> object:
    gc.enable()
    yield None
    gc.enable()


def test_paused_restores_the_collector_as_it_was() -> None:
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # it was off before: it stays off


def test_paused_restores_the_collector_after_an_error() -> None:
    with pytest.raises(KeyError):
        with paused():
            raise KeyError("x")
    assert gc.isenabled()


def test_a_cluster_build_leaves_the_collector_running_even_when_it_fails() -> None:
    get_cluster("dgx-h100", 16)
    assert gc.isenabled()
    with pytest.raises(TopologyError):
        get_cluster("dgx-h100", 12)  # not a multiple of 8 GPUs per node
    assert gc.isenabled()


@pytest.mark.parametrize(("preset", "gpus", "kw"), [("dgx-h100", 4096, {}), ("gb200-nvl72", 144, {}),
                                                     ("dgx-h100", 512, {"fabric": "fat_tree", "oversubscription": 2.0})])
def test_a_cluster_build_makes_no_reference_cycles(preset: str, gpus: int, kw: dict[str, object]) -> None:
    """Built with the collector paused, a cluster leaves nothing for it: refcounting frees all garbage."""
    get_cluster(preset, 8, **kw) if preset != "gb200-nvl72" else get_cluster(preset, 72)
    gc.collect()
    cluster = get_cluster(preset, gpus, **kw)
    assert cluster.num_gpus == gpus
    assert gc.collect() == 0  # unreachable objects found: cyclic garbage the pause would have kept
