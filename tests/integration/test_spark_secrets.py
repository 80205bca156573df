"""Secret Spark settings never reach a command line (issue 39): a process started the way the
daemon starts its Spark (``exporter.pipeline.session.spark_session``) with planted secrets in
``spark.conf`` (from ``${ENV}``, as the config requires); every process in its tree has its
``/proc/<pid>/cmdline`` read while the JVM runs, and none holds a secret, while the JVM has
every secret in its configuration (the object-store credentials in Hadoop's too)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.config import parse_config

pytestmark = [pytest.mark.spark]

PLANTED = "planted-secret-7f3a9c"
SETTINGS = {
    "spark.hadoop.fs.s3a.secret.key": "${KTE_PLANTED}",
    "spark.hadoop.fs.s3a.access.key": "${KTE_PLANTED}",
    "spark.kafkaTxnExporter.apiToken": "${KTE_PLANTED}",
    "spark.hadoop.fs.azure.sas.data.acct.blob.core.windows.net": "${KTE_PLANTED}",
}

#: Starts Spark from the config's spark section, checks the JVM has the secrets, says so on
#: stdout and keeps the JVM until its stdin closes.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    from exporter.config import load_config
    from exporter.pipeline.session import spark_session
    config = load_config(sys.argv[1])
    spark = spark_session(config.spark)
    conf = spark.sparkContext.getConf()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    planted = os.environ["KTE_PLANTED"]
    print(json.dumps({
        "in_spark_conf": sorted(k for k in config.spark.conf if conf.get(k) == planted),
        "in_hadoop_conf": hadoop.get("fs.s3a.secret.key") == planted,
        "submit_args": os.environ.get("PYSPARK_SUBMIT_ARGS"),
    }), flush=True)
    sys.stdin.read()
    spark.stop()
    """
)


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.timeout(600)
def test_no_process_of_the_tree_has_a_secret_on_its_command_line(tmp_path: Path) -> None:
    import yaml

    config = tmp_path / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:1"}],
                "spark": {"master": "local[1]", "local_dir": str(tmp_path / "spark"), "conf": SETTINGS},
            }
        )
    )
    assert parse_config(yaml.safe_load(config.read_text()), env={"KTE_PLANTED": PLANTED})
    env = {**os.environ, "KTE_PLANTED": PLANTED}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()  # the JVM is up and was asked for the secrets
        tree = {pid: cmdline(pid) for pid in descendants(child.pid)}
        child.stdin.close()
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert line, child.stderr.read() if child.stderr else "no output"
    import json

    seen = json.loads(line)
    assert seen["in_spark_conf"] == sorted(SETTINGS), seen
    assert seen["in_hadoop_conf"] is True
    assert seen["submit_args"] is None, "the launch arguments are restored"
    jvms = [c for c in tree.values() if "java" in c and "SparkSubmit" in c]
    assert jvms, f"no JVM in the tree: {tree}"
    leaked = {pid: c for pid, c in tree.items() if PLANTED in c}
    assert not leaked, f"a secret on a command line: {leaked}"
    for name in SETTINGS:
        assert all(name not in c for c in jvms), f"{name} named on the JVM's command line"
    (named,) = {c.split("--properties-file ", 1)[1].split()[0] for c in jvms}
    assert not Path(named).exists(), "the secrets file is deleted once the JVM read it"
