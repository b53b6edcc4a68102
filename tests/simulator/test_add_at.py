"""``routing.add_at``: the sparse scatter-add every load sum goes through equals the dense
``np.bincount`` form bit for bit, on short and long index lists (the static pricing must not move)."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.simulator.network.routing import SPARSE, add_at


@pytest.mark.parametrize("count", [1, 7, 100, 5000])
def test_add_at_is_the_dense_bincount_bit_for_bit(count: int) -> None:
    rng = np.random.default_rng(count)
    base = rng.uniform(0, 1e9, 4000)
    index = rng.integers(0, 4000, count)
    weights = rng.uniform(0, 1e6, count) * rng.choice([1e-9, 1.0, 1e9], count)  # sums that round
    want = base + np.bincount(index, weights=weights, minlength=len(base))
    got = base.copy()
    add_at(got, index, weights)
    assert (count * SPARSE >= len(base)) == (count == 5000)  # both paths are exercised
    assert np.array_equal(got, want)
