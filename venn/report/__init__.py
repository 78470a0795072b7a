"""`venn report`: the audit database as a summary (Markdown, JSON) and PNG plots.

`figures` computes (pure), `load` reads the rows, `render` writes the files.
"""

from venn.report.figures import Report, build_report, reason_kind, tier_of
from venn.report.load import AuditRows, AuditUnavailable, load_audit
from venn.report.render import PLOTS, SUMMARY_JSON, SUMMARY_MD, write_report

__all__ = [
    "PLOTS",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "AuditRows",
    "AuditUnavailable",
    "Report",
    "build_report",
    "load_audit",
    "reason_kind",
    "tier_of",
    "write_report",
]
