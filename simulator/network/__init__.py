"""Communication: pricing of every collective of a plan on the fabric, the collective algorithms, routing over the NetworkX graph, max-min flows over time, closed forms.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.
"""

from clustersim.simulator.network.algorithms import CollectiveKind
from clustersim.simulator.network.analytic import GroupShape, collective_time
from clustersim.simulator.network.collectives import (
    CollectiveCost,
    CollectiveError,
    collective_kind,
    price_collective,
)
from clustersim.simulator.network.pricing import CollectiveRow, CommPricer, Fidelity
from clustersim.simulator.network.routing import Fabric, fabric_of
from clustersim.simulator.network.sharing import FabricLoad, FluidShare, Phase, Transfer

__all__ = [
    "CollectiveCost",
    "CollectiveError",
    "CollectiveKind",
    "CollectiveRow",
    "CommPricer",
    "Fabric",
    "FabricLoad",
    "Fidelity",
    "FluidShare",
    "GroupShape",
    "Phase",
    "Transfer",
    "collective_kind",
    "collective_time",
    "fabric_of",
    "price_collective",
]
