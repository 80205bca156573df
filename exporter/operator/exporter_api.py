"""Answers from a running exporter: ``find-hanging`` and ``list`` read the last cycle of an
exporter that collects the cluster (``GET /api/v1/findings``, docs/findings.schema.json)
instead of collecting and classifying again, in well under a second. ``--fresh`` computes
now, as without an exporter; ``abort`` and ``recover`` always read the cluster themselves.

Which exporter answers:

1. ``--exporter URL``: that one. It must answer for the cluster, or the command fails
   (exit 3) saying why.
2. Otherwise one is looked for, each briefly, and its answer is used only when it collects
   the same cluster (by ``--cluster`` name with ``--config.file``, else by a bootstrap
   server in common) and its last cycle was complete and is recent (at most two intervals
   and 30 s old); else the command computes fresh, as it did before exporters answered:

   * ``$KAFKA_TXN_EXPORTER_URL`` (the Helm chart sets it in the exporter's container, so
     ``kubectl exec`` into the pod finds it);
   * with ``--config.file``: its ``web.listen_address`` port on 127.0.0.1;
   * ``http://127.0.0.1:9851``, the default port.

Basic auth: the user and password in the URL (``https://user:pass@host:9851``) or the user in
the URL and the password in ``$KAFKA_TXN_EXPORTER_PASSWORD``; never printed. HTTPS is
verified against the system's CAs or ``$KAFKA_TXN_EXPORTER_CA_FILE``.

This module imports neither Kafka clients nor Spark: the whole answer is an HTTP request.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: The exporter's default listen port (``web.listen_address``).
DEFAULT_EXPORTER_URL = "http://127.0.0.1:9851"
EXPORTER_URL_ENV = "KAFKA_TXN_EXPORTER_URL"
EXPORTER_PASSWORD_ENV = "KAFKA_TXN_EXPORTER_PASSWORD"
EXPORTER_CA_ENV = "KAFKA_TXN_EXPORTER_CA_FILE"
FINDINGS_PATH = "/api/v1/findings"
#: How long a looked-for exporter may take to answer (a given one: :data:`GIVEN_TIMEOUT_S`).
PROBE_TIMEOUT_S = 2.0
GIVEN_TIMEOUT_S = 10.0
#: A looked-for exporter's answer is used when its cycle is at most this many intervals old,
#: plus :data:`FRESH_SLACK_S`.
FRESH_INTERVALS = 2
FRESH_SLACK_S = 30.0


class ExporterError(Exception):
    """The exporter given with ``--exporter`` cannot answer for this cluster; says why."""


@dataclass(frozen=True)
class Answer:
    """One cluster's part of an exporter's findings document, and where it came from."""

    url: str  # without credentials
    cluster: Mapping[str, Any]
    fetched_in_s: float

    @property
    def cycle(self) -> Mapping[str, Any]:
        cycle: Mapping[str, Any] = self.cluster["cycle"]
        return cycle

    @property
    def age_s(self) -> float:
        return float(self.cycle["age_s"])

    def source(self) -> dict[str, Any]:
        """Where the answer came from, for a JSON document."""
        return {
            "exporter": self.url,
            "cluster": self.cluster["cluster"],
            "computed_at": self.cycle["computed_at"],
            "age_s": self.age_s,
            "complete": self.cycle["complete"],
            "up": self.cluster["up"],
        }

    def describe(self) -> str:
        """One line for stderr: whose answer, and how old."""
        stale = "" if self.cluster["up"] else "; the exporter's last cycle failed, this is an older one"
        return (
            f"the answer of the exporter at {self.url} (cluster {self.cluster['cluster']}), from "
            f"its cycle at {self.cycle['computed_at']}, {_age(self.age_s)} ago{stale}; --fresh "
            "computes it now"
        )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def redacted(url: str) -> str:
    """``url`` without its user information."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def candidates(given: str | None, listen_port: int | None) -> list[str]:
    """The exporters to ask, in order (see the module doc)."""
    if given:
        return [given]
    found = [os.environ.get(EXPORTER_URL_ENV, "")]
    if listen_port:
        found.append(f"http://127.0.0.1:{listen_port}")
    found.append(DEFAULT_EXPORTER_URL)
    out: list[str] = []
    for url in found:
        if url and redacted(url) not in {redacted(u) for u in out}:
            out.append(url)
    return out


def fetch(url: str, timeout_s: float) -> dict[str, Any]:
    """The findings document of the exporter at ``url``; raises OSError (unreachable, not an
    exporter) or ValueError (not the document)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http:// or https:// URL")
    request = urllib.request.Request(
        f"{redacted(url)}{FINDINGS_PATH}", headers={"Accept": "application/json"}
    )
    user = parts.username
    if user is not None:
        password = parts.password if parts.password is not None else os.environ.get(EXPORTER_PASSWORD_ENV, "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = None
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=os.environ.get(EXPORTER_CA_ENV) or None)
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
        document = json.loads(response.read())
    if not isinstance(document, dict) or not isinstance(document.get("clusters"), list):
        raise ValueError("the answer is not a findings document")
    return document


def _servers(bootstrap: str) -> set[str]:
    return {s.strip().lower() for s in bootstrap.split(",") if s.strip()}


def _matches(clusters: list[dict[str, Any]], name: str | None, bootstrap: str) -> Iterator[dict[str, Any]]:
    for c in clusters:
        if name is not None:
            if c.get("cluster") == name:
                yield c
        elif _servers(str(c.get("bootstrap_servers", ""))) & _servers(bootstrap):
            yield c


def find_answer(
    *,
    given: str | None,
    cluster_name: str | None,
    bootstrap: str,
    listen_port: int | None = None,
) -> Answer | None:
    """The answer for the cluster (``cluster_name`` from a config file, else matched by
    ``bootstrap``): from the ``given`` exporter (raises :class:`ExporterError` when it cannot
    give one), else from one found that is fit to answer, else None."""
    for url in candidates(given, listen_port):
        timeout = GIVEN_TIMEOUT_S if given else PROBE_TIMEOUT_S
        started = time.monotonic()
        try:
            document = fetch(url, timeout)
        except urllib.error.HTTPError as e:
            if given:
                hint = " (basic auth: user and password in the URL)" if e.code == 401 else ""
                raise ExporterError(f"exporter at {redacted(url)} answered HTTP {e.code}{hint}") from None
            continue
        except (OSError, ValueError) as e:
            if given:
                why = getattr(e, "reason", None) or e
                raise ExporterError(f"exporter at {redacted(url)} did not answer: {why}") from None
            continue
        elapsed = time.monotonic() - started
        found = list(_matches(document["clusters"], cluster_name, bootstrap))
        if len(found) != 1 or found[0].get("cycle") is None:
            if given:
                raise ExporterError(_no_cluster(redacted(url), document, cluster_name, bootstrap, found))
            continue
        answer = Answer(redacted(url), found[0], elapsed)
        if given or _fit(answer):
            return answer
    return None


def _fit(answer: Answer) -> bool:
    interval = float(answer.cluster.get("interval_s") or 0)
    return bool(answer.cluster["up"]) and answer.age_s <= FRESH_INTERVALS * interval + FRESH_SLACK_S


def _no_cluster(
    url: str,
    document: dict[str, Any],
    name: str | None,
    bootstrap: str,
    found: list[dict[str, Any]],
) -> str:
    wanted = f"cluster {name!r}" if name else f"a cluster at {bootstrap}"
    if len(found) > 1:
        names = ", ".join(str(c.get("cluster")) for c in found)
        return (
            f"exporter at {url} collects several clusters at {bootstrap} ({names}): "
            "use --config.file and --cluster"
        )
    if found:
        return f"exporter at {url} has no complete cycle of {wanted} yet; --fresh computes it now"
    serves = ", ".join(f"{c.get('cluster')} ({c.get('bootstrap_servers')})" for c in document["clusters"])
    return f"exporter at {url} does not collect {wanted}; it collects {serves or 'nothing'}"
