"""Render the dashboards to JSON; ``--check`` verifies the committed files are current.

    python -m dashboards.generate           # write dashboards/generated/ and the Helm copy
    python -m dashboards.generate --check   # exit 1 naming every file that differs

The same bytes go to ``dashboards/generated/`` and to the Helm chart's
``files/dashboards/``. Output is deterministic: sorted keys, panel ids in layout order.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from dashboards import exporter, output, overview, partition
from dashboards.common import CLUSTER_LABEL, substitute_variables
from dashboards.output import HELM_FILES, REPO

OUTPUT_DIRS = (REPO / "dashboards" / "generated", HELM_FILES / "dashboards")

#: Output file name -> builder.
DASHBOARDS: Mapping[str, Callable[[], Dashboard]] = {
    "kafka-txn-overview.json": overview.build,
    "kafka-txn-partition.json": partition.build,
    "kafka-txn-exporter.json": exporter.build,
}


def _without_max_data_points(node: Any) -> Any:
    """grafanalib puts ``maxDataPoints: 100`` on every panel (a 6 h view would get a ~216 s
    step); leaving it out lets Grafana size the step to the panel's width."""
    if isinstance(node, dict):
        return {k: _without_max_data_points(v) for k, v in node.items() if k != "maxDataPoints"}
    if isinstance(node, list):
        return [_without_max_data_points(v) for v in node]
    return node


def render(board: Dashboard) -> str:
    """The dashboard as JSON text, keys sorted, ending in a newline."""
    model = json.loads(json.dumps(board.to_json_data(), cls=DashboardEncoder))
    return json.dumps(_without_max_data_points(model), sort_keys=True, indent=2) + "\n"


_CLUSTER_LABEL_WORD = re.compile(rf"\b{CLUSTER_LABEL}\b")


def for_cluster_label(text: str, label: str) -> str:
    """A rendered dashboard for another Kafka cluster label name (config ``cluster_label``):
    every use of the default name (label, variable, legend, link) renamed. The chart's
    dashboards template does the same with ``config.cluster_label``."""
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
        raise ValueError(f"{label!r} is not a Prometheus label name")
    return _CLUSTER_LABEL_WORD.sub(label, text)


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def dashboard_models() -> dict[str, dict[str, Any]]:
    """File name -> the dashboard as plain JSON data (what Grafana will load)."""
    loaded: dict[str, dict[str, Any]] = {}
    for name, text in rendered().items():
        loaded[name] = json.loads(text)
    return loaded


def iter_panels(model: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard model, rows included, nested panels flattened."""
    for panel in model.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def panel_expressions() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expression) for every query of every panel."""
    found = []
    for name, model in dashboard_models().items():
        for panel in iter_panels(model):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((name, str(panel["title"]), str(target["expr"])))
    return found


def all_expressions() -> list[str]:
    """Every distinct PromQL expression the dashboards use, sorted.

    They still contain Grafana variables; :func:`prometheus_expressions` substitutes them.
    """
    return sorted({expr for _, _, expr in panel_expressions()})


def prometheus_expressions(
    values: Mapping[str, str] | None = None, *, rate_interval: str = "1m"
) -> list[str]:
    """:func:`all_expressions` with every variable replaced (by default with ``.*``)."""
    return [substitute_variables(expr, values, rate_interval=rate_interval) for expr in all_expressions()]


def variable_queries() -> dict[str, dict[str, str]]:
    """Dashboard file -> variable name -> its query (``label_values(...)`` or plugin type)."""
    return {
        name: {var["name"]: str(var["query"]) for var in model["templating"]["list"]}
        for name, model in dashboard_models().items()
    }


def _files(expected: Mapping[str, str], directory: Path) -> dict[Path, str]:
    return {directory / name: text for name, text in sorted(expected.items())}


def differences(expected: Mapping[str, str], directories: Sequence[Path]) -> list[str]:
    """Paths whose content is not the expected text, plus stray JSON files."""
    problems = []
    for directory in directories:
        problems += output.differences(_files(expected, directory))
        if directory.is_dir():
            for path in sorted(directory.glob("*.json")):
                if path.name not in expected:
                    problems.append(f"{path}: not produced by the generator (remove it)")
    return problems


def write(expected: Mapping[str, str], directories: Sequence[Path]) -> list[Path]:
    written = []
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        written += output.write(_files(expected, directory))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = output.generator_parser("python -m dashboards.generate", __doc__)
    parser.add_argument(
        "--list-expressions",
        action="store_true",
        help="print every PromQL expression the dashboards use and exit",
    )
    args = parser.parse_args(argv)

    if args.list_expressions:
        for expr in all_expressions():
            print(expr)
        return 0
    expected = rendered()
    if args.check:
        problems = differences(expected, OUTPUT_DIRS)
        return output.report_check(problems, "python -m dashboards.generate")
    for path in write(expected, OUTPUT_DIRS):
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
