"""Suite-wide settings: property tests draw the same examples on every run (a flaky test is a defect)."""

from hypothesis import settings

settings.register_profile("clustersim", derandomize=True, database=None, deadline=None)
settings.load_profile("clustersim")
