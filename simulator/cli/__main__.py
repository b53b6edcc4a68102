"""``python -m clustersim.simulator.cli``: the clustersim command."""

from clustersim.simulator.cli.app import main

main()
