"""Output of the operator commands: Kafka-style tables or JSON, and the small formatters.

Tables use Kafka's ``kafka-transactions.sh`` column names where a column means the same, so
an operator can read both tools side by side; extra columns come after Kafka's. The records
themselves are serialised once, in :mod:`exporter.operator.records`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from exporter import progress

OUTPUTS = ("table", "json")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, separated by two spaces."""
    cells = [[str(h) for h in headers], *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _cell(value: object) -> str:
    if value is None:
        return "None"  # Kafka's own placeholder (e.g. CurrentTransactionStartOffset)
    return str(value)


def emit(output: str, document: Mapping[str, Any], text: str, out: TextIO | None = None) -> None:
    """Print ``document`` as JSON or ``text`` as it is."""
    stream = out if out is not None else sys.stdout
    progress.clear(finished=True)
    if output == "json":
        stream.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
    else:
        stream.write(text + ("\n" if text and not text.endswith("\n") else ""))


def note(message: str) -> None:
    """Messages for the operator, never mixed with the table or JSON on stdout."""
    progress.clear()
    sys.stderr.write(message.rstrip("\n") + "\n")


def iso_ms(ms: int) -> str | None:
    """Epoch milliseconds as UTC ISO 8601; None for Kafka's -1 (unknown)."""
    if ms < 0:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_duration(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"
