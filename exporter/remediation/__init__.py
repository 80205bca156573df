"""Guarded auto-remediation: the daemon aborts hanging transactions it is allowed to
(opt-in per cluster, ``remediation:``; docs/runbook.md)."""
