"""Cluster descriptions from files: YAML or mappings with unit-suffixed keys -> ``Cluster``.

Owns ``load_cluster`` and the one place where file units become SI units (``*_gbps`` are
gigabits/s, ``*_gb_s`` gigabytes/s, both per direction). Unknown keys are errors that name the key.
It does not know any preset's figures (``topologies.presets``).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from clustersim.topologies.cluster import Cluster
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.power import with_power_limit
from clustersim.topologies.presets import get_cluster, preset_name
from clustersim.units import GBIT

UNIT_KEYS: Mapping[str, tuple[str, float]] = MappingProxyType({
    "nic_bandwidth_gbps": ("nic_bandwidth", GBIT),
    "link_bandwidth_gbps": ("link_bandwidth", GBIT),
    "local_bandwidth_gbps": ("local_bandwidth", GBIT),
    "global_bandwidth_gbps": ("global_bandwidth", GBIT),
    "nvlink_bandwidth_gb_s": ("nvlink_bandwidth", 1e9),
    "loopback_bandwidth_gb_s": ("loopback_bandwidth", 1e9),
})
"""File key -> (SI keyword, factor to bytes/s)."""

PLAIN_KEYS: frozenset[str] = frozenset({
    "name", "fabric", "accelerator", "gpus_per_node", "nvlink_domain_size", "cost_per_gpu_hour",
    "oversubscription", "rail_optimized", "servers_per_leaf", "hosts_per_leaf", "num_spines", "tiers",
    "leaves_per_pod", "num_cores", "core_oversubscription", "planes", "dims", "servers_per_router", "groups",
    "routers_per_group", "hosts_per_router", "sharp",
})
"""Keys passed through unchanged (counts, ratios, names, flags)."""


MAX_GPUS = 1 << 17
"""Most devices a cluster may have (131,072; the largest published training runs use ~100k)."""

COUNT_KEYS: Mapping[str, int] = MappingProxyType({
    "gpus_per_node": 1024, "nvlink_domain_size": MAX_GPUS, "servers_per_leaf": 1 << 14, "hosts_per_leaf": 1 << 14,
    "num_spines": 1 << 14, "tiers": 3, "leaves_per_pod": 1 << 14, "num_cores": 1 << 14, "planes": 64,
    "servers_per_router": 1 << 14, "groups": 1 << 14, "routers_per_group": 1 << 14, "hosts_per_router": 1 << 14,
})
"""Integer keys (>= 1) and their upper bounds."""
RATIO_KEYS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "oversubscription": (1.0, 1024.0), "core_oversubscription": (1.0, 1024.0), "cost_per_gpu_hour": (0.0, 1e6),
})
"""Real-valued keys and their closed ranges (oversubscription 1 = non-blocking)."""
FLAG_KEYS: frozenset[str] = frozenset({"rail_optimized", "sharp"})
"""Boolean keys (true/false, never a string)."""
NAME_KEYS: frozenset[str] = frozenset({"name", "fabric", "accelerator"})
"""String keys."""
MAX_BANDWIDTH_GBPS = 1e6
"""Upper bound of every ``*_gbps`` / ``*_gb_s`` key (1 Pbit/s or 1 PB/s per direction)."""


CPU_KEYS: frozenset[str] = frozenset({"loopback_bandwidth", "name", "cost_per_gpu_hour"})
"""The overrides ``cpu_loopback`` understands."""


def _read(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(source, Mapping):
        return source, "<mapping>"
    path = Path(source)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise TopologyError(f"cluster file {path} does not exist; pass an existing YAML file") from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"cluster file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise TopologyError(f"cluster file {path} must hold a mapping of keys (preset, num_gpus, ...)")
    return data, str(path)


def to_overrides(data: Mapping[str, Any], where: str = "<mapping>") -> dict[str, Any]:
    """Keyword overrides in SI units from a file mapping (without ``preset`` and ``num_gpus``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("preset", "num_gpus", "power_limit_w"):
            continue
        if key in UNIT_KEYS:
            si, factor = UNIT_KEYS[key]
            out[si] = _number(key, value, 0.0, MAX_BANDWIDTH_GBPS, where, open_low=True) * factor
        elif key in PLAIN_KEYS:
            out[key] = _plain(key, value, where)
        else:
            valid = sorted({"preset", "num_gpus", "power_limit_w"} | PLAIN_KEYS | set(UNIT_KEYS))
            raise TopologyError(f"{where}: unknown cluster key {key!r}; use one of {valid}")
    return out


def _number(key: str, value: object, low: float, high: float, where: str, open_low: bool = False) -> float:
    """A finite real number (never a bool or string) in [low, high], or (low, high] when open_low."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not (value > low if open_low else value >= low) or value > high):
        bracket = "(" if open_low else "["
        raise TopologyError(f"{where}: {key} = {value!r}: must be a finite number in {bracket}{low:g}, {high:g}]")
    return float(value)


def _count(key: str, value: object, high: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise TopologyError(f"{where}: {key} = {value!r}: must be an integer in 1..{high:,}")
    return value


def _plain(key: str, value: object, where: str) -> object:
    """A plain key's value, type- and range-checked."""
    if key in COUNT_KEYS:
        return _count(key, value, COUNT_KEYS[key], where)
    if key in RATIO_KEYS:
        return _number(key, value, *RATIO_KEYS[key], where)
    if key in FLAG_KEYS and not isinstance(value, bool):
        raise TopologyError(f"{where}: {key} = {value!r}: must be true or false")
    if key in NAME_KEYS and not isinstance(value, str):
        raise TopologyError(f"{where}: {key} = {value!r}: must be a name (a string)")
    if key == "dims":
        if not isinstance(value, (list, tuple)) or not value:
            raise TopologyError(f"{where}: dims = {value!r}: must be a list of integers >= 1, e.g. [4, 4, 4]")
        return tuple(_count("dims", d, MAX_GPUS, where) for d in value)
    return value


def load_cluster(source: str | os.PathLike[str] | Mapping[str, Any], num_gpus: int | None = None) -> Cluster:
    """Build the cluster a YAML file or mapping describes, e.g.
    ``{preset: dgx-h100, num_gpus: 64, nic_bandwidth_gbps: 400, oversubscription: 2}``;
    ``num_gpus`` given here overrides the file's."""
    data, where = _read(source)
    if "preset" not in data:
        raise TopologyError(f"{where}: missing key 'preset'; set it to a preset name such as dgx-h100")
    count = num_gpus if num_gpus is not None else data.get("num_gpus")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_GPUS:
        raise TopologyError(f"{where}: num_gpus = {count!r}: must be an integer number of devices in 1..{MAX_GPUS:,}")
    if not isinstance(data["preset"], str):
        raise TopologyError(f"{where}: preset = {data['preset']!r}: must be a preset name such as dgx-h100")
    preset = preset_name(data["preset"])
    overrides = to_overrides(data, where)
    extra = sorted(set(overrides) - CPU_KEYS) if preset == "cpu-loopback" else []
    if extra:
        raise TopologyError(f"{where}: cpu-loopback does not take {extra}; use only {sorted(CPU_KEYS)}")
    cluster = get_cluster(preset, count, **overrides)
    if data.get("power_limit_w") is not None:  # a board power cap per accelerator (topologies.power)
        cluster = replace(cluster, accelerator=with_power_limit(cluster.accelerator, float(data["power_limit_w"])))
    return cluster
