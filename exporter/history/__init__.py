"""Transaction history: what each cycle saw, kept as Parquet on Spark, and the postmortem
``report`` over it (see docs/history.md).

Seams for the daemon: :class:`exporter.config.history.HistoryConfig` and
:func:`exporter.config.history.parse_history_section` (the ``history:`` YAML section), and
:class:`exporter.history.writer.HistoryWriter` (a cycle listener). The audit log of the
operator's actions is :func:`exporter.history.audit.record_action`.
"""
