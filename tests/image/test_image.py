"""The images, built from the Dockerfile and run as the chart runs them.

Built without Docker (``testbed.image``): a Debian base made with debootstrap from the host's
apt mirror, both targets of the Dockerfile built on it with ``buildah bud --format docker``,
run with podman on the host network against the test bed's broker:

* the full image (``runtime``): ``--help``, ``check-config``, and the daemon with the chart's
  config, as uid 10001 on a read-only root file system whose only writable directories are the
  chart's emptyDirs (tmpfs owned by the user): /readyz turns 200, /metrics (read from inside
  the container) shows the hanging transaction, SIGTERM stops it with exit 0; and the same
  image with a root-owned Spark directory (podman's default tmpfs, as the issue found it):
  /healthz says why Spark cannot start;
* the thin image (``thin``, ``spark.mode: connect``): no java, pyspark-client only; the daemon
  on the Spark Connect server the tests start finds the same hanging transaction.

The log shows the build steps, both images' sizes and build times, the finding read inside
each container and the daemons' memory. Skipped only where buildah cannot run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.broker import KafkaCluster, free_port
from testbed.image import Built, ImageError, build, make_base, podman_run_options
from tests.fixtures_kafka import HangingFactory
from tests.spark_connect_server import connect_server

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(5400)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kafka-txn-exporter"
HELM_CACHE_BIN = Path.home() / ".cache" / "kafka-txn-exporter" / "bin"
CONFIG_PATH = "/etc/kafka-txn-exporter/config.yml"
#: Bounds (a shared 2-core machine; none is a speed check).
READY_TIMEOUT_S = 420.0
FINDING_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
#: What the daemon must never log (the chart's JSON log): the command line's exit-4 message,
#: the import deadlock, a traceback of the exporter's own.
UNEXPECTED = re.compile(
    r'unexpected error|_DeadlockError|deadlock detected|"logger": "exporter[^"]*", "msg": [^\n]*"exc"'
)
HANGING_SERIES = "kafka_txn_hanging_transaction_info"

Say = Callable[[str], None]


def buildah_problem() -> str | None:
    """Why buildah cannot run here, or None."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (Debian package buildah; .ci/setup.sh installs it)"
    done = subprocess.run(["buildah", "info"], capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        return f"buildah cannot run here: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    return None


@pytest.fixture(scope="module")
def say(request: pytest.FixtureRequest) -> Say:
    """A line in the test run's output, also when the test passes (the CI log)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:
        if reporter is None or capture is None:
            print(f"[image] {line}")
            return
        with capture.global_and_fixture_disabled():  # past pytest's capture of fd 1
            reporter.ensure_newline()
            reporter.write_line(f"[image] {line}")
            reporter.flush()

    return write


@pytest.fixture(scope="module")
def images(say: Say) -> dict[str, Built]:
    problem = buildah_problem()
    if problem:
        pytest.skip(problem)
    for tool, package in (("podman", "podman"), ("debootstrap", "debootstrap")):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (Debian package {package}; .ci/setup.sh installs it)")
    started = time.monotonic()
    try:
        base = make_base(say)
        # Both at once (their heavy steps differ: the runtime's JVM warm-up, the thin one's
        # downloads); the thin build's lines are told once the runtime's are.
        thin_lines: list[str] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            thin = pool.submit(build, "thin", base, lambda line: thin_lines.append(f"thin: {line}"))
            built = {"runtime": build("runtime", base, lambda line: say(f"runtime: {line}"))}
            try:
                built["thin"] = thin.result()
            finally:
                for line in thin_lines:
                    say(line)
    except ImageError as e:
        pytest.fail(str(e), pytrace=False)
    say(f"base {base}: {base_size(base) / 1e6:.0f} MB")
    for b in built.values():
        how = "reused (same sources and base)" if b.reused else f"built in {b.seconds:.0f} s"
        say(f"image {b.tag} ({b.target}): {b.size_bytes / 1e6:.0f} MB, {how}")
    say(f"base and both images ready in {time.monotonic() - started:.0f} s")
    return built


def base_size(tag: str) -> int:
    done = podman("image", "inspect", tag)
    size: int = json.loads(done.stdout)[0]["Size"]
    return size


def podman(*args: str, timeout_s: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"podman {' '.join(args[:2])} ... exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def helm() -> str:
    found = shutil.which("helm") or shutil.which("helm", path=str(HELM_CACHE_BIN))
    if found is None:
        pytest.fail(f"helm not found on PATH nor in {HELM_CACHE_BIN}: run .ci/setup.sh", pytrace=False)
    return found


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as url:
        yield url


class Deployment:
    """What the chart gives the exporter's container: its config file, its emptyDir mounts,
    its user, its port."""

    def __init__(self, sets: list[str], set_json: list[str]) -> None:
        args = [helm(), "template", "kte", str(CHART)]
        for s in sets:
            args += ["--set", s]
        for s in set_json:
            args += ["--set-json", s]
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        configmap = next(d for d in docs if d["kind"] == "ConfigMap" and "config.yml" in d.get("data", {}))
        self.config_yaml: str = configmap["data"]["config.yml"]
        deployment = next(
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kte-kafka-txn-exporter"
        )
        pod = deployment["spec"]["template"]["spec"]
        container = next(c for c in pod["containers"] if c["name"] == "kafka-txn-exporter")
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.image: str = container["image"]
        self.port: int = container["ports"][0]["containerPort"]
        self.empty_dirs: dict[str, str | None] = {
            m["mountPath"]: volumes[m["name"]]["emptyDir"].get("sizeLimit")
            for m in container["volumeMounts"]
            if "emptyDir" in volumes[m["name"]]
        }
        security = container["securityContext"]
        self.user = f"{security['runAsUser']}:{security['runAsGroup']}"
        assert security["readOnlyRootFilesystem"] is True


def chart_deployment(port: int, bootstrap: str, topic: str, *sets: str) -> Deployment:
    cluster = {
        "name": "image",
        "bootstrap_servers": bootstrap,
        "interval": "5s",
        "request_timeout": "3s",
        "topics": {"allow": [topic]},
    }
    return Deployment(
        [f"port={port}", "config.pipeline.hanging_confirm_cycles=1", *sets],
        [f"config.clusters=[{json.dumps(cluster)}]"],
    )


def tmpfs_options(deployment: Deployment, *, root_owned: frozenset[str] = frozenset()) -> list[str]:
    """The chart's emptyDirs as tmpfs owned by the container's user (podman's U option), as a
    Kubernetes emptyDir is writable by the pod's user; those of ``root_owned`` as podman
    mounts a tmpfs without it: owned by root, with the image directory's mode (0770)."""
    options = []
    for path, size in sorted(deployment.empty_dirs.items()):
        mode = "1777" if path == "/tmp" else "0770"
        spec = f"{path}:rw,nosuid,nodev,mode={mode}"
        if size:
            spec += f",size={kubernetes_bytes(size)}"
        if path not in root_owned:
            spec += ",U"
        options.append(f"--tmpfs={spec}")
    return options


def kubernetes_bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", quantity)
    assert match, quantity
    return int(match.group(1)) * units.get(match.group(2) or "", 1)


@contextlib.contextmanager
def exporter_container(
    image: str, deployment: Deployment, work: Path, *, root_owned: frozenset[str] = frozenset()
) -> Iterator[str]:
    """The exporter's container as the chart runs it: the image's entrypoint and the chart's
    args, its user, a read-only root with only the emptyDirs writable, all capabilities
    dropped, no privilege escalation; on the host network. Removed when the block ends."""
    config = work / "config.yml"
    config.write_text(deployment.config_yaml)
    name = f"kte-image-{uuid.uuid4().hex[:10]}"
    podman(
        "run",
        "--detach",
        f"--name={name}",
        *podman_run_options(),
        "--network=host",
        f"--user={deployment.user}",
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        *tmpfs_options(deployment, root_owned=root_owned),
        f"--volume={config}:{CONFIG_PATH}:ro",
        # The image's HEALTHCHECK, on the chart's port (podman healthcheck run).
        f"--env=KAFKA_TXN_EXPORTER_HEALTH_URL=http://127.0.0.1:{deployment.port}/healthz",
        image,
    )
    try:
        yield name
    finally:
        podman("rm", "--force", "--time=5", name, check=False)


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def logs(name: str) -> str:
    done = podman("logs", name, check=False)
    return done.stdout + done.stderr


def wait_for(name: str, url: str, status: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        got, body = http_get(url)
        if got == status:
            return body
        state = podman("inspect", "--format={{.State.Status}}", name, check=False).stdout.strip()
        assert state == "running", f"the container is {state}:\n{logs(name)[-4000:]}"
        assert time.monotonic() < deadline, (
            f"no {status} from {url} in {timeout_s:.0f} s:\n{logs(name)[-4000:]}"
        )
        time.sleep(1)


def hanging_line_inside(name: str, port: int, topic: str, partition: int) -> str:
    """The hanging-transaction series of ``topic``-``partition``, read from /metrics by a
    process inside the container; waits for the finding's confirmation (bounded)."""
    read = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())"
    deadline = time.monotonic() + FINDING_TIMEOUT_S
    while True:
        text = podman("exec", name, "python", "-c", read).stdout
        for line in text.splitlines():
            if (
                line.startswith(HANGING_SERIES + "{")
                and f'topic="{topic}"' in line
                and f'partition="{partition}"' in line
            ):
                return line
        assert time.monotonic() < deadline, (
            f"no {HANGING_SERIES} for {topic}-{partition}:\n{logs(name)[-4000:]}"
        )
        time.sleep(2)


def host_pid(name: str) -> int:
    return int(podman("inspect", "--format={{.State.Pid}}", name).stdout.strip())


def status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def writable_mounts(pid: int) -> set[str]:
    """Mount points writable in the container, but the kernel's and podman's own (/dev, /proc,
    /sys and the files it bind-mounts: /etc/hosts, /etc/resolv.conf ...)."""
    found = set()
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        point, options = fields[4], fields[5].split(",")
        if "rw" not in options or re.match(r"^/(dev|proc|sys)(/|$)", point):
            continue
        if point in ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/run/.containerenv"):
            continue
        found.add(point)
    return found


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) in MiB of ``pid`` plus its descendants (the embedded JVM)."""
    rss = peak = 0.0
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(OSError, AssertionError):
            rss += int(status_field(p, "VmRSS").split()[0]) / 1024
            peak += int(status_field(p, "VmHWM").split()[0]) / 1024
    return rss, peak


def stop_cleanly(name: str) -> str:
    """SIGTERM, as Kubernetes stops a container; the exit code must be 0."""
    podman("kill", "--signal=TERM", name)
    done = podman("wait", name, timeout_s=STOP_TIMEOUT_S, check=False)
    text = logs(name)
    assert done.returncode == 0 and done.stdout.strip() == "0", f"exit {done.stdout.strip()}:\n{text[-4000:]}"
    assert "exporter stopped" in text, text[-4000:]
    assert not UNEXPECTED.search(text), text[-4000:]
    return text


def run_once(image: str, *args: str, entrypoint: str | None = None, volume: str | None = None) -> str:
    options = [*podman_run_options(), "--rm", "--network=none"]
    if entrypoint:
        options.append(f"--entrypoint={entrypoint}")
    if volume:
        options.append(f"--volume={volume}")
    done = podman("run", *options, image, *args, check=False)
    assert done.returncode == 0, f"{image} {args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def test_both_images_answer_help_check_a_config_and_keep_their_healthcheck(
    images: dict[str, Built], tmp_path: Path
) -> None:
    config = tmp_path / "config.yml"
    config.write_text(chart_deployment(9851, "127.0.0.1:9092", "t").config_yaml)
    for built in images.values():
        assert "usage: kafka-txn-exporter run" in run_once(built.tag, "--help")
        checked = run_once(
            built.tag,
            "check-config",
            "--config.file",
            CONFIG_PATH,
            entrypoint="kafka-txn-exporter",
            volume=f"{config}:{CONFIG_PATH}:ro",
        )
        assert "ok (1 cluster(s): image)" in checked
        inspected: dict[str, Any] = json.loads(podman("image", "inspect", built.tag).stdout)[0]
        health = inspected.get("Healthcheck")
        assert health and "/healthz" in " ".join(health["Test"]), f"{built.tag} lost its HEALTHCHECK"
        assert inspected["Config"]["User"] == "10001:10001"


def test_the_full_image_runs_the_daemon_as_the_chart_does_and_finds_the_hanging_transaction(
    images: dict[str, Built],
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    tmp_path: Path,
    say: Say,
) -> None:
    stuck = hanging(topic, partition=1, backdate_ms=30 * 60 * 1000)
    port = free_port()
    deployment = chart_deployment(port, kafka.bootstrap_servers, topic)
    assert deployment.image == images["runtime"].tag.removeprefix("localhost/")
    started = time.monotonic()
    with exporter_container(images["runtime"].tag, deployment, tmp_path) as name:
        wait_for(name, f"http://127.0.0.1:{port}/readyz", 200, READY_TIMEOUT_S)
        ready_s = time.monotonic() - started
        line = hanging_line_inside(name, port, topic, 1)
        say(f"full image, from inside the container: {line}")
        assert f'producer_id="{stuck.producer_id}"' in line and f'start_offset="{stuck.start_offset}"' in line
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        health = podman("healthcheck", "run", name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        pid = host_pid(name)
        java = [p for p in descendants(pid) if Path(f"/proc/{p}/comm").read_text().strip() == "java"]
        assert java, "the embedded Spark driver runs in the container"
        for p in (pid, *java):
            assert status_field(p, "Uid").split() == ["10001"] * 4, f"pid {p}"
        assert writable_mounts(pid) == set(deployment.empty_dirs)
        owners = podman("exec", name, "stat", "-c", "%n %u:%g", *sorted(deployment.empty_dirs)).stdout
        assert all(line.endswith(" 10001:10001") for line in owners.splitlines()), owners
        denied = podman("exec", "--user=0", name, "touch", "/usr/local/kte-write-check", check=False)
        assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied.stderr
        rss, peak = memory_mib(pid)
        say(f"full image: ready in {ready_s:.0f} s; RSS {rss:.0f} MiB (peak {peak:.0f} MiB), Python + JVM")
        stop_cleanly(name)


def test_the_full_image_says_why_spark_cannot_start_on_a_root_owned_scratch_volume(
    images: dict[str, Built], kafka: KafkaCluster, topic: str, tmp_path: Path, say: Say
) -> None:
    """podman's default tmpfs is owned by root (the issue's Spark local directory): Spark
    cannot start; each attempt is one line saying why, and /healthz turns 503 with it after
    spark.unhealthy_after_failed_starts attempts, for the liveness probe to act on."""
    port = free_port()
    deployment = chart_deployment(
        port, kafka.bootstrap_servers, topic, "config.spark.unhealthy_after_failed_starts=2"
    )
    spark_dir = frozenset({"/var/lib/kafka-txn-exporter/spark"})
    with exporter_container(images["runtime"].tag, deployment, tmp_path, root_owned=spark_dir) as name:
        why = wait_for(name, f"http://127.0.0.1:{port}/healthz", 503, READY_TIMEOUT_S)
        say(f"full image, root-owned Spark scratch: /healthz 503: {why}")
        assert why.startswith("Spark did not start: 2 attempt(s) in a row failed")
        assert "no usable Spark local directory (SPARK_LOCAL_DIRS) for uid 10001" in why
        assert "/var/lib/kafka-txn-exporter/spark: Permission denied" in why
        text = stop_cleanly(name)
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]  # the chart's JSON log
    failures = [r["msg"] for r in records if r["level"] == "ERROR" and "starting Spark failed: " in r["msg"]]
    assert len(failures) >= 2, text
    assert all(re.search(r"Permission denied; next attempt in \d+ s$", msg) for msg in failures), failures


def test_the_thin_image_runs_on_the_spark_connect_server_and_finds_the_hanging_transaction(
    images: dict[str, Built],
    connect_url: str,
    kafka: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    tmp_path: Path,
    say: Say,
) -> None:
    thin = images["thin"].tag
    assert "no java" in run_once(thin, "-c", "command -v java || echo no java", entrypoint="sh")
    client = run_once(
        thin,
        "-c",
        "import importlib.metadata as m, pyspark.util as u; "
        "print(m.version('pyspark-client'), u.is_remote_only())",
        entrypoint="python",
    )
    assert client.split()[1] == "True", client
    stuck = hanging(topic, partition=2, backdate_ms=30 * 60 * 1000)
    port = free_port()
    deployment = chart_deployment(
        port, kafka.bootstrap_servers, topic, "spark.mode=connect", f"spark.connectUrl={connect_url}"
    )
    assert deployment.image == thin.removeprefix("localhost/"), (
        "the chart runs the thin image in connect mode"
    )
    started = time.monotonic()
    with exporter_container(thin, deployment, tmp_path) as name:
        wait_for(name, f"http://127.0.0.1:{port}/readyz", 200, READY_TIMEOUT_S)
        ready_s = time.monotonic() - started
        line = hanging_line_inside(name, port, topic, 2)
        say(f"thin image (pyspark-client {client.split()[0]}), from inside the container: {line}")
        health = podman("healthcheck", "run", name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        assert f'producer_id="{stuck.producer_id}"' in line and f'start_offset="{stuck.start_offset}"' in line
        pid = host_pid(name)
        assert status_field(pid, "Uid").split() == ["10001"] * 4
        assert descendants(pid) == [], "the thin exporter starts no process (no JVM)"
        rss, peak = memory_mib(pid)
        say(f"thin image: ready in {ready_s:.0f} s; RSS {rss:.0f} MiB (peak {peak:.0f} MiB)")
        stop_cleanly(name)
