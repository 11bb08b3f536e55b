"""Reports over the tables the consumers build: advisories, delivery, episodes.

Each report is a query plus a `Report` value; `render` turns it into a
terminal table, Markdown, JSON or a standalone HTML page.
"""

from rlmesh_stream.consumers.analysis.reports.advisories import advisory_report, gate_failed
from rlmesh_stream.consumers.analysis.reports.delivery import delivery_report
from rlmesh_stream.consumers.analysis.reports.episodes import episode_report
from rlmesh_stream.consumers.analysis.reports.model import Column, Report
from rlmesh_stream.consumers.analysis.reports.render import FORMATS, render
from rlmesh_stream.consumers.analysis.reports.store import StoreError, open_store
from rlmesh_stream.consumers.analysis.reports.telemetry import telemetry_report

__all__ = [
    "FORMATS",
    "Column",
    "Report",
    "StoreError",
    "advisory_report",
    "delivery_report",
    "episode_report",
    "gate_failed",
    "open_store",
    "render",
    "telemetry_report",
]
