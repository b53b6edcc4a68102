"""The real PyTorch validation backend: a small GPT trained with torch's own parallel APIs.

Owns running real distributed training steps and microbenchmarks on torch.distributed (gloo on
CPU, NCCL on CUDA) and writing what it measured as JSON. It does not fit profiles
(``clustersim.simulator.calibration.fit``) nor simulate anything (``clustersim.simulator.step.simulate``).

torch is an optional extra: importing this package does not import torch. Only the modules that
run inside a rank (``gpt``, ``runners``, ``microbench``) import it, and ``launch`` starts those in
fresh processes, so the simulator installs and runs without torch.
"""

from __future__ import annotations

import importlib.util


def torch_available() -> bool:
    """True when torch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None
