"""The audit trail: one structured event per security decision, kept in the store and as JSON lines.

Every allow and every deny of the auth gate and of the Tasks handlers is recorded as an
`AuditEvent` through the one `AuditLog` the composition root builds.
"""

from aml_mcp.audit.events import AuditEvent, AuditRecorder, Decision, task_reference
from aml_mcp.audit.log import AuditLog, AuditSink, AuditStats, AuditUnavailable, SinkHealth

__all__ = [
    "AuditEvent",
    "AuditLog",
    "AuditRecorder",
    "AuditSink",
    "AuditStats",
    "AuditUnavailable",
    "Decision",
    "SinkHealth",
    "task_reference",
]
