"""Communication: pricing of every collective of a plan on the fabric, the collective algorithms, routing over the NetworkX graph, max-min flows over time, closed forms.

The room's face: other rooms, the CLI and the ``clustersim`` facade import from here, never from a
module of the room (an import-linter contract per room, in pyproject.toml); modules inside the
room import their siblings directly. ``__all__`` is what the other rooms use, sorted.
"""

from typing import TYPE_CHECKING

from clustersim.simulator.network.algorithms import CollectiveKind
from clustersim.simulator.network.analytic import GroupShape, collective_time
from clustersim.simulator.network.collectives import (
    CollectiveCost,
    CollectiveError,
    collective_kind,
    price_collective,
)
from clustersim.simulator.network.routing import Fabric, fabric_of
from clustersim.simulator.network.sharing import FabricLoad, FluidShare, Phase, Transfer

if TYPE_CHECKING:
    from clustersim.simulator.network.pricing import DEFAULT_FIDELITY, CollectiveRow, CommPricer, Fidelity

_PRICING = ("CollectiveRow", "CommPricer", "DEFAULT_FIDELITY", "Fidelity")
"""Names the face takes from ``pricing`` when first read (PEP 562): the step's pricer needs the plan
room, which ``clustersim collective`` (one collective on a preset) does not, ~0.1 s of its start."""


def __getattr__(name: str) -> object:
    if name in _PRICING:
        from clustersim.simulator.network import pricing

        return getattr(pricing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_FIDELITY",
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
