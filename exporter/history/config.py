"""The ``history:`` section of the exporter's YAML configuration.

History is off unless the section is present. :func:`parse_history_section` is pure: it takes
the raw YAML value and returns the parsed section (or ``None``) with every problem found, as
``history.<key>: <what is wrong>`` strings that never echo a value (a path URL may carry
credentials).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from exporter.config import parse_duration_ms
from exporter.config.keys import text_problem

DAY_MS = 86_400_000
DEFAULT_RETENTION_MS = 30 * DAY_MS
#: A century: the retention cut-off is a date (year 1 at the earliest).
MAX_RETENTION_MS = 36_500 * DAY_MS
DEFAULT_COMPACT_EVERY_MS = 3_600_000
DEFAULT_BUFFER_CYCLES = 120
#: Cycles the writer gathers before one write (1: every cycle is written as it comes).
DEFAULT_BATCH_CYCLES = 1

KEYS = frozenset({"path", "retention", "compact_every", "buffer_cycles", "batch_cycles"})
#: A scheme Spark's Hadoop file systems understand: s3a://, hdfs://, abfss://, file:// ...
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class HistoryConfig:
    """Where the history lives and how it is kept."""

    #: A local directory, or any file system URL Spark supports (s3a://, hdfs://, abfss://).
    path: str
    #: Date partitions older than this are deleted (default 30 days).
    retention_ms: int = DEFAULT_RETENTION_MS
    #: How often small files are compacted into about one file per cluster and hour.
    compact_every_ms: int = DEFAULT_COMPACT_EVERY_MS
    #: At most this many cycles wait in memory for the writer; past it the oldest is dropped
    #: (counted and logged, never silently).
    buffer_cycles: int = DEFAULT_BUFFER_CYCLES
    #: Cycles gathered before one write.
    batch_cycles: int = DEFAULT_BATCH_CYCLES

    @property
    def is_local(self) -> bool:
        return not _URL.match(self.path) or self.path.startswith("file://")

    @property
    def local_path(self) -> str:
        """The directory of a local history (``file://`` stripped)."""
        return self.path[len("file://") :] if self.path.startswith("file://") else self.path

    @property
    def redacted_path(self) -> str:
        """The path without any user:password@ part, for logs."""
        return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", self.path)


def parse_history_section(raw: object) -> tuple[HistoryConfig | None, list[str]]:
    """The ``history:`` section: ``(None, [])`` when absent, else the config and problems.

    When any problem is found the config returned is ``None``.
    """
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return None, ["history: must be a mapping (path, retention, compact_every, ...)"]
    problems: list[str] = []
    for key in sorted(set(raw) - KEYS, key=str):
        problems.append(f"history.{key}: unknown key (allowed: {', '.join(sorted(KEYS))})")
    path = raw.get("path")
    if path is None:
        problems.append(
            "history.path: required (a directory or a file system URL such as s3a://bucket/prefix)"
        )
    elif not isinstance(path, str) or not path.strip():
        problems.append("history.path: must be a non-empty string")
    elif text_problem(path):
        problems.append(f"history.path: {text_problem(path)}")
    retention = _duration(
        raw, "retention", DEFAULT_RETENTION_MS, problems, minimum=DAY_MS, maximum=MAX_RETENTION_MS
    )
    compact = _duration(
        raw, "compact_every", DEFAULT_COMPACT_EVERY_MS, problems, minimum=60_000, maximum=30 * DAY_MS
    )
    buffer_cycles = _int(raw, "buffer_cycles", DEFAULT_BUFFER_CYCLES, 1, 100_000, problems)
    batch_cycles = _int(raw, "batch_cycles", DEFAULT_BATCH_CYCLES, 1, 1_000, problems)
    if not problems and batch_cycles > buffer_cycles:
        problems.append("history.batch_cycles: must not exceed history.buffer_cycles")
    if problems:
        return None, problems
    assert isinstance(path, str)
    return HistoryConfig(
        path=path.strip().rstrip("/") or "/",
        retention_ms=retention,
        compact_every_ms=compact,
        buffer_cycles=buffer_cycles,
        batch_cycles=batch_cycles,
    ), []


def _duration(
    raw: dict[Any, Any], key: str, default: int, problems: list[str], *, minimum: int, maximum: int
) -> int:
    if key not in raw:
        return default
    try:
        value = parse_duration_ms(raw[key])
    except ValueError:
        problems.append(f"history.{key}: not a duration (use e.g. 30d, 12h, 90m)")
        return default
    if value < minimum:
        problems.append(f"history.{key}: must be at least {minimum // 1000} s")
    elif value > maximum:
        problems.append(f"history.{key}: must be at most {maximum // DAY_MS} days")
    return value


def _int(raw: dict[Any, Any], key: str, default: int, low: int, high: int, problems: list[str]) -> int:
    if key not in raw:
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"history.{key}: must be an integer")
        return default
    if not low <= value <= high:
        problems.append(f"history.{key}: must be between {low} and {high}")
    return value
