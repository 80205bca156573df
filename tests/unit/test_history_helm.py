"""The chart's history section: the optional PersistentVolumeClaim, and the helpers that
put the history into the exporter's config and mount the claim (rendered through a probe
template added to a copy of the chart)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config.history import parse_history_section
from tests.unit.test_helm import CHART, find_helm

PROBE = """\
{{- $cfg := dict -}}
{{- include "kafka-txn-exporter.historyConfig" (dict "root" . "config" $cfg) -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: history-probe
data:
  config: {{ toYaml $cfg | quote }}
  mounts: {{ include "kafka-txn-exporter.historyVolumeMounts" . | quote }}
  volumes: {{ include "kafka-txn-exporter.historyVolumes" . | quote }}
"""


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("chart") / "kafka-txn-exporter"
    shutil.copytree(CHART, copy)
    (copy / "templates" / "zz-history-probe.yaml").write_text(PROBE)
    return copy


def render(chart: Path, *sets: str) -> dict[str, Any]:
    args = [find_helm(), "template", "kte", str(chart), "--namespace", "monitoring"]
    for s in sets:
        args += ["--set", s]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    probe = next(d for d in docs if d["metadata"]["name"] == "history-probe")["data"]
    return {
        "docs": docs,
        "config": yaml.safe_load(probe["config"]),
        "mounts": yaml.safe_load(probe["mounts"]) or [],
        "volumes": yaml.safe_load(probe["volumes"]) or [],
    }


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_history_is_off_by_default(chart: Path) -> None:
    out = render(chart)
    assert "PersistentVolumeClaim" not in kinds(out["docs"])
    assert out["config"] == {} and out["mounts"] == [] and out["volumes"] == []


def test_enabled_history_gets_a_claim_mounted_at_its_path_and_a_valid_config(chart: Path) -> None:
    out = render(chart, "history.enabled=true", "history.persistence.size=5Gi", "history.retention=14d")
    (claim,) = [d for d in out["docs"] if d["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "kte-kafka-txn-exporter-history"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert out["mounts"] == [{"name": "kte-history", "mountPath": "/var/lib/kafka-txn-exporter/history"}]
    assert out["volumes"] == [
        {"name": "kte-history", "persistentVolumeClaim": {"claimName": "kte-kafka-txn-exporter-history"}}
    ]
    history, problems = parse_history_section(out["config"]["history"])
    assert problems == [] and history is not None
    assert history.path == "/var/lib/kafka-txn-exporter/history"
    assert history.retention_ms == 14 * 86_400_000


def test_an_existing_claim_is_mounted_not_created(chart: Path) -> None:
    out = render(chart, "history.enabled=true", "history.persistence.existingClaim=kept")
    assert "PersistentVolumeClaim" not in kinds(out["docs"])
    assert out["volumes"][0]["persistentVolumeClaim"]["claimName"] == "kept"


def test_a_url_path_needs_no_claim(chart: Path) -> None:
    out = render(chart, "history.enabled=true", "history.path=s3a://bucket/kte")
    assert "PersistentVolumeClaim" not in kinds(out["docs"])
    assert out["mounts"] == [] and out["config"]["history"]["path"] == "s3a://bucket/kte"


def test_the_values_schema_refuses_a_bad_retention(chart: Path) -> None:
    result = subprocess.run(
        [find_helm(), "template", "kte", str(chart), "--set", "history.retention=forever"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0 and "retention" in result.stderr
