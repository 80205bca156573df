"""The wheel holds what runs in production, and nothing of the test bed or the demo."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_contains_the_exporter_and_no_test_bed_or_demo(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("kafka_txn_exporter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "exporter/cli.py" in names
    assert "exporter/pipeline/compute.py" in names
    assert not [n for n in names if n.startswith("testbed/") or "/testbed/" in n]
    assert not [n for n in names if n.endswith("demo.py")]
