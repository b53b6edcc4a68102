"""clustersim reports: result rows (DataFrames, dicts, files) to tables, plots and HTML.

Imports nothing from ``simulator/``, ``workloads/`` or ``topologies/``. Entry points:
``write_scaling_report`` (the `clustersim report` command), ``plot_waterfall`` /
``write_waterfall`` (the `clustersim simulate --plot` figure), ``report_command`` (what `clustersim report` does).
"""

from clustersim.reports.errors import ReportError
from clustersim.reports.plots import (
    plot_hardware, plot_lost_time, plot_mfu, plot_scaling_efficiency, plot_throughput_per_gpu,
)
from clustersim.reports.report import report_command, report_data, write_scaling_report
from clustersim.reports.scaling import LOSS_CAUSES, lost_time_fractions, scaling_table
from clustersim.reports.summary import summary_sentences
from clustersim.reports.tables import REQUIRED_COLUMNS, load_results, plan_table, hardware_table
from clustersim.reports.waterfall import plot_waterfall, write_waterfall

__all__ = [
    "LOSS_CAUSES", "REQUIRED_COLUMNS", "ReportError", "hardware_table", "load_results",
    "lost_time_fractions", "plan_table", "plot_hardware", "plot_lost_time", "plot_mfu",
    "plot_scaling_efficiency", "plot_throughput_per_gpu", "plot_waterfall",
    "report_command", "report_data", "scaling_table", "summary_sentences",
    "write_scaling_report", "write_waterfall",
]
