"""The Dockerfile agrees with the package and the Helm chart.

The Dockerfile is parsed here: stages, user, entrypoint, port, JRE, the thin target's Spark
Connect client, and the directories the images make writable, which must be exactly the chart's
emptyDir mounts. tests/image builds both targets with buildah and runs them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import DEFAULT_LISTEN_ADDRESS
from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CHART = REPO / "deploy" / "helm" / "kafka-txn-exporter"
HELM_CACHE_BIN = Path(os.environ.get("KTE_CACHE", Path.home() / ".cache" / "kafka-txn-exporter")) / "bin"
#: The image targets: the default (the last stage) and the Spark Connect client's.
TARGETS = ("runtime", "thin")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, continuation lines joined, comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = [p for p in args.split() if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), parts[0])
            stages.append(Stage(base=base, name=name, instructions=[]))
        elif not stages:
            if keyword == "ARG":
                key, _, default = args.partition("=")
                global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, args))
    return global_args, stages


def target(stages: list[Stage], name: str) -> Stage:
    """The image ``name`` as the instructions of its stage and of the stages it is built FROM
    (the image inherits their configuration), merged in order."""
    by_name = {stage.name: stage for stage in stages if stage.name}
    chain = [by_name[name]]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return Stage(chain[0].base, name, [i for stage in chain for i in stage.instructions])


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    return env


@pytest.fixture(scope="module")
def parsed() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def stages(parsed: tuple[dict[str, str], list[Stage]]) -> list[Stage]:
    return parsed[1]


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    return target(stages, "runtime")


@pytest.fixture(scope="module")
def thin(stages: list[Stage]) -> Stage:
    return target(stages, "thin")


@pytest.fixture(scope="module", params=TARGETS)
def image(request: pytest.FixtureRequest, stages: list[Stage]) -> Stage:
    return target(stages, request.param)


@pytest.fixture(scope="module")
def chart_pod() -> dict[str, Any]:
    helm = shutil.which("helm") or shutil.which("helm", path=str(HELM_CACHE_BIN))
    if helm is None:
        pytest.fail(f"helm not found on PATH nor in {HELM_CACHE_BIN}: run .ci/setup.sh", pytrace=False)
    result = subprocess.run(
        [helm, "template", "kte", str(CHART)], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    deployment = next(d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_every_stage_builds_on_the_python_image_argument_or_another_stage(
    parsed: tuple[dict[str, str], list[Stage]],
) -> None:
    """A base of one's own (docs/deploy.md: a debootstrap base) is a build argument, no edit."""
    global_args, stages = parsed
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", global_args["PYTHON_IMAGE"])
    names = {stage.name for stage in stages}
    for stage in stages:
        assert stage.base == global_args["PYTHON_IMAGE"] or stage.base in names, stage.base
    assert stages[-1].name == "runtime", "the default target (the last stage) is the full image"
    assert {"builder", "thin-builder", "common", *TARGETS} <= names


def test_the_runtime_installs_the_builders_wheels(stages: list[Stage], runtime: Stage) -> None:
    builder = target(stages, "builder")
    assert any("pip wheel" in run or "-m build" in run for run in builder.all("RUN"))
    # The runtime installs the wheel built in the builder stage.
    installs = [run for run in runtime.all("RUN") if "from=builder" in run]
    assert installs and "pip install" in installs[0]
    assert "kafka-txn-exporter" in installs[0]


def test_runtime_has_a_headless_jre_17(runtime: Stage) -> None:
    assert any("openjdk-17-jre-headless" in run for run in runtime.all("RUN"))
    assert env_of(runtime)["JAVA_HOME"].startswith("/usr/lib/jvm/")


def test_thin_has_the_spark_connect_client_and_no_jvm(
    parsed: tuple[dict[str, str], list[Stage]], stages: list[Stage], thin: Stage
) -> None:
    """pyspark-client in place of pyspark (whose wheel carries Spark's jars), no JRE, no class
    archive; the client is pinned no newer than the pyspark whose Connect server the tests run
    (a Connect client works with servers of its version and newer)."""
    global_args, _ = parsed
    builder = target(stages, "thin-builder")
    (install,) = [run for run in builder.all("RUN") if "pyspark-client==${PYSPARK_CLIENT_VERSION}" in run]
    assert '!= "pyspark"' in install, "pyspark itself is left out"
    assert "--no-deps" in install, "the project's own requirement of pyspark is not followed"
    client = tuple(int(p) for p in global_args["PYSPARK_CLIENT_VERSION"].split("."))
    server = tuple(int(p) for p in version("pyspark").split(".")[:3])
    assert client[0] == server[0] and client <= server, (client, server)
    everything = " ".join(i.args for i in thin.instructions)
    assert "openjdk" not in everything and "class-archive" not in everything
    assert "JAVA_HOME" not in env_of(thin) and CLASS_ARCHIVE_ENV not in env_of(thin)
    assert thin.all("COPY") == ["--from=thin-builder /opt/kafka-txn-exporter /opt/kafka-txn-exporter"]
    assert env_of(thin)["PATH"].startswith("/opt/kafka-txn-exporter/bin:")


def test_both_images_keep_a_healthcheck_on_healthz(image: Stage) -> None:
    check = image.last("HEALTHCHECK")
    assert "/healthz" in check and check.split()[-1] != "NONE"


def test_runs_as_the_charts_numeric_non_root_user(image: Stage, chart_pod: dict[str, Any]) -> None:
    user = image.last("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {user} must be a numeric non-root uid"
    container = chart_pod["containers"][0]
    assert int(uid) == container["securityContext"]["runAsUser"] == 10001
    if gid:
        assert int(gid) == container["securityContext"]["runAsGroup"]


def test_entrypoint_runs_the_daemon_with_the_charts_config_path(
    image: Stage, chart_pod: dict[str, Any]
) -> None:
    entrypoint = json.loads(image.last("ENTRYPOINT"))
    cmd = json.loads(image.last("CMD"))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["kafka-txn-exporter", "run"]
    assert entrypoint[0] in scripts
    assert cmd == ["--config.file", "/etc/kafka-txn-exporter/config.yml"]
    assert chart_pod["containers"][0]["args"] == cmd


def test_exposed_port_is_the_charts_and_the_exporters(image: Stage, chart_pod: dict[str, Any]) -> None:
    exposed = [int(p.split("/")[0]) for args in image.all("EXPOSE") for p in args.split()]
    (port,) = chart_pod["containers"][0]["ports"]
    assert exposed == [port["containerPort"]]
    assert exposed == [int(DEFAULT_LISTEN_ADDRESS.rpartition(":")[2])]


def writable_dirs(stage: Stage) -> set[str]:
    """Directories the image creates for its user (install -d -o ...), plus /tmp."""
    dirs = {"/tmp"}
    for run in stage.all("RUN"):
        for command in re.split(r";|&&", run):
            words = shlex.split(command)
            if words[:2] == ["install", "-d"] and "-o" in words:
                dirs.update(w for w in words if w.startswith("/"))
    return dirs


def test_writable_dirs_are_the_charts_emptydir_mounts(image: Stage, chart_pod: dict[str, Any]) -> None:
    volumes = {v["name"]: v for v in chart_pod["volumes"]}
    container = chart_pod["containers"][0]
    empty_dirs = {m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in volumes[m["name"]]}
    image_dirs = writable_dirs(image)
    assert image_dirs == empty_dirs
    env = env_of(image)
    assert env["HOME"] in empty_dirs
    assert env["SPARK_LOCAL_DIRS"] in empty_dirs
    assert image.last("WORKDIR") in empty_dirs


def test_dockerignore_keeps_the_package_sources(stages: list[Stage]) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the context is an allow-list"
    for builder in ("builder", "thin-builder"):
        copied = {w for args in target(stages, builder).all("COPY") for w in args.split()[:-1]}
        for needed in ("pyproject.toml", "exporter"):
            assert needed in copied
            assert f"!{needed}" in patterns or f"!{needed}/" in patterns


def test_the_image_writes_a_class_archive_and_points_the_driver_at_it(runtime: Stage) -> None:
    archive = env_of(runtime)[CLASS_ARCHIVE_ENV]
    writes = [
        shlex.split(command)
        for run in runtime.all("RUN")
        for command in re.split(r";|&&", run)
        if "class-archive" in command
    ]
    assert writes == [["kafka-txn-exporter", "class-archive", "--out", f"${{{CLASS_ARCHIVE_ENV}}}"]]
    assert archive.startswith("/usr/") and archive not in writable_dirs(runtime)
