"""Cluster descriptions from files: YAML or mappings with unit-suffixed keys -> ``Cluster``.

Owns ``load_cluster`` and the one place where file units become SI units (``*_gbps`` are
gigabits/s, ``*_gb_s`` gigabytes/s, both per direction). Unknown keys are errors that name the key.
It does not know any preset's figures (``topologies.presets``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from clustersim.topologies.cluster import Cluster
from clustersim.topologies.errors import TopologyError
from clustersim.topologies.power import with_power_limit
from clustersim.topologies.presets import GBIT, get_cluster, preset_name

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
            out[si] = float(value) * factor
        elif key in PLAIN_KEYS:
            out[key] = tuple(value) if key == "dims" else value
        else:
            valid = sorted({"preset", "num_gpus", "power_limit_w"} | PLAIN_KEYS | set(UNIT_KEYS))
            raise TopologyError(f"{where}: unknown cluster key {key!r}; use one of {valid}")
    return out


def load_cluster(source: str | os.PathLike[str] | Mapping[str, Any], num_gpus: int | None = None) -> Cluster:
    """Build the cluster a YAML file or mapping describes, e.g.
    ``{preset: dgx-h100, num_gpus: 64, nic_bandwidth_gbps: 400, oversubscription: 2}``;
    ``num_gpus`` given here overrides the file's."""
    data, where = _read(source)
    if "preset" not in data:
        raise TopologyError(f"{where}: missing key 'preset'; set it to a preset name such as dgx-h100")
    count = num_gpus if num_gpus is not None else data.get("num_gpus")
    if not isinstance(count, int) or isinstance(count, bool):
        raise TopologyError(f"{where}: num_gpus = {count!r} must be an integer number of devices")
    preset = preset_name(str(data["preset"]))
    overrides = to_overrides(data, where)
    extra = sorted(set(overrides) - CPU_KEYS) if preset == "cpu-loopback" else []
    if extra:
        raise TopologyError(f"{where}: cpu-loopback does not take {extra}; use only {sorted(CPU_KEYS)}")
    cluster = get_cluster(preset, count, **overrides)
    if data.get("power_limit_w") is not None:  # a board power cap per accelerator (topologies.power)
        cluster = replace(cluster, accelerator=with_power_limit(cluster.accelerator, float(data["power_limit_w"])))
    return cluster
