"""Shared building blocks for the dashboards: variables, panel specs, layout.

Every panel is described by a :class:`PanelSpec`, which cannot be built without a unit, a
statement of what the panel shows and what to do when it turns red. The grafanalib objects are
made from the specs in one place, so all dashboards share ids, grid layout and data source
wiring, and the output stays byte-for-byte stable between runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from grafanalib.core import (
    Annotations,
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from exporter.metrics import catalogue as m
from exporter.metrics.catalogue import DEFAULT_CLUSTER_LABEL, RUNBOOK_BASE_URL

#: Grafana dashboard JSON schema version (Grafana 11.0; later versions migrate it on load, and
#: the panels used here exist since Grafana 9).
SCHEMA_VERSION = 39
DASHBOARD_TAGS = ["kafka", "kafka-transactions", "kafka-txn-exporter"]
CLI = "kafka-txn-exporter"

OVERVIEW_UID = "kte-overview"
PARTITION_UID = "kte-partition"
EXPORTER_UID = "kte-exporter"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

#: The Kafka cluster label the dashboards are generated for; other names are produced by
#: renaming it (dashboards.generate.for_cluster_label, the chart's config.cluster_label).
CLUSTER_LABEL = DEFAULT_CLUSTER_LABEL
#: Label matchers every query puts on its selectors (the cluster is multi-valued, so regex).
CLUSTER = f'{CLUSTER_LABEL}=~"${CLUSTER_LABEL}"'
TOPIC = 'topic=~"$topic"'
PARTITION = 'partition=~"$partition"'

GRID_WIDTH = 24
ROW_HEIGHT = 1

PanelKind = Literal["timeseries", "stat", "table"]
#: Threshold steps: (color, value from which it applies); the first value is always None.
Steps = tuple[tuple[str, float | None], ...]

GREEN_THEN_RED_AT_1: Steps = (("green", None), ("red", 1.0))
RED_BELOW_1: Steps = (("red", None), ("green", 1.0))
NEUTRAL: Steps = (("green", None),)
#: Data age: orange from 2 minutes, red from 5 (the KafkaTxnExporterDataStale threshold).
STALE_DATA: Steps = (("green", None), ("orange", 120.0), ("red", 300.0))
#: LastStableOffsetLag: a stat turns orange at 10000 offsets, a line is red from 100000.
LSO_LAG_STAT: Steps = (("green", None), ("orange", 10000.0), ("red", 100000.0))
LSO_LAG_LINE: Steps = (("green", None), ("red", 100000.0))
#: A per-second rate of something that should not happen at all.
ANY_RATE: Steps = (("green", None), ("red", 0.01))

#: Label sets the panels aggregate by, with the legend that names one series of them.
PER_BROKER = "kafka_cluster, broker"
PER_COORDINATOR = "kafka_cluster, coordinator"
PER_PARTITION = "kafka_cluster, topic, partition"
BROKER_LEGEND = "{{kafka_cluster}} broker {{broker}}"
COORDINATOR_LEGEND = "{{kafka_cluster}} coordinator {{coordinator}}"
PARTITION_LEGEND = "{{kafka_cluster}} {{topic}}-{{partition}}"
PARTITION_LSO_LAG = m.PARTITION_LAST_STABLE_OFFSET_LAG


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class PanelSpec:
    """What a panel shows; turned into a grafanalib panel by :func:`build_panel`.

    ``shows`` says what the panel shows, ``when_red`` what to do when it turns red (and names
    the runbook or the CLI command). Both end up in the panel description.
    """

    kind: PanelKind
    title: str
    shows: str
    when_red: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 8
    height: int = 8
    steps: Steps = NEUTRAL
    stacked: bool = False
    value_text: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    hidden_columns: tuple[str, ...] = ()
    column_order: tuple[str, ...] = ()
    #: A table shows its query's value under this column name (hidden otherwise).
    value_column: str = ""
    partition_link_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if not self.unit:
            problems.append("unit is empty")
        if not self.shows.strip() or not self.when_red.strip():
            problems.append("shows and when_red must both be given")
        if not self.queries:
            problems.append("no query")
        if not 1 <= self.width <= GRID_WIDTH:
            problems.append(f"width {self.width} outside 1..{GRID_WIDTH}")
        if problems:
            raise ValueError(f"panel {self.title!r}: " + "; ".join(problems))

    @property
    def description(self) -> str:
        return f"{self.shows}\n\nWhen it turns red: {self.when_red}"


@dataclass(frozen=True)
class Section:
    """A titled row of panels."""

    title: str
    panels: tuple[PanelSpec, ...]


def runbook(alert: str) -> str:
    """The runbook URL of an alert (the same base URL the alert rules use)."""
    return f"{RUNBOOK_BASE_URL}{alert}.md"


def max_by(labels: str, metric: str, selector: str = CLUSTER) -> str:
    """``max by (labels) (metric{selector})``: one series per value of ``labels``."""
    return f"max by ({labels}) ({metric}{{{selector}}})"


def per_broker(metric: str, *, instant: bool = False) -> Query:
    """``metric`` of the selected clusters, one series per broker."""
    return Query(max_by(PER_BROKER, metric), legend=BROKER_LEGEND, instant=instant)


# ------------------------------------------------------- panels on several dashboards

_EXPORTER_UP = f"min by (kafka_cluster) ({m.EXPORTER_UP}{{{CLUSTER}}})"
_SNAPSHOT_AGE = max_by("kafka_cluster", m.EXPORTER_SNAPSHOT_AGE)


def _cluster_stat(
    *,
    title: str,
    shows: str,
    when_red: str,
    unit: str,
    expr: str,
    width: int,
    steps: Steps,
    value_text: Mapping[str, tuple[str, str]] | None = None,
) -> PanelSpec:
    """A short stat of ``expr``'s current value, one per cluster."""
    return PanelSpec(
        kind="stat",
        title=title,
        shows=shows,
        when_red=when_red,
        unit=unit,
        queries=(Query(expr, legend="{{kafka_cluster}}", instant=True),),
        width=width,
        height=5,
        steps=steps,
        value_text=value_text or {},
    )


def exporter_up_stat(*, title: str, shows: str, when_red: str, width: int) -> PanelSpec:
    """The exporter's up gauge per cluster, shown as UP or DOWN."""
    return _cluster_stat(
        title=title,
        shows=shows,
        when_red=when_red,
        unit="none",
        expr=_EXPORTER_UP,
        width=width,
        steps=RED_BELOW_1,
        value_text={"0": ("DOWN", "red"), "1": ("UP", "green")},
    )


def data_age_stat(
    *,
    shows: str,
    when_red: str,
    width: int,
    title: str = "Snapshot age",
    expr: str = _SNAPSHOT_AGE,
) -> PanelSpec:
    """An age in seconds per cluster (by default the served snapshot's), red when stale."""
    return _cluster_stat(
        title=title,
        shows=shows,
        when_red=when_red,
        unit="s",
        expr=expr,
        width=width,
        steps=STALE_DATA,
    )


def findings_table(
    *,
    title: str,
    shows: str,
    when_red: str,
    metric: str,
    columns: tuple[str, ...],
    selector: str,
    link_partitions: bool = False,
) -> PanelSpec:
    """A full-width table of an ``*_info`` findings metric, one row per finding."""
    return PanelSpec(
        kind="table",
        title=title,
        shows=shows,
        when_red=when_red,
        unit="none",
        queries=(Query(max_by(", ".join(columns), metric, selector), table=True),),
        width=GRID_WIDTH,
        column_order=columns,
        partition_link_columns=("partition",) if link_partitions else (),
    )


# ---------------------------------------------------------------- variables


def datasource_variable() -> Template:
    return Template(
        name="datasource",
        label="Data source",
        query="prometheus",
        type="datasource",
        default="Prometheus",
        hide=0,
    )


def query_variable(name: str, label: str, query: str) -> Template:
    """A multi-valued variable whose "All" value is the regex ``.*``."""
    return Template(
        name=name,
        label=label,
        query=query,
        dataSource=DATASOURCE,
        includeAll=True,
        multi=True,
        allValue=".*",
        default="$__all",
        refresh=2,
        sort=3,  # numerical ascending: partitions sort as numbers
    )


def cluster_variable() -> Template:
    return query_variable(CLUSTER_LABEL, "Kafka cluster", f"label_values({m.EXPORTER_UP}, {CLUSTER_LABEL})")


def topic_variable() -> Template:
    return query_variable(
        "topic",
        "Topic",
        f"label_values({m.PARTITION_LAST_STABLE_OFFSET_LAG}{{{CLUSTER}}}, topic)",
    )


def partition_variable() -> Template:
    return query_variable(
        "partition",
        "Partition",
        f"label_values({m.PARTITION_LAST_STABLE_OFFSET_LAG}{{{CLUSTER},{TOPIC}}}, partition)",
    )


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute_variables(
    expr: str,
    values: Mapping[str, str] | None = None,
    *,
    rate_interval: str = "1m",
) -> str:
    """Turn a dashboard expression into plain PromQL that Prometheus accepts.

    Every template variable becomes its value in ``values`` or else the regex-all ``.*`` (the
    dashboards' "All" value; every variable is used with ``=~``). Grafana's interval variables
    (``$__rate_interval``, ``$__interval``, ``$__range``) become ``rate_interval``.
    """
    chosen = dict(values or {})

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in ("__rate_interval", "__interval", "__range"):
            return rate_interval
        return chosen.get(name, ".*")

    return _VARIABLE.sub(replace, expr)


# ------------------------------------------------------------------ panels


def _targets(queries: Sequence[Query]) -> list[Target]:
    return [
        Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            instant=q.instant or q.table,
            format="table" if q.table else "time_series",
            intervalFactor=1,
            datasource=DATASOURCE,
        )
        for i, q in enumerate(queries)
    ]


def _steps(steps: Steps) -> list[dict[str, Any]]:
    return [{"color": color, "value": value} for color, value in steps]


def _value_mappings(value_text: Mapping[str, tuple[str, str]]) -> list[dict[str, Any]]:
    if not value_text:
        return []
    options = {
        value: {"color": color, "index": i, "text": text}
        for i, (value, (text, color)) in enumerate(sorted(value_text.items()))
    }
    return [{"options": options, "type": "value"}]


def _partition_links(columns: Sequence[str]) -> list[dict[str, Any]]:
    url = (
        f"/d/{PARTITION_UID}?${{__url_time_range}}&var-datasource=${{datasource}}"
        f"&var-{CLUSTER_LABEL}=${{__data.fields.{CLUSTER_LABEL}}}&var-topic=${{__data.fields.topic}}"
        "&var-partition=${__data.fields.partition}"
    )
    return [
        {
            "matcher": {"id": "byName", "options": column},
            "properties": [
                {
                    "id": "links",
                    "value": [{"title": "Open the partition drill-down", "url": url}],
                }
            ],
        }
        for column in columns
    ]


def _table_transformations(spec: PanelSpec) -> list[dict[str, Any]]:
    always_hidden = ("Time", "__name__") if spec.value_column else ("Time", "Value", "__name__")
    hidden = {name: True for name in (*always_hidden, *spec.hidden_columns)}
    columns = (*spec.column_order, "Value") if spec.value_column else spec.column_order
    order = {name: i for i, name in enumerate(columns)}
    rename = {"Value": spec.value_column} if spec.value_column else {}
    return [
        {
            "id": "organize",
            "options": {"excludeByName": hidden, "indexByName": order, "renameByName": rename},
        }
    ]


def build_panel(spec: PanelSpec, x: int, y: int) -> TimeSeries | Stat | Table:
    common: dict[str, Any] = {
        "title": spec.title,
        "description": spec.description,
        "dataSource": DATASOURCE,
        "targets": _targets(spec.queries),
        "gridPos": GridPos(h=spec.height, w=spec.width, x=x, y=y),
    }
    if spec.kind == "timeseries":
        return TimeSeries(
            **common,
            unit=spec.unit,
            thresholds=_steps(spec.steps),
            thresholdsStyleMode="line" if len(spec.steps) > 1 else "off",
            stacking={"group": "A", "mode": "normal"} if spec.stacked else {},
            fillOpacity=20 if spec.stacked else 0,
            legendDisplayMode="table",
            legendPlacement="bottom",
            legendCalcs=["lastNotNull", "max"],
            tooltipMode="multi",
            tooltipSort="desc",
            mappings=_value_mappings(spec.value_text),
            valueMin=0,
        )
    if spec.kind == "stat":
        return Stat(
            **common,
            format=spec.unit,
            thresholds=_steps(spec.steps),
            reduceCalc="lastNotNull",
            colorMode="background",
            graphMode="none",
            textMode="value_and_name" if any(q.legend for q in spec.queries) else "value",
            mappings=_value_mappings(spec.value_text),
            noValue="no data",
        )
    return Table(
        **common,
        unit=spec.unit,
        thresholds=_steps(spec.steps),
        filterable=True,
        transformations=_table_transformations(spec),
        overrides=_partition_links(spec.partition_link_columns),
    )


def layout(sections: Sequence[Section]) -> list[Any]:
    """Place the sections top to bottom, each panel left to right, wrapping at 24 columns."""
    panels: list[Any] = []
    y = 0
    for section in sections:
        panels.append(RowPanel(title=section.title, gridPos=GridPos(h=ROW_HEIGHT, w=GRID_WIDTH, x=0, y=y)))
        y += ROW_HEIGHT
        x = 0
        line_height = 0
        for spec in section.panels:
            if x + spec.width > GRID_WIDTH:
                y += line_height
                x, line_height = 0, 0
            panels.append(build_panel(spec, x, y))
            x += spec.width
            line_height = max(line_height, spec.height)
        y += line_height
    return panels


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    variables: Sequence[Template],
    sections: Sequence[Section],
) -> Dashboard:
    """A dashboard with stable panel ids (1..n in layout order)."""
    board = Dashboard(
        title=title,
        annotations=alert_annotations(),
        uid=uid,
        description=description,
        tags=list(DASHBOARD_TAGS),
        timezone="browser",
        refresh="30s",
        time=Time("now-6h", "now"),
        schemaVersion=SCHEMA_VERSION,
        graphTooltip=1,
        editable=False,
        templating=Templating(list=list(variables)),
        panels=layout(sections),
        links=[
            {
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "tags": ["kafka-txn-exporter"],
                "title": "kafka-txn-exporter",
                "type": "dashboards",
            },
            {
                "title": "Runbooks",
                "type": "link",
                "url": RUNBOOK_BASE_URL + "README.md",
                "targetBlank": True,
            },
        ],
    )
    return board.auto_panel_ids()


#: Alert names of alerts/rules.py (all start with one of these).
ALERT_NAME_REGEX = "Kafka(Transaction|LastStableOffset|ConsumerGroup|Txn).*"


def alert_annotations() -> Annotations:
    """Firing alerts of this project, from Prometheus' ALERTS series, as annotations."""
    return Annotations(
        list=[
            {
                "datasource": DATASOURCE,
                "enable": True,
                "hide": False,
                "iconColor": "red",
                "name": "Kafka transaction alerts",
                "expr": f'ALERTS{{alertstate="firing",alertname=~"{ALERT_NAME_REGEX}",{CLUSTER}}}',
                "step": "60s",
                "titleFormat": "{{alertname}}",
                "textFormat": "{{severity}} {{" + CLUSTER_LABEL + "}} {{broker}}{{coordinator}}"
                " {{topic}} {{partition}} {{group}}",
                "tagKeys": "severity," + CLUSTER_LABEL,
                "useValueForTime": False,
            }
        ]
    )
