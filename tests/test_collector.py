"""``clustersim.collector.paused``: the cyclic collector off inside, as it was after (errors
included), and the builders run under it make no reference cycles (so pausing it loses no memory)."""

from __future__ import annotations

import gc

import pytest

from clustersim.collector import YOUNG_BATCH, batched, paused
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


def test_batched_raises_the_young_threshold_and_restores_it() -> None:
    before = gc.get_threshold()
    with batched():
        assert gc.get_threshold() == (max(before[0], YOUNG_BATCH), *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError):
        with batched():
            raise RuntimeError("inside")
    assert gc.get_threshold() == before


def test_batched_still_collects_cyclic_garbage() -> None:
    """Reference cycles made inside are freed by the batched young passes (no growth without bound)."""
    class Node:
        def __init__(self) -> None:
            self.me = self

    gc.collect()
    with batched():
        for _ in range(5 * YOUNG_BATCH):
            Node()
        alive = sum(isinstance(o, Node) for o in gc.get_objects())
    assert alive < 2 * YOUNG_BATCH  # 50,000 made; the passes freed all but the last batch or two


def test_the_cli_runs_its_command_batched(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from clustersim.simulator.cli import app as cli

    seen: list[tuple[int, int, int]] = []
    monkeypatch.setattr(cli, "app", lambda standalone_mode: seen.append(gc.get_threshold()) or 0)
    monkeypatch.setattr(sys, "argv", ["clustersim", "--help"])
    before = gc.get_threshold()
    with pytest.raises(SystemExit):
        cli.main()
    assert seen == [(max(before[0], YOUNG_BATCH), *before[1:])] and gc.get_threshold() == before


def test_what_a_paused_block_made_is_not_rescanned_by_the_next_young_pass() -> None:
    """On exit the block's objects join the oldest generation (freeze then unfreeze): the young
    generation is empty, nothing stays frozen, and cyclic garbage made inside is still collected."""
    class Node:
        def __init__(self) -> None:
            self.me = self

    gc.collect()
    with paused():
        kept = [[i] for i in range(50_000)]
        Node()  # a cycle, garbage as soon as it is made
    assert gc.get_count()[0] < 100  # old code: about 50,000 objects waiting for the next young pass
    assert gc.get_freeze_count() == 0
    assert gc.collect() >= 1  # the full pass still finds the cycle
    assert len(kept) == 50_000
