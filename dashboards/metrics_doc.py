"""The fixed metric catalogue, parsed from docs/metrics-names.md.

Tests use it to check that every dashboard and alert expression names documented metrics and
labels only. A histogram contributes its ``_bucket`` (with ``le``), ``_sum`` and ``_count``
series.
"""

from __future__ import annotations

import re
from pathlib import Path

METRICS_DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics-names.md"

_ENTRY = re.compile(r"^- `(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}`\s*(?P<type>\w+)?")
#: Series every Prometheus adds itself; the exporter-down alert uses ``up``.
PROMETHEUS_SERIES = {"up": frozenset({"job", "instance"})}


def documented_metrics(path: Path = METRICS_DOC) -> dict[str, frozenset[str]]:
    """Series name -> its label names, for every metric in the catalogue."""
    metrics: dict[str, frozenset[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ENTRY.match(line.strip())
        if not match:
            continue
        labels = frozenset(label.strip() for label in match["labels"].split(",") if label.strip())
        name = match["name"]
        if match["type"] == "histogram":
            metrics[f"{name}_bucket"] = labels | {"le"}
            metrics[f"{name}_sum"] = labels
            metrics[f"{name}_count"] = labels
        else:
            metrics[name] = labels
    return metrics


_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_BARE_METRIC = re.compile(r"\b(kafka_txn_[a-z0-9_]+)\b")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def referenced_metrics(expr: str) -> set[str]:
    """Metric names an expression selects (``name{...}`` selectors and bare kafka_txn_ names)."""
    names = {match[1] for match in _SELECTOR.finditer(expr)}
    names |= {match[1] for match in _BARE_METRIC.finditer(expr)}
    return names


def selector_labels(expr: str) -> dict[str, set[str]]:
    """Metric name -> label names used in its matchers."""
    found: dict[str, set[str]] = {}
    for match in _SELECTOR.finditer(expr):
        found.setdefault(match[1], set()).update(_MATCHER_LABEL.findall(match[2]))
    return found


def grouping_labels(expr: str) -> set[str]:
    """Labels named in by/without/on/ignoring/group_left/group_right clauses."""
    labels: set[str] = set()
    for match in _GROUPING.finditer(expr):
        labels |= {label.strip() for label in match[1].split(",") if label.strip()}
    return labels
