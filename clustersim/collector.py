"""The cyclic garbage collector paused while a builder makes many objects that are never garbage.

Owns ``paused``. CPython's cyclic collector runs a young-generation pass every 700 net allocations
and a full pass when the long-lived objects grow by a quarter: building a 16,384-GPU cluster
(35,000 node dicts, 106,000 edge ends) makes about 290 young and 2 full passes that find nothing,
a quarter of the build's CPU time (0.17-0.20 s -> 0.12-0.15 s, ``benchmarks/bench_cli_startup.py``),
and importing a command's modules is the same kind of work. Reference counting frees everything
such builders drop (they make no reference cycles), so pausing the collector for their duration
loses no memory; it runs again on exit (exceptions included) if it ran before. It imports nothing
of clustersim's packages, so every package may use it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state before it is restored after."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()
