"""The report as text, JSON or one self-contained HTML file with plots.

Plots are drawn with matplotlib as inline SVG: no JavaScript, no CDN, no external file; the
HTML opens offline, prints, and stays a few hundred kB. (docs/history.md says why.)
"""

from __future__ import annotations

import html
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from exporter.history.report import iso

#: Colours of the classes (colour-blind safe, Okabe-Ito).
CLASS_COLOURS = {
    "late": "#E69F00",
    "suspected_hanging": "#F0E442",
    "hanging": "#D55E00",
    "unknown": "#999999",
    "two_phase_commit": "#56B4E9",
}


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    s = int(ms // 1000)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def to_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, default=str) + "\n"


# --- text ---------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[str(h) for h in headers], *[["-" if v is None else str(v) for v in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def to_text(report: Mapping[str, Any]) -> str:
    out = [
        f"Transaction history report: {report['from']} .. {report['to']}"
        + (f", cluster {report['cluster']}" if report.get("cluster") else ""),
        f"History: {report['history']}",
        "",
    ]
    out.append(f"Incidents ({len(report['incidents'])})")
    out += (
        _table(
            [
                "first seen",
                "last seen",
                "topic-partition",
                "producer id",
                "start offset",
                "transactional id",
                "classes",
                "peak duration",
                "end",
                "actions",
            ],
            [
                (
                    i["first_seen"],
                    i["last_seen"],
                    f"{i['topic']}-{i['partition']}",
                    i["producer_id"],
                    i["start_offset"],
                    i["transactional_id"],
                    " > ".join(ch["class"] for ch in i["class_changes"]),
                    duration(i["peak_duration_ms"]),
                    i["end"],
                    ", ".join(
                        f"{a['action']}{' (dry run)' if a['dry_run'] else ''} by {a['os_user']}"
                        for a in i["actions"]
                    )
                    or None,
                )
                for i in report["incidents"]
            ],
        )
        if report["incidents"]
        else ["  none"]
    )
    out += ["", "Applications by late + hanging time"]
    out += (
        _table(
            ["transactional id", "producer id", "incidents", "late", "hanging", "peak", "topics"],
            [
                (
                    a["transactional_id"],
                    a["producer_id"],
                    a["incidents"],
                    duration(a["late_ms"]),
                    duration(a["hanging_ms"]),
                    duration(a["peak_duration_ms"]),
                    ",".join(a["topics"]),
                )
                for a in report["applications"]
            ],
        )
        if report["applications"]
        else ["  none"]
    )
    out += ["", "Topics by time blocked (LSO lag > 0)"]
    out += (
        _table(
            ["topic", "blocked", "peak LSO lag", "p50", "p90", "p99", "lagging partitions"],
            [
                (
                    t["topic"],
                    duration(t["blocked_ms"]),
                    t["peak_lso_lag"],
                    t["lso_lag_p50"],
                    t["lso_lag_p90"],
                    t["lso_lag_p99"],
                    t["partitions_lagging"],
                )
                for t in report["topics"]
            ],
        )
        if report["topics"]
        else ["  none"]
    )
    unreadable = report.get("unreadable_files") or []
    if unreadable:
        out += ["", f"Unreadable files ({len(unreadable)}, skipped: the figures above leave them out)"]
        out += [f"  {f}" for f in unreadable]
    out += ["", "Exporter health"]
    for h in report["health"]["clusters"]:
        out.append(
            f"  {h['cluster']}: {h['cycles_complete']} complete, {h['cycles_partial']} "
            f"partial, about {h['cycles_missing']} missing (failed or not run) cycles; "
            f"interval {duration(h['interval_ms'])}; {h['first_cycle']} .. "
            f"{h['last_cycle']}"
        )
        out += [
            f"    blind spot {b['from']} .. {b['to']} ({duration(b['duration_ms'])})"
            for b in h["blind_spots"]
        ]
        out += [f"    {e['count']} x {e['api']} {e['error']}" for e in h["errors"]]
    out += ["", f"CLI actions ({len(report['actions'])})"]
    out += (
        _table(
            ["at", "action", "result", "user", "principal", "target", "LSO before", "LSO after"],
            [
                (
                    a["at"],
                    a["action"],
                    a["result"],
                    a["os_user"],
                    a["principal"],
                    f"{a['topic']}-{a['partition']}@{a['start_offset']}"
                    if a["topic"]
                    else a["transactional_id"],
                    a["lso_before"],
                    a["lso_after"],
                )
                for a in report["actions"]
            ],
        )
        if report["actions"]
        else ["  none"]
    )
    return "\n".join(out) + "\n"


# --- HTML -----------------------------------------------------------------------------------


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]


def gantt_svg(incidents: Sequence[Mapping[str, Any]], limit: int = 40) -> str | None:
    """One bar per incident from first to last seen, coloured by class over time."""
    if not incidents:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    shown = list(incidents)[:limit]
    fig = Figure(figsize=(10, 0.9 + 0.32 * len(shown)))
    ax = fig.subplots()
    t0 = min(i["first_seen_ms"] for i in shown)
    for y, i in enumerate(shown):
        changes = i["class_changes"]
        ends = [ch["at_ms"] for ch in changes[1:]] + [i["end_ms"] or i["last_seen_ms"]]
        for ch, end in zip(changes, ends, strict=True):
            width = max((end - ch["at_ms"]) / 60000, 0.05)
            ax.broken_barh(
                [((ch["at_ms"] - t0) / 60000, width)],
                (y - 0.35, 0.7),
                facecolors=CLASS_COLOURS.get(ch["class"], "#444444"),
                gid="incident",
            )
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels(
        [
            f"{i['topic']}-{i['partition']} pid {i['producer_id']}"
            + (f" ({i['transactional_id']})" if i["transactional_id"] else "")
            for i in shown
        ],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlabel(f"minutes since {iso(t0)}")
    ax.set_title("Incidents: first to last seen, by class")
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in CLASS_COLOURS.items()], fontsize=7, loc="lower right"
    )
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def lag_svg(topics: Sequence[Mapping[str, Any]]) -> str | None:
    """LSO lag over time (highest partition per cycle) for the worst topics."""
    series = [t for t in topics if t.get("lag_series")]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.5))
    ax = fig.subplots()
    t0 = min(t["lag_series"][0][0] for t in series)
    for t in series:
        ax.plot(
            [(p[0] - t0) / 60000 for p in t["lag_series"]],
            [p[1] for p in t["lag_series"]],
            marker=".",
            linewidth=1.2,
            label=t["topic"],
            gid="lag-line",
        )
    ax.set_xlabel(f"minutes since {iso(t0)}")
    ax.set_ylabel("LSO lag (messages)")
    ax.set_title("LSO lag over time, worst topics (highest partition per cycle)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _svg(fig)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2} figure{margin:1em 0} .muted{color:#777}
"""


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('-' if v is None else str(v))}</td>" for v in r) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: Mapping[str, Any]) -> str:
    title = f"Kafka transaction history {report['from']} .. {report['to']}"
    gantt = gantt_svg(report["incidents"])
    lag = lag_svg(report["topics"])
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='muted'>cluster {html.escape(str(report.get('cluster') or 'all'))}; "
        f"history {html.escape(report['history'])}; generated "
        f"{html.escape(str(report.get('generated_at')))}</p>",
        f"<h2>Incidents ({len(report['incidents'])})</h2>",
    ]
    if gantt:
        parts.append(f"<figure id='incident-gantt'>{gantt}</figure>")
    parts.append(
        _html_table(
            [
                "first seen",
                "last seen",
                "partition",
                "producer id",
                "start offset",
                "transactional id",
                "classes",
                "peak duration",
                "end",
                "actions",
            ],
            [
                (
                    i["first_seen"],
                    i["last_seen"],
                    f"{i['topic']}-{i['partition']}",
                    i["producer_id"],
                    i["start_offset"],
                    i["transactional_id"],
                    " > ".join(ch["class"] for ch in i["class_changes"]),
                    duration(i["peak_duration_ms"]),
                    i["end"],
                    ", ".join(
                        f"{a['action']}{' (dry run)' if a['dry_run'] else ''} by {a['os_user']}"
                        for a in i["actions"]
                    )
                    or None,
                )
                for i in report["incidents"]
            ],
        )
    )
    parts.append("<h2>Applications by late + hanging time</h2>")
    parts.append(
        _html_table(
            ["transactional id", "producer id", "incidents", "late", "hanging", "peak", "topics"],
            [
                (
                    a["transactional_id"],
                    a["producer_id"],
                    a["incidents"],
                    duration(a["late_ms"]),
                    duration(a["hanging_ms"]),
                    duration(a["peak_duration_ms"]),
                    ", ".join(a["topics"]),
                )
                for a in report["applications"]
            ],
        )
    )
    parts.append("<h2>Topics by time blocked</h2>")
    if lag:
        parts.append(f"<figure id='lso-lag'>{lag}</figure>")
    parts.append(
        _html_table(
            ["topic", "blocked", "peak LSO lag", "p50", "p90", "p99", "lagging partitions"],
            [
                (
                    t["topic"],
                    duration(t["blocked_ms"]),
                    t["peak_lso_lag"],
                    t["lso_lag_p50"],
                    t["lso_lag_p90"],
                    t["lso_lag_p99"],
                    t["partitions_lagging"],
                )
                for t in report["topics"]
            ],
        )
    )
    unreadable = report.get("unreadable_files") or []
    if unreadable:
        parts.append(f"<h2>Unreadable files ({len(unreadable)}, skipped)</h2>")
        parts.append(_html_table(["file"], [(f,) for f in unreadable]))
    parts.append("<h2>Exporter health</h2>")
    parts.append(
        _html_table(
            ["cluster", "complete", "partial", "missing", "interval", "blind spots", "errors"],
            [
                (
                    h["cluster"],
                    h["cycles_complete"],
                    h["cycles_partial"],
                    h["cycles_missing"],
                    duration(h["interval_ms"]),
                    "; ".join(f"{b['from']} .. {b['to']}" for b in h["blind_spots"]) or None,
                    "; ".join(f"{e['count']} x {e['api']} {e['error']}" for e in h["errors"]) or None,
                )
                for h in report["health"]["clusters"]
            ],
        )
    )
    parts.append(f"<h2>CLI actions ({len(report['actions'])})</h2>")
    parts.append(
        _html_table(
            [
                "at",
                "action",
                "result",
                "user",
                "principal",
                "host",
                "target",
                "written",
                "LSO before",
                "LSO after",
            ],
            [
                (
                    a["at"],
                    a["action"],
                    a["result"],
                    a["os_user"],
                    a["principal"],
                    a["host"],
                    f"{a['topic']}-{a['partition']}@{a['start_offset']}"
                    if a["topic"]
                    else a["transactional_id"],
                    a["written"],
                    a["lso_before"],
                    a["lso_after"],
                )
                for a in report["actions"]
            ],
        )
    )
    parts.append("</body></html>\n")
    return "".join(parts)
