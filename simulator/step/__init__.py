"""One training step, phases 1-4: partition (stages, layers, memory) -> lower (per-stage costs) -> SimPy engine -> Result; roofline compute; the Chrome trace.
"""
