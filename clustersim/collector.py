"""The cyclic garbage collector paused while a builder makes many objects that are never garbage,
and run in larger batches while a command runs.

Owns ``paused`` and ``batched``. CPython's cyclic collector runs a young-generation pass every 700 net allocations
and a full pass when the long-lived objects grow by a quarter: building a 16,384-GPU cluster
(35,000 node dicts, 106,000 edge ends) makes about 290 young and 2 full passes that find nothing,
a quarter of the build's CPU time (0.17-0.20 s -> 0.12-0.15 s, ``benchmarks/bench_cli_startup.py``),
and importing a command's modules is the same kind of work. Reference counting frees everything
such builders drop (they make no reference cycles), so pausing the collector for their duration
loses no memory; it runs again on exit (exceptions included) if it ran before, and what the block made
joins the oldest generation (``gc.freeze`` then ``gc.unfreeze``), so the next young pass does not scan the
35,000 node dicts once more (7-22 ms at load 5 for a 16,384-GPU ``simulate``); full passes still see them. A command's work
after its build allocates many short-lived containers (routing tables, priced patterns, engine
events): a young pass every 700 of them made 84 passes in a 16,384-GPU ``simulate`` (0.10-0.15 s
inside the collector at load 8); every ``YOUNG_BATCH`` makes 7 (0.05-0.09 s). Cyclic garbage (SimPy
processes and events) is still collected, in batches of at most ``YOUNG_BATCH`` objects. It
imports nothing of clustersim's packages, so every package may use it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

YOUNG_BATCH: int = 10_000
"""Net container allocations between young collections inside ``batched`` (CPython's default: 700)."""


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state before it is restored after."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # what the block made joins the oldest generation unscanned (see module docstring)
        gc.unfreeze()
        if running:
            gc.enable()


@contextmanager
def batched() -> Iterator[None]:
    """Young collections every ``YOUNG_BATCH`` net allocations inside the block (the older
    generations' thresholds kept); the thresholds before it are restored after (errors included)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], YOUNG_BATCH), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
