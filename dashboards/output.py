"""Writing generated files and checking them, shared by every generator in the repository.

``python -m dashboards.generate`` and ``python -m alerts.generate`` both write text files to
the repository and to the Helm chart's ``files/``, and both have a ``--check`` mode that names
every file that is missing or differs. The paths, the command line skeleton, the comparison,
the writing and the ``--check`` report live here, once. This module needs no grafanalib.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The Helm chart's copy of every generated file lives below this directory.
HELM_FILES = REPO / "deploy" / "helm" / "kafka-txn-exporter" / "files"


def generator_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The command line of a generator, with its ``--check`` option already added."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if a generated file is missing or differs"
    )
    return parser


def differences(expected: Mapping[Path, str]) -> list[str]:
    """One line per path that is missing or whose content is not the expected text."""
    problems = []
    for path, text in expected.items():
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs from the generator output")
    return problems


def write(files: Mapping[Path, str]) -> list[Path]:
    """Write every file (creating its directory); the paths written, in order."""
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)


def report_check(problems: Sequence[str], command: str) -> int:
    """Print the ``--check`` problems and the command that fixes them; the exit status."""
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"run: {command}", file=sys.stderr)
        return 1
    return 0
