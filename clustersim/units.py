"""Unit constants, in SI: clustersim computes in seconds, bytes, FLOP, bytes/s and FLOP/s.

Files and terminals use other units (GiB, Gb/s, microseconds); this module is the one place
that names the factors. It imports nothing of clustersim's packages, so every package may use it.
"""

GIB = float(2**30)
"""Bytes per GiB (memory sizes are printed in GiB)."""

GB = 1e9
"""Bytes per GB (decimal; datasheet HBM capacities, GB/s link rates)."""

GBIT = 1e9 / 8
"""Bytes/s per Gbit/s (NIC rates are quoted in Gb/s)."""

MIB = float(2**20)
"""Bytes per MiB."""

MICROSECOND = 1e-6
"""Seconds per microsecond."""

TERA = 1e12
"""FLOP/s per TFLOP/s."""
