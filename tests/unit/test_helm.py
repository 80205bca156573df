"""The Helm chart: lint, render both modes, and check what the pod and the monitoring objects get.

Runs the real ``helm`` binary (on PATH or where .ci/setup.sh builds it); the rendered manifests
are parsed with yaml and checked against the exporter's own config parser, the alert rules file
and the dashboards the chart ships.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.rules import Thresholds, rules_document, thresholds_from_mapping
from exporter.config import KAFKA_PROPERTIES, SECRET_PROPERTIES, ConfigError, parse_config
from exporter.pipeline.session import LOCAL_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kafka-txn-exporter"
CI_VALUES = CHART / "ci"
STANDALONE_VALUES = CI_VALUES / "standalone-values.yaml"
SIDECAR_VALUES = CI_VALUES / "sidecar-values.yaml"
SIDECAR_EXAMPLE = REPO / "deploy" / "examples" / "sidecar"
RULES_TEMPLATE = CHART / "files" / "alerts" / "kafka-txn-exporter.rules.tmpl.yml"
DASHBOARDS_DIR = CHART / "files" / "dashboards"
CONFIG_EXAMPLE = REPO / "docs" / "config.example.yml"
HELM_CACHE_BIN = Path(os.environ.get("KTE_CACHE", Path.home() / ".cache" / "kafka-txn-exporter")) / "bin"
RELEASE = "kte"
CONTAINER = "kafka-txn-exporter"

Manifest = dict[str, Any]


def find_helm() -> str:
    found = shutil.which("helm") or shutil.which("helm", path=str(HELM_CACHE_BIN))
    if found is None:
        pytest.fail(
            f"helm not found on PATH nor in {HELM_CACHE_BIN}: run .ci/setup.sh (it builds Helm "
            "there) or install Helm 3; the chart tests cannot run without it",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="module")
def helm() -> str:
    return find_helm()


def run_helm(helm: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *map(str, args)], capture_output=True, text=True, check=False, timeout=120)


def render(
    helm: str,
    values: Sequence[Path] = (),
    sets: Sequence[str] = (),
    chart: Path = CHART,
) -> list[Manifest]:
    args: list[str | Path] = ["template", RELEASE, chart, "--namespace", "monitoring"]
    for v in values:
        args += ["--values", v]
    for s in sets:
        args += ["--set", s]
    result = run_helm(helm, *args)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def render_error(helm: str, *args: str | Path) -> str:
    result = run_helm(helm, "template", RELEASE, CHART, *args)
    assert result.returncode != 0, f"helm template accepted {args}"
    return result.stderr


def objects(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str) -> Manifest:
    found = objects(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def exporter_container(pod_spec: Manifest, name: str = CONTAINER) -> Manifest:
    containers = {c["name"]: c for c in pod_spec["containers"]}
    assert name in containers, f"no container {name!r} in {sorted(containers)}"
    container: Manifest = containers[name]
    return container


def rendered_config(docs: list[Manifest]) -> Manifest:
    configmap = next(
        d for d in objects(docs, "ConfigMap") if d["metadata"]["name"] == f"{RELEASE}-{CONTAINER}"
    )
    raw = yaml.safe_load(configmap["data"]["config.yml"])
    assert isinstance(raw, dict)
    return raw


def mounts_by_path(container: Manifest) -> dict[str, Manifest]:
    return {m["mountPath"]: m for m in container["volumeMounts"]}


def volumes_by_name(pod_spec: Manifest) -> dict[str, Manifest]:
    return {v["name"]: v for v in pod_spec["volumes"]}


@pytest.fixture(scope="module")
def standalone(helm: str) -> list[Manifest]:
    return render(helm, [STANDALONE_VALUES])


@pytest.fixture(scope="module")
def sidecar(helm: str) -> list[Manifest]:
    return render(helm, [SIDECAR_VALUES])


@pytest.fixture(scope="module")
def pod_spec(standalone: list[Manifest]) -> Manifest:
    spec: Manifest = one(standalone, "Deployment")["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def values() -> Manifest:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


# ---- lint


@pytest.mark.parametrize(
    "values_file", [None, STANDALONE_VALUES, SIDECAR_VALUES], ids=["defaults", "standalone", "sidecar"]
)
def test_helm_lint_passes(helm: str, values_file: Path | None) -> None:
    args: list[str | Path] = ["lint", "--strict", CHART]
    if values_file is not None:
        args += ["--values", values_file]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_render_a_standalone_exporter(helm: str) -> None:
    docs = render(helm)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "Service", "ServiceAccount"]


# ---- the pod


def test_standalone_runs_one_replica_with_the_config_file(
    standalone: list[Manifest], pod_spec: Manifest
) -> None:
    deployment = one(standalone, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    container = exporter_container(pod_spec)
    assert container["args"] == ["--config.file", "/etc/kafka-txn-exporter/config.yml"]
    config_mount = mounts_by_path(container)["/etc/kafka-txn-exporter"]
    assert config_mount["readOnly"] is True
    volume = volumes_by_name(pod_spec)[config_mount["name"]]
    assert volume["configMap"]["name"] == f"{RELEASE}-{CONTAINER}"
    assert pod_spec["automountServiceAccountToken"] is False


def test_probes_use_health_paths_on_the_named_metrics_port(pod_spec: Manifest, values: Manifest) -> None:
    container = exporter_container(pod_spec)
    assert container["ports"] == [{"name": "metrics", "containerPort": values["port"], "protocol": "TCP"}]
    assert values["port"] == 9851
    expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics", "scheme": "HTTP"}
    startup = container["startupProbe"]
    # The Spark driver needs 10-20 s; the startup probe must allow several times that.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


def test_service_exposes_the_named_metrics_port(standalone: list[Manifest]) -> None:
    service = one(standalone, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9851, "targetPort": "metrics", "protocol": "TCP"}
    ]
    deployment = one(standalone, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_security_context_is_locked_down(pod_spec: Manifest) -> None:
    sc = exporter_container(pod_spec)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 10001
    assert sc["runAsGroup"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    pod_sc = pod_spec["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["fsGroup"] == 10001
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_scratch_directories_are_emptydirs(standalone: list[Manifest], pod_spec: Manifest) -> None:
    container = exporter_container(pod_spec)
    volumes = volumes_by_name(pod_spec)
    mounts = mounts_by_path(container)
    spark_local_dir = rendered_config(standalone)["spark"]["local_dir"]
    for path in ("/tmp", "/home/exporter", spark_local_dir):
        assert path in mounts, f"{path} is not mounted"
        assert "emptyDir" in volumes[mounts[path]["name"]], f"{path} is not an emptyDir"
        assert not mounts[path].get("readOnly", False)


def test_resources_are_sized_for_the_spark_driver(pod_spec: Manifest) -> None:
    resources = exporter_container(pod_spec)["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]


def test_secrets_are_mounted_read_only_where_kafka_files_point(
    standalone: list[Manifest], pod_spec: Manifest
) -> None:
    container = exporter_container(pod_spec)
    volumes = volumes_by_name(pod_spec)
    secret_mounts = {m["mountPath"]: m for m in container["volumeMounts"] if "secret" in volumes[m["name"]]}
    files = [
        path
        for cluster in rendered_config(standalone)["clusters"]
        for path in (cluster.get("kafka_files") or {}).values()
    ]
    assert files, "the standalone test values should wire at least one kafka_files path"
    for file_path in files:
        mount_path = str(Path(file_path).parent)
        assert mount_path in secret_mounts, f"{file_path}: no Secret mounted at {mount_path}"
        mount = secret_mounts[mount_path]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        items = secret.get("items")
        if items:
            assert Path(file_path).name in {i["path"] for i in items}
    # Nothing in the rendered objects carries a secret value: no Secret objects at all.
    assert not objects(standalone, "Secret")


# ---- the config file


def validate_with_fake_secrets(raw: Manifest, tmp_path: Path) -> None:
    """Run the exporter's parser on the rendered config, with the mounted files faked."""
    raw = json.loads(json.dumps(raw))
    for cluster in raw["clusters"]:
        files = cluster.get("kafka_files") or {}
        for prop, path in files.items():
            fake = tmp_path / path.lstrip("/")
            fake.parent.mkdir(parents=True, exist_ok=True)
            fake.write_text("not-a-real-secret\n")
            files[prop] = str(fake)
    try:
        parse_config(raw, env={}, base_dir=tmp_path)
    except ConfigError as e:  # pragma: no cover - shows every problem on failure
        pytest.fail(f"the rendered config is invalid:\n{e}")


@pytest.mark.parametrize("mode", ["standalone", "sidecar"])
def test_rendered_config_is_valid_for_the_exporter(
    mode: str, standalone: list[Manifest], sidecar: list[Manifest], tmp_path: Path
) -> None:
    docs = standalone if mode == "standalone" else sidecar
    validate_with_fake_secrets(rendered_config(docs), tmp_path)


def test_default_values_render_a_valid_config(helm: str, tmp_path: Path) -> None:
    validate_with_fake_secrets(rendered_config(render(helm)), tmp_path)


def test_config_listens_on_the_container_port(standalone: list[Manifest], sidecar: list[Manifest]) -> None:
    assert rendered_config(standalone)["web"]["listen_address"] == ":9851"
    assert rendered_config(sidecar)["web"]["listen_address"] == ":9852"


def test_config_checksum_rolls_the_pod(helm: str, pod_spec: Manifest, standalone: list[Manifest]) -> None:
    def checksum(docs: list[Manifest]) -> str:
        annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        value = annotations["checksum/kafka-txn-exporter-config"]
        assert isinstance(value, str)
        return value

    before = checksum(standalone)
    assert len(before) == 64
    assert checksum(render(helm, [STANDALONE_VALUES])) == before
    assert checksum(render(helm, [STANDALONE_VALUES], ["config.log.level=warning"])) != before


def test_schema_config_keys_match_the_exporter(values: Manifest) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    config_schema = schema["properties"]["config"]["properties"]
    example = yaml.safe_load(CONFIG_EXAMPLE.read_text())
    # cluster_label is a top-level key of the exporter (Config.cluster_label) that the example
    # may leave out; test_rendered_config_is_valid_for_the_exporter parses it.
    assert set(config_schema) - {"cluster_label"} == set(example) - {"cluster_label"}
    for section in ("web", "log", "spark", "pipeline"):
        assert set(config_schema[section]["properties"]) == set(example[section]), section
    cluster_schema = config_schema["clusters"]["items"]
    assert set(cluster_schema["properties"]) == set(example["clusters"][0])
    for key in ("kafka", "kafka_files"):
        allowed = cluster_schema["properties"][key]["properties"]
        assert set(allowed) == KAFKA_PROPERTIES, key


# ---- Prometheus Operator, plain Prometheus, Grafana


FULLNAME = f"{RELEASE}-kafka-txn-exporter"


def chart_thresholds(raw: dict[str, Any] | None = None) -> Thresholds:
    """What the chart fills in: the release namespace, its Service name as the job."""
    return thresholds_from_mapping(
        {"exporter_namespace": "monitoring", "exporter_job_regex": FULLNAME, **(raw or {})}
    )


def test_rule_template_exists() -> None:
    assert RULES_TEMPLATE.is_file(), "the alert rules generator writes it (make alerts)"


def test_prometheus_rule_is_the_generated_rules_for_the_defaults(standalone: list[Manifest]) -> None:
    rule = one(standalone, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == rules_document(chart_thresholds())["groups"]


def test_values_thresholds_are_the_python_defaults(values: Manifest) -> None:
    defaults = Thresholds()
    chart = values["rules"]["thresholds"]
    for name, value in chart.items():
        expected = "" if name == "exporter_job_regex" else getattr(defaults, name)
        assert value == expected, name
    assert values["rules"]["runbookUrl"] == defaults.runbook_url
    assert values["rules"]["disabled"] == dict(defaults.disabled)
    assert values["config"]["cluster_label"] == defaults.cluster_label


TUNED = {
    "cluster_label": "kafka_name",
    "runbook_url": "https://wiki.example.com/rb/",
    "disabled": {"KafkaTransactionTwoPhaseCommitOpenTimeHigh": False, "KafkaTransactionsLate": True},
    "additional_rule_labels": {"team": "kafka-platform"},
    "additional_rule_annotations": {"dashboard": "https://grafana.example.com/d/kte-overview"},
    "hanging_for": "1m",
    "coordinator_open_time_seconds": 3660,
    "lso_lag_min_offsets": 2000000,
}
TUNED_SETS = [
    "prometheusRule.enabled=true",
    "alertmanagerConfig.enabled=true",
    "alertmanagerConfig.pagerduty.routingKeySecret.name=pd",
    "dashboards.enabled=true",
    "config.cluster_label=kafka_name",
    "rules.runbookUrl=https://wiki.example.com/rb/",
    "rules.disabled.KafkaTransactionTwoPhaseCommitOpenTimeHigh=false",
    "rules.disabled.KafkaTransactionsLate=true",
    "rules.additionalRuleLabels.team=kafka-platform",
    "rules.additionalRuleAnnotations.dashboard=https://grafana.example.com/d/kte-overview",
    "rules.thresholds.hanging_for=1m",
    "rules.thresholds.coordinator_open_time_seconds=3660",
    "rules.thresholds.lso_lag_min_offsets=2000000",
]


def test_tuned_values_render_the_same_rules_as_the_thresholds_file(helm: str) -> None:
    docs = render(helm, sets=TUNED_SETS)
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    assert groups == rules_document(chart_thresholds(TUNED))["groups"]
    text = yaml.safe_dump(groups)
    assert "> 2000000" in text  # an integer, not 2e+06
    names = {r["alert"] for g in groups for r in g["rules"]}
    assert "KafkaTransactionsLate" not in names
    assert "KafkaTransactionTwoPhaseCommitOpenTimeHigh" in names
    amc = one(docs, "AlertmanagerConfig")["spec"]
    matchers = {m["name"]: m for m in amc["route"]["matchers"]}
    assert set(matchers["alertname"]["value"].split("|")) == names
    assert amc["route"]["groupBy"][0] == "kafka_name"
    dashboards = [cm for cm in objects(docs, "ConfigMap") if "grafana_dashboard" in cm["metadata"]["labels"]]
    assert dashboards
    for cm in dashboards:
        (text,) = cm["data"].values()
        assert "kafka_cluster" not in text
        assert 'kafka_name=~\\"$kafka_name\\"' in text


def test_keep_firing_for_0s_leaves_the_field_out_of_the_prometheus_rule(helm: str) -> None:
    """For a Prometheus older than 2.42, which rejects the field: as alerts.generate does."""
    docs = render(helm, sets=["prometheusRule.enabled=true", "rules.thresholds.keep_firing_for=0s"])
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    assert groups == rules_document(chart_thresholds({"keep_firing_for": "0s"}))["groups"]
    assert all("keep_firing_for" not in r for g in groups for r in g["rules"])


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["rules.thresholds.hanging_for=5 minutes"], ["/rules/thresholds/hanging_for"]),
        (["rules.thresholds.hanging_fro=5m"], ["hanging_fro"]),
        (["rules.thresholds.lso_lag_min_offsets=-1"], ["/rules/thresholds/lso_lag_min_offsets"]),
        (["rules.disabled.KafkaNoSuchAlert=true"], ["KafkaNoSuchAlert"]),
        (["config.cluster_label=kafka-cluster"], ["/config/cluster_label"]),
        (["serviceMonitor.scheme=ftp"], ["/serviceMonitor/scheme"]),
    ],
    ids=["duration", "unknown-threshold", "negative", "unknown-alert", "label-name", "scheme"],
)
def test_schema_rejects_bad_rule_values(helm: str, sets: list[str], expected: list[str]) -> None:
    args: list[str | Path] = ["--set", "prometheusRule.enabled=true"]
    for s in sets:
        args += ["--set", s]
    stderr = render_error(helm, *args)
    for text in expected:
        assert text in stderr, f"{text!r} not in:\n{stderr}"


def test_every_alert_keeps_the_namespace_the_operator_routes_on(standalone: list[Manifest]) -> None:
    for group in one(standalone, "PrometheusRule")["spec"]["groups"]:
        for rule in group["rules"]:
            assert "by (namespace," in rule["expr"] or 'namespace="monitoring"' in rule["expr"], rule
    down = next(
        r
        for g in one(standalone, "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
        if r["alert"] == "KafkaTxnExporterDown"
    )
    # Even "no exporter series at all" carries the namespace, so the namespaced route sees it.
    assert 'absent(kafka_txn_exporter_up{namespace="monitoring"})' in down["expr"]
    assert f'job=~"{FULLNAME}"' in down["expr"]


def test_alertmanager_config_routes_the_chart_alerts_to_pagerduty_by_secret(
    standalone: list[Manifest],
) -> None:
    amc = one(standalone, "AlertmanagerConfig")
    receiver = amc["spec"]["receivers"][0]["pagerdutyConfigs"][0]
    assert receiver["routingKey"] == {"name": "pagerduty-routing-key", "key": "routing-key"}
    alert_names = {
        rule["alert"]
        for group in one(standalone, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    }
    matchers = {m["name"]: m for m in amc["spec"]["route"]["matchers"]}
    assert matchers["alertname"]["matchType"] == "=~"
    assert set(matchers["alertname"]["value"].split("|")) == alert_names
    # Critical alerts page; warnings are meant for tickets (alerts/alertmanager.example.yml).
    assert matchers["severity"] == {"name": "severity", "matchType": "=", "value": "critical"}
    assert amc["spec"]["route"]["groupBy"] == ["kafka_cluster", "alertname", "topic", "partition", "group"]
    assert "namespace" not in matchers, "the Operator adds the namespace matcher itself"
    inhibit = amc["spec"]["inhibitRules"]
    for rule in inhibit:
        targets = " ".join(m["value"] for m in rule["targetMatch"])
        assert "KafkaTxnExporterDown" not in targets
    fallback = [r for r in inhibit if {"name": "topic", "value": ""} in r["sourceMatch"]]
    assert fallback and all("broker" in r["equal"] for r in fallback)


def dashboard_files() -> list[Path]:
    files = sorted(DASHBOARDS_DIR.glob("*.json"))
    if not files:
        pytest.fail(
            f"no dashboards in {DASHBOARDS_DIR.relative_to(REPO)}: the dashboards generator "
            "writes them (make dashboards)",
            pytrace=False,
        )
    return files


def test_a_dashboard_configmap_per_json_file(helm: str, standalone: list[Manifest]) -> None:
    dashboards = {
        key: json.loads(value)
        for cm in objects(standalone, "ConfigMap")
        if cm["metadata"]["labels"].get("grafana_dashboard") == "1"
        for key, value in cm["data"].items()
    }
    files = dashboard_files()
    assert sorted(dashboards) == [f.name for f in files]
    for f in files:
        assert dashboards[f.name] == json.loads(f.read_text()), f.name
    relabelled = render(
        helm,
        [STANDALONE_VALUES],
        ["dashboards.label=grafana_dashboard_kafka", "dashboards.labelValue=yes"],
    )
    labelled = [
        cm
        for cm in objects(relabelled, "ConfigMap")
        if cm["metadata"]["labels"].get("grafana_dashboard_kafka") == "yes"
    ]
    assert len(labelled) == len(files)


def test_service_monitor_scrapes_the_metrics_port(standalone: list[Manifest]) -> None:
    monitor = one(standalone, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["scheme"] == "http"
    assert "tlsConfig" not in endpoint and "basicAuth" not in endpoint
    assert endpoint["path"] == rendered_config(standalone)["web"]["telemetry_path"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service_labels = one(standalone, "Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()


def test_scrape_annotations(standalone: list[Manifest], sidecar: list[Manifest]) -> None:
    expected = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}
    pod = one(standalone, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert expected.items() <= pod.items() and pod["prometheus.io/port"] == "9851"
    service = one(sidecar, "Service")["metadata"]["annotations"]
    assert expected.items() <= service.items() and service["prometheus.io/port"] == "9852"


def test_tls_and_basic_auth_reach_the_pod_probes_and_service_monitor(helm: str) -> None:
    docs = render(
        helm,
        sets=[
            "serviceMonitor.enabled=true",
            "webConfig.secretName=kte-web",
            "webConfig.tlsSecretName=kte-web-tls",
            "webConfig.tls=true",
            "serviceMonitor.tlsConfig.serverName=kte",
            "serviceMonitor.tlsConfig.ca.secret.name=kte-web-tls",
            "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
            "serviceMonitor.basicAuth.username.name=kte-scrape",
            "serviceMonitor.basicAuth.username.key=username",
            "serviceMonitor.basicAuth.password.name=kte-scrape",
            "serviceMonitor.basicAuth.password.key=password",
        ],
    )
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": "kte",
        "ca": {"secret": {"name": "kte-web-tls", "key": "ca.crt"}},
    }
    assert endpoint["basicAuth"]["password"] == {"name": "kte-scrape", "key": "password"}
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = exporter_container(spec)
    args = container["args"]
    assert (
        args[args.index("--web.config.file") + 1] == "/var/run/secrets/kafka-txn-exporter/web/web-config.yml"
    )
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
    mounts = mounts_by_path(container)
    assert mounts["/var/run/secrets/kafka-txn-exporter/web"]["readOnly"] is True
    assert mounts["/var/run/secrets/kafka-txn-exporter/web-tls"]["readOnly"] is True
    volumes = volumes_by_name(spec)
    assert volumes["kte-web-config"]["secret"]["secretName"] == "kte-web"
    assert volumes["kte-web-tls"]["secret"]["secretName"] == "kte-web-tls"


def test_network_policy_admits_only_the_given_peers_to_the_metrics_port(helm: str) -> None:
    peer = (
        "networkPolicy.ingressFrom[0].namespaceSelector.matchLabels."
        "kubernetes\\.io/metadata\\.name=monitoring"
    )
    docs = render(helm, sets=["networkPolicy.enabled=true", peer])
    policy = one(docs, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert "ingressFrom" in render_error(helm, "--set", "networkPolicy.enabled=true")


def test_optional_objects_are_off_by_default(helm: str) -> None:
    docs = render(helm)
    assert not objects(docs, "NetworkPolicy")
    for kind in ("ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"):
        assert not objects(docs, kind)
    assert not [cm for cm in objects(docs, "ConfigMap") if "grafana_dashboard" in cm["metadata"]["labels"]]
    pod = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "prometheus.io/scrape" not in pod


# ---- sidecar mode


def test_sidecar_mode_renders_no_workload(sidecar: list[Manifest]) -> None:
    assert not objects(sidecar, "Deployment")
    assert not objects(sidecar, "ServiceAccount")
    assert {d["kind"] for d in sidecar} == {"ConfigMap", "Service", "ServiceMonitor"}
    service = one(sidecar, "Service")
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "kafka",
        "app.kubernetes.io/instance": "broker",
    }
    # By number: the parent's own containers may name a port "metrics" too.
    assert service["spec"]["ports"][0]["name"] == "metrics"
    assert service["spec"]["ports"][0]["targetPort"] == 9852


@pytest.fixture(scope="module")
def example_chart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sidecar example with this chart unpacked in charts/, as `helm dependency` would."""
    root = tmp_path_factory.mktemp("example") / "sidecar"
    shutil.copytree(SIDECAR_EXAMPLE, root, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    shutil.copytree(CHART, root / "charts" / CHART.name)
    yield root


def test_sidecar_example_includes_the_same_container(helm: str, example_chart: Path, tmp_path: Path) -> None:
    example = render(helm, chart=example_chart)
    parent = one(example, "Deployment")
    parent_pod = parent["spec"]["template"]
    assert [c["name"] for c in parent_pod["spec"]["containers"]] == ["app", CONTAINER]

    # The same exporter values, rendered standalone (readiness stays off in sidecar mode).
    exporter_values = yaml.safe_load((SIDECAR_EXAMPLE / "values.yaml").read_text())[CHART.name]
    exporter_values["mode"] = "standalone"
    exporter_values["readinessProbe"] = {"enabled": False}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(exporter_values))
    standalone = render(helm, [values_file])
    standalone_pod = one(standalone, "Deployment")["spec"]["template"]

    assert exporter_container(parent_pod["spec"]) == exporter_container(standalone_pod["spec"])
    assert parent_pod["spec"]["volumes"] == standalone_pod["spec"]["volumes"]
    key = "checksum/kafka-txn-exporter-config"
    assert parent_pod["metadata"]["annotations"][key] == standalone_pod["metadata"]["annotations"][key]
    assert rendered_config(example) == rendered_config(standalone)
    assert "readinessProbe" not in exporter_container(parent_pod["spec"])


def test_sidecar_example_lints(helm: str, example_chart: Path) -> None:
    result = run_helm(helm, "lint", "--strict", example_chart)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the state directory (config state_dir: the pipeline memory across restarts)

STATE_DIR = "/var/lib/kafka-txn-exporter/state"
HISTORY_CLAIM = f"{FULLNAME}-history"


def state_volume(docs: list[Manifest]) -> tuple[Manifest, Manifest]:
    """The mount at the config's state_dir in the exporter container, and its volume."""
    state_dir = rendered_config(docs)["state_dir"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    mounts = mounts_by_path(exporter_container(pod))
    assert state_dir in mounts, f"nothing mounted at state_dir {state_dir}: {sorted(mounts)}"
    return mounts[state_dir], volumes_by_name(pod)[mounts[state_dir]["name"]]


def test_state_dir_defaults_to_an_emptydir_mounted_where_the_config_points(helm: str, tmp_path: Path) -> None:
    docs = render(helm)
    assert rendered_config(docs)["state_dir"] == STATE_DIR
    mount, volume = state_volume(docs)
    assert volume["emptyDir"] == {"sizeLimit": "16Mi"}
    assert not mount.get("readOnly", False) and "subPath" not in mount
    validate_with_fake_secrets(rendered_config(docs), tmp_path)


def test_state_dir_is_a_writable_mount_on_the_read_only_root(
    standalone: list[Manifest], pod_spec: Manifest
) -> None:
    assert exporter_container(pod_spec)["securityContext"]["readOnlyRootFilesystem"] is True
    mount, volume = state_volume(standalone)
    assert "emptyDir" in volume
    assert not mount.get("readOnly", False)


def test_state_dir_path_moves_the_mount_and_the_config_together(helm: str) -> None:
    docs = render(helm, sets=["stateDir.path=/state", "stateDir.sizeLimit=", "stateDir.medium=Memory"])
    assert rendered_config(docs)["state_dir"] == "/state"
    _, volume = state_volume(docs)
    assert volume["emptyDir"] == {"medium": "Memory"}


def test_state_dir_persistence_mounts_the_existing_claim(helm: str, tmp_path: Path) -> None:
    docs = render(
        helm,
        sets=["stateDir.persistence.enabled=true", "stateDir.persistence.existingClaim=kte-state"],
    )
    mount, volume = state_volume(docs)
    assert volume == {"name": "kte-state", "persistentVolumeClaim": {"claimName": "kte-state"}}
    assert "subPath" not in mount
    # The claim is the user's: the chart creates none for the state.
    assert not objects(docs, "PersistentVolumeClaim")
    validate_with_fake_secrets(rendered_config(docs), tmp_path)


def test_state_dir_on_the_history_claim_reuses_its_volume_with_a_sub_path(helm: str) -> None:
    docs = render(
        helm,
        sets=[
            "history.enabled=true",
            "stateDir.persistence.enabled=true",
            f"stateDir.persistence.existingClaim={HISTORY_CLAIM}",
            "stateDir.persistence.subPath=state",
        ],
    )
    mount, volume = state_volume(docs)
    assert mount == {"name": "kte-history", "mountPath": STATE_DIR, "subPath": "state"}
    assert volume["persistentVolumeClaim"] == {"claimName": HISTORY_CLAIM}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [HISTORY_CLAIM], "one volume for the one claim"
    assert [c["metadata"]["name"] for c in objects(docs, "PersistentVolumeClaim")] == [HISTORY_CLAIM]


def test_state_dir_off_renders_no_state_dir(helm: str, tmp_path: Path) -> None:
    docs = render(helm, sets=["stateDir.enabled=false"])
    assert "state_dir" not in rendered_config(docs)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert STATE_DIR not in mounts_by_path(exporter_container(pod))
    assert "kte-state" not in volumes_by_name(pod)
    validate_with_fake_secrets(rendered_config(docs), tmp_path)


def test_state_dir_off_accepts_a_state_dir_on_an_extra_volume(helm: str) -> None:
    docs = render(
        helm,
        sets=[
            "stateDir.enabled=false",
            "config.state_dir=/data/state",
            "extraVolumes[0].name=data",
            "extraVolumes[0].persistentVolumeClaim.claimName=data",
            "extraVolumeMounts[0].name=data",
            "extraVolumeMounts[0].mountPath=/data",
        ],
    )
    assert rendered_config(docs)["state_dir"] == "/data/state"


def test_sidecar_container_gets_the_state_volume_where_the_config_points(
    helm: str, example_chart: Path, sidecar: list[Manifest]
) -> None:
    assert rendered_config(sidecar)["state_dir"] == STATE_DIR
    example = render(helm, chart=example_chart)
    parent_pod = one(example, "Deployment")["spec"]["template"]["spec"]
    mount = mounts_by_path(exporter_container(parent_pod))[rendered_config(example)["state_dir"]]
    assert "emptyDir" in volumes_by_name(parent_pod)[mount["name"]]


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["stateDir.persistence.enabled=true"], ["stateDir.persistence.existingClaim is required"]),
        (
            [
                "history.enabled=true",
                "stateDir.persistence.enabled=true",
                f"stateDir.persistence.existingClaim={HISTORY_CLAIM}",
            ],
            ["is the history claim", "stateDir.persistence.subPath"],
        ),
        (["config.state_dir=/elsewhere"], ["config.state_dir", "/elsewhere", "stateDir.path"]),
        (
            ["stateDir.enabled=false", "config.state_dir=/elsewhere"],
            ["config.state_dir", "/elsewhere", "not on a mounted volume"],
        ),
        (["stateDir.path=relative"], ["/stateDir/path"]),
    ],
    ids=["claim-missing", "history-claim-root", "config-elsewhere", "off-unmounted", "relative-path"],
)
def test_state_dir_values_that_would_crash_the_exporter_fail_with_a_message(
    helm: str, sets: list[str], expected: list[str]
) -> None:
    args: list[str | Path] = []
    for s in sets:
        args += ["--set", s]
    stderr = render_error(helm, *args)
    for text in expected:
        assert text in stderr, f"{text!r} not in:\n{stderr}"


# ---- rejected values


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["mode=bogus"], ["/mode", "standalone", "sidecar"]),
        (["port=70000"], ["/port", "maximum"]),
        (["service.port=0"], ["/service/port", "minimum"]),
        (["config.clusters[0].name=only-a-name"], ["/config/clusters/0", "bootstrap_servers"]),
        (
            ["config.clusters[0].name=a", "config.clusters[0].bootstrap_servers=no-port"],
            ["/config/clusters/0/bootstrap_servers"],
        ),
        (["config.log.level=verbose"], ["/config/log/level"]),
        (
            [
                "config.clusters[0].name=a",
                "config.clusters[0].bootstrap_servers=k:9092",
                "config.clusters[0].kafka.bogus\\.property=1",
            ],
            ["/config/clusters/0/kafka", "bogus.property"],
        ),
        (["resources.requests.cpu=lots"], ["/resources/requests/cpu"]),
        (["scrapeAnnotations.target=node"], ["/scrapeAnnotations/target"]),
        (["unknownTopLevel=1"], ["unknownTopLevel"]),
    ],
    ids=[
        "mode",
        "port",
        "service-port",
        "no-bootstrap",
        "bad-bootstrap",
        "log-level",
        "kafka-property",
        "cpu",
        "scrape-target",
        "unknown-key",
    ],
)
def test_schema_rejects_bad_values(helm: str, sets: list[str], expected: list[str]) -> None:
    args: list[str | Path] = []
    for s in sets:
        args += ["--set", s]
    stderr = render_error(helm, *args)
    assert "schema" in stderr
    for text in expected:
        assert text in stderr, f"{text!r} not in:\n{stderr}"


SECRET_KAFKA_PROPERTIES = sorted(SECRET_PROPERTIES & KAFKA_PROPERTIES)


@pytest.mark.parametrize("prop", SECRET_KAFKA_PROPERTIES)
def test_literal_secrets_in_values_are_refused(helm: str, prop: str) -> None:
    key = prop.replace(".", "\\.")
    stderr = render_error(
        helm,
        "--set",
        "config.clusters[0].name=a",
        "--set",
        "config.clusters[0].bootstrap_servers=k:9092",
        "--set",
        f"config.clusters[0].kafka.{key}=hunter2",
    )
    assert f"config.clusters[0].kafka.{prop}" in stderr
    assert "kafkaSecrets" in stderr


def test_env_references_for_secrets_are_accepted(helm: str) -> None:
    docs = render(
        helm,
        sets=[
            "config.clusters[0].name=a",
            "config.clusters[0].bootstrap_servers=k:9092",
            "config.clusters[0].kafka.sasl\\.password=${KAFKA_PASSWORD}",
        ],
    )
    assert rendered_config(docs)["clusters"][0]["kafka"]["sasl.password"] == "${KAFKA_PASSWORD}"


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            ["config.clusters[0].kafka_files.sasl\\.password=/etc/elsewhere/password"],
            ["config.clusters[0].kafka_files.sasl.password", "/etc/elsewhere/password", "not under"],
        ),
        (["config.web.listen_address=:9999"], ["config.web.listen_address", "9851"]),
        (["mode=sidecar"], ["sidecar.podSelector"]),
        (
            ["mode=sidecar", "service.enabled=false", "serviceMonitor.enabled=true"],
            ["serviceMonitor.enabled needs service.enabled"],
        ),
        (["alertmanagerConfig.enabled=true"], ["routingKeySecret.name"]),
    ],
)
def test_inconsistent_values_fail_with_a_message(helm: str, sets: list[str], expected: list[str]) -> None:
    args: list[str | Path] = []
    for s in ["config.clusters[0].name=a", "config.clusters[0].bootstrap_servers=k:9092", *sets]:
        args += ["--set", s]
    stderr = render_error(helm, *args)
    for text in expected:
        assert text in stderr, f"{text!r} not in:\n{stderr}"


# ---- documentation of the values


def value_paths(tree: Manifest, prefix: str = "") -> Iterator[str]:
    """Leaf paths of values.yaml; maps whose keys are user data (spark.conf) count as leaves."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path != "config.spark.conf":
            yield from value_paths(value, f"{path}.")
        else:
            yield path


def test_chart_readme_lists_every_value(values: Manifest) -> None:
    readme = (CHART / "README.md").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = [p for p in value_paths(values) if f"`{p}`" not in readme]
    missing += [p for p in schema["properties"] if f"`{p}`" not in readme and f"`{p}." not in readme]
    assert not missing, f"values not documented in {CHART.name}/README.md: {missing}"


def test_values_hold_no_secret(values: Manifest) -> None:
    for cluster in values["config"]["clusters"]:
        assert not set(cluster.get("kafka") or {}) & SECRET_PROPERTIES
    assert values["kafkaSecrets"] == []


def test_the_charts_connect_server_plans_like_the_embedded_driver(helm: str) -> None:
    """The shared Spark Connect server runs the same pipeline as an embedded driver: the
    settings that make a small cycle fast (interpreted, one shuffle partition, no adaptive
    re-planning, small memory pages) are the embedded driver's."""
    docs = render(helm, sets=["spark.mode=connect", "spark.connectServer.enabled=true"])
    [server] = [
        c
        for d in objects(docs, "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "spark-connect"
    ]
    args: list[str] = server["args"]
    conf = dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "--conf")
    for key in (
        "spark.sql.codegen.wholeStage",
        "spark.sql.codegen.factoryMode",
        "spark.sql.subexpressionElimination.enabled",
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.buffer.pageSize",
    ):
        assert conf.get(key) == LOCAL_DEFAULTS[key], key


# ---- a fleet: cluster files (config cluster_files)

FLEET_VALUES = REPO / "deploy" / "examples" / "fleet-values.yaml"
CLUSTER_FILES_PATH = "/etc/kafka-txn-exporter-clusters"


@pytest.fixture(scope="module")
def fleet(helm: str) -> list[Manifest]:
    return render(helm, [FLEET_VALUES])


def cluster_files_configmap(docs: list[Manifest]) -> Manifest:
    return next(d for d in objects(docs, "ConfigMap") if d["metadata"]["name"] == f"{FULLNAME}-clusters")


def test_fleet_example_lints(helm: str) -> None:
    result = run_helm(helm, "lint", "--strict", CHART, "--values", FLEET_VALUES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_fleet_example_is_one_deployment_watching_every_cluster_file(
    fleet: list[Manifest], tmp_path: Path
) -> None:
    from exporter.config.model import read_cluster_files

    deployment = one(fleet, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    config = rendered_config(fleet)
    assert config["cluster_files"] == CLUSTER_FILES_PATH
    assert "clusters" not in config or config["clusters"] == []
    pod = deployment["spec"]["template"]["spec"]
    mount = mounts_by_path(exporter_container(pod))[CLUSTER_FILES_PATH]
    assert mount["readOnly"] is True
    assert volumes_by_name(pod)[mount["name"]] == {
        "name": mount["name"],
        "configMap": {"name": f"{FULLNAME}-clusters"},
    }
    files = cluster_files_configmap(fleet)["data"]
    example = yaml.safe_load(FLEET_VALUES.read_text())["clusterFiles"]["files"]
    assert sorted(files) == sorted(f"{name}.yml" for name in example)

    # The exporter reads what the pod gets: the config, and the directory of cluster files
    # (their Secrets faked), every cluster named after its file.
    directory = tmp_path / CLUSTER_FILES_PATH.lstrip("/")
    directory.mkdir(parents=True)
    for name, text in files.items():
        raw = yaml.safe_load(text)
        for prop, path in (raw.get("kafka_files") or {}).items():
            fake = tmp_path / path.lstrip("/")
            fake.parent.mkdir(parents=True, exist_ok=True)
            fake.write_text("not-a-real-secret\n")
            raw["kafka_files"][prop] = str(fake)
        (directory / name).write_text(yaml.safe_dump(raw))
    parsed = parse_config({**config, "cluster_files": str(directory)}, env={}, base_dir=tmp_path)
    assert sorted(c.name for c in parsed.clusters) == sorted(example)
    assert {c.name: c.interval_ms for c in parsed.clusters}["staging"] == 60_000
    from exporter.config.keys import Reader

    reader = Reader(env={}, base_dir=tmp_path)
    assert len(read_cluster_files(reader, directory, "cluster_files")) == len(example)
    assert reader.problems == []


def test_fleet_example_is_sized_from_the_fleet_benchmark(fleet: list[Manifest]) -> None:
    """docs/operations.md ("Sizing") records the peak RSS of five clusters in one
    process; the example requests it with the chart's usual 1.3 x headroom."""
    resources = exporter_container(one(fleet, "Deployment")["spec"]["template"]["spec"])["resources"]
    operations = (REPO / "docs" / "operations.md").read_text()
    marker = "fleet sizing: peak RSS of five clusters "
    assert marker in operations, "docs/operations.md must record the fleet benchmark's peak RSS"
    peak_mib = float(operations.split(marker, 1)[1].split()[0])
    request = int(resources["requests"]["memory"].removesuffix("Mi"))
    limit = int(resources["limits"]["memory"].removesuffix("Mi"))
    assert request >= peak_mib * 1.3
    assert limit >= request


def test_cluster_files_change_rolls_the_pod(helm: str, fleet: list[Manifest]) -> None:
    key = "checksum/kafka-txn-exporter-config"
    before = one(fleet, "Deployment")["spec"]["template"]["metadata"]["annotations"][key]
    after = render(helm, [FLEET_VALUES], ["clusterFiles.files.staging.interval=2m"])
    assert one(after, "Deployment")["spec"]["template"]["metadata"]["annotations"][key] != before


def test_an_existing_configmap_of_cluster_files_is_mounted_instead(helm: str) -> None:
    docs = render(
        helm,
        sets=["config.clusters=null", "clusterFiles.existingConfigMap=my-fleet", "clusterFiles.path=/fleet"],
    )
    assert [d["metadata"]["name"] for d in objects(docs, "ConfigMap")] == [FULLNAME]
    assert rendered_config(docs)["cluster_files"] == "/fleet"
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    mount = mounts_by_path(exporter_container(pod))["/fleet"]
    assert volumes_by_name(pod)[mount["name"]]["configMap"] == {"name": "my-fleet"}


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            ["config.clusters=null"],
            "config.clusters is empty: give at least one cluster there or in clusterFiles",
        ),
        (
            ["clusterFiles.existingConfigMap=a", "clusterFiles.files.x.bootstrap_servers=h:1"],
            "clusterFiles: set files or existingConfigMap, not both",
        ),
        (
            [
                "clusterFiles.files.x.bootstrap_servers=h:1",
                "clusterFiles.files.x.kafka.sasl\\.password=hunter2",
            ],
            "clusterFiles.files.x.kafka.sasl.password: a secret must not be a literal in values",
        ),
        (
            ["clusterFiles.files.x.bootstrap_servers=h:1", "config.cluster_files=/elsewhere"],
            'config.cluster_files "/elsewhere" is not clusterFiles.path',
        ),
    ],
    ids=["no-cluster", "both", "literal-secret", "other-path"],
)
def test_cluster_files_values_that_would_fail_fail_with_a_message(
    helm: str, sets: list[str], expected: str
) -> None:
    args: list[str | Path] = []
    for s in sets:
        args += ["--set", s]
    assert expected in render_error(helm, *args)


def test_a_cluster_file_in_values_takes_the_keys_of_a_clusters_entry() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    entry = schema["config"]["properties"]["clusters"]["items"]
    cluster_file = schema["clusterFiles"]["properties"]["files"]["additionalProperties"]
    assert cluster_file == {**entry, "required": [r for r in entry["required"] if r != "name"]}


def test_the_exporter_container_tells_the_cli_where_its_last_cycle_is_answered(
    helm: str, pod_spec: Manifest
) -> None:
    """``kubectl exec`` into the container: find-hanging and list find the exporter there (the
    same container spec serves the sidecar mode)."""

    def url(container: Manifest) -> str:
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        return str(env["KAFKA_TXN_EXPORTER_URL"])

    assert url(exporter_container(pod_spec)) == "http://127.0.0.1:9851"
    tls = render(
        helm,
        sets=[
            "webConfig.secretName=kte-web",
            "webConfig.tlsSecretName=kte-web-tls",
            "webConfig.tls=true",
            "port=9900",
            "extraEnv[0].name=X",
            "extraEnv[0].value=y",
        ],
    )
    container = exporter_container(one(tls, "Deployment")["spec"]["template"]["spec"])
    assert url(container) == "https://127.0.0.1:9900"
    assert {"name": "X", "value": "y"} in container["env"]  # the chart's own beside the user's


def test_connect_mode_runs_the_thin_image(helm: str) -> None:
    """spark.mode connect: the exporter starts no JVM, so its container runs the Dockerfile's
    thin target (the Spark Connect client only), tagged as the full image plus -thin."""
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]

    def image(*sets: str) -> str:
        docs = render(helm, sets=sets)
        deployment = next(
            d for d in objects(docs, "Deployment") if d["metadata"]["name"] == f"{RELEASE}-{CONTAINER}"
        )
        found: str = exporter_container(deployment["spec"]["template"]["spec"])["image"]
        return found

    connect = ("spark.mode=connect", "spark.connectUrl=sc://spark-connect:15002")
    assert image() == f"kafka-txn-exporter:{app_version}"
    assert image(*connect) == f"kafka-txn-exporter:{app_version}-thin"
    registry = ("image.registry=registry.example.com/", "image.tag=1.2.3")
    assert image(*registry) == "registry.example.com/kafka-txn-exporter:1.2.3"
    assert image(*connect, *registry) == "registry.example.com/kafka-txn-exporter:1.2.3-thin"
    digest = "sha256:" + "a" * 64
    # The full image's digest is not the thin image's: only image.thin.digest pins it.
    assert image(*connect, f"image.digest={digest}") == f"kafka-txn-exporter:{app_version}-thin"
    assert (
        image(*connect, *registry, "image.thin.repository=kte-thin", f"image.thin.digest={digest}")
        == f"registry.example.com/kte-thin@{digest}"
    )
    assert image(*connect, "image.thin.tag=edge") == "kafka-txn-exporter:edge"
    # The chart's own Spark Connect server keeps the Apache Spark image.
    docs = render(helm, sets=["spark.mode=connect", "spark.connectServer.enabled=true"])
    images = {
        c["name"]: c["image"]
        for d in objects(docs, "Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images[CONTAINER] == f"kafka-txn-exporter:{app_version}-thin"
    assert images["spark-connect"].startswith("apache/spark:")
    assert "thin" in render_error(helm, "--set", "image.thin.digest=latest")
