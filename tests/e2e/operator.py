"""What the Prometheus Operator makes of the chart, without Kubernetes: the chart is rendered
with the real ``helm``, and its monitoring objects are turned into the configuration the
Operator would generate for Prometheus and Alertmanager.

* :func:`render_chart`: ``helm template`` of deploy/helm/kafka-txn-exporter with values.
* :func:`rule_file`: a PrometheusRule's ``spec`` as a Prometheus rule file.
* :func:`service_monitor_scrape`: a scrape config whose target carries the labels a
  ServiceMonitor gives its targets (namespace, service, pod, container, endpoint, job = the
  Service's name).
* :func:`alertmanager_config`: the Operator's Alertmanager configuration for one
  AlertmanagerConfig: a kube-prometheus-stack style root (receiver ``null``, the Watchdog
  route), and the object's route first, with the ``namespace="<its namespace>"`` matcher the
  Operator enforces, ``continue: true``, receivers named ``<namespace>/<name>/<receiver>``,
  secret references resolved to their values, and the inhibition rules scoped to the
  namespace on both sides.

Only the fields the chart uses are converted; anything else fails loudly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kafka-txn-exporter"
HELM_CACHE_BIN = Path(os.environ.get("KTE_CACHE", Path.home() / ".cache" / "kafka-txn-exporter")) / "bin"

Manifest = dict[str, Any]


def find_helm() -> str:
    found = shutil.which("helm") or shutil.which("helm", path=str(HELM_CACHE_BIN))
    if found is None:
        raise RuntimeError(f"helm not found on PATH nor in {HELM_CACHE_BIN}: run .ci/setup.sh")
    return found


def render_chart(release: str, namespace: str, values: Mapping[str, Any]) -> list[Manifest]:
    """``helm template`` with ``values`` (written to a file, so types survive)."""
    args = [find_helm(), "template", release, str(CHART), "--namespace", namespace, "--values", "-"]
    done = subprocess.run(
        args, input=json.dumps(values), capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(docs: Sequence[Manifest], kind: str) -> Manifest:
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        raise RuntimeError(f"expected one {kind}, rendered {len(found)}")
    return found[0]


def rule_file(prometheus_rule: Manifest) -> str:
    """The PrometheusRule's groups as the rule file the Operator mounts into Prometheus."""
    return str(yaml.safe_dump({"groups": prometheus_rule["spec"]["groups"]}, sort_keys=False))


def service_monitor_scrape(
    service_monitor: Manifest,
    *,
    target: str,
    namespace: str,
    service: str,
    pod: str,
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One scrape config with the target labels a ServiceMonitor's endpoint produces."""
    (endpoint,) = service_monitor["spec"]["endpoints"]
    labels = {
        "namespace": namespace,
        "service": service,
        "pod": pod,
        "container": "kafka-txn-exporter",
        "endpoint": endpoint["port"],
        **(extra_labels or {}),
    }
    return {
        # The Operator names the job serviceMonitor/<ns>/<name>/<i> and sets the job label to
        # the Service's name.
        "job_name": f"serviceMonitor/{namespace}/{service_monitor['metadata']['name']}/0",
        "metrics_path": endpoint["path"],
        "scheme": endpoint.get("scheme", "http"),
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "static_configs": [{"targets": [target], "labels": labels}],
        "relabel_configs": [
            {"target_label": "job", "replacement": service, "action": "replace"},
        ],
    }


def _matcher(m: Mapping[str, Any]) -> str:
    match_type = m.get("matchType", "=")
    if match_type not in ("=", "!=", "=~", "!~"):
        raise ValueError(f"matchType {match_type!r}")
    return f"{m['name']}{match_type}{json.dumps(str(m.get('value', '')))}"


def _namespace_matcher(namespace: str) -> str:
    return f"namespace={json.dumps(namespace)}"


def _pagerduty(config: Mapping[str, Any], secrets: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    known = {
        "routingKey", "url", "sendResolved", "severity", "class", "group", "component", "client",
        "description", "details",
    }  # fmt: skip
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"pagerdutyConfigs fields this converter does not know: {unknown}")
    ref = config["routingKey"]
    out: dict[str, Any] = {"routing_key": secrets[(ref["name"], ref["key"])]}
    if "url" in config:
        out["url"] = config["url"]
    out["send_resolved"] = bool(config.get("sendResolved", True))
    for key in ("severity", "class", "group", "component", "client", "description"):
        if key in config:
            out[key] = config[key]
    if "details" in config:
        out["details"] = {d["key"]: d["value"] for d in config["details"]}
    return out


def alertmanager_config(
    amc: Manifest,
    secrets: Mapping[tuple[str, str], str],
    *,
    group_timers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Alertmanager configuration the Operator generates for ``amc``."""
    namespace = amc["metadata"]["namespace"]
    prefix = f"{namespace}/{amc['metadata']['name']}"
    spec = amc["spec"]
    route_spec = spec["route"]
    route: dict[str, Any] = {
        "receiver": f"{prefix}/{route_spec['receiver']}",
        "group_by": list(route_spec.get("groupBy", [])),
        "matchers": [_namespace_matcher(namespace), *map(_matcher, route_spec.get("matchers", []))],
        "continue": True,
    }
    for ours, theirs in (("group_wait", "groupWait"), ("group_interval", "groupInterval"),
                         ("repeat_interval", "repeatInterval")):  # fmt: skip
        if theirs in route_spec:
            route[ours] = route_spec[theirs]
    route.update(group_timers or {})
    receivers: list[dict[str, Any]] = [{"name": "null"}]
    for receiver in spec["receivers"]:
        converted: dict[str, Any] = {"name": f"{prefix}/{receiver['name']}"}
        if "pagerdutyConfigs" in receiver:
            converted["pagerduty_configs"] = [_pagerduty(c, secrets) for c in receiver["pagerdutyConfigs"]]
        receivers.append(converted)
    inhibit = [
        {
            "source_matchers": [_namespace_matcher(namespace), *map(_matcher, rule["sourceMatch"])],
            "target_matchers": [_namespace_matcher(namespace), *map(_matcher, rule["targetMatch"])],
            "equal": list(rule.get("equal", [])),
        }
        for rule in spec.get("inhibitRules", [])
    ]
    return {
        "route": {
            "receiver": "null",
            "group_by": ["namespace"],
            "routes": [route, {"receiver": "null", "matchers": ['alertname="Watchdog"']}],
        },
        "receivers": receivers,
        "inhibit_rules": inhibit,
    }
