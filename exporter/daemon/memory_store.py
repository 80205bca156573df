"""Each cluster's pipeline memory on disk, so that a restarted exporter goes on where it stopped.

What one cycle hands the next (:class:`~exporter.model.PipelineMemory`: hanging candidates
and their confirmation counts, the transactions watched for a KIP-588 timeout, the ids
waiting for their markers and since when, the consumer groups waiting at an LSO and since
when) lives in the process. Without this store a restart (a rolling update, a liveness
probe, a crash) forgets it: a confirmed hanging transaction is only a candidate again for
a cycle, markers-pending and blocked-consumer clocks start over from 0, and the pages that
rest on them resolve and page again minutes later.

With ``state_dir`` set, every cycle's memory is written to ``<state_dir>/<cluster>.json``
(a new file renamed over the old one: a crash leaves the previous cycle's file whole) and
read back when the daemon starts. A file older than :func:`max_age_ms` is not used: the
confirmation counts mean consecutive cycles, and a long gap is not one. The KIP-588 abort
counts are not restored: they are counters since the process started.

The file format is the memory's dataclasses as JSON objects, by field name, with a version
number; a file of another version, or one that does not parse, is logged and ignored (the
cycle starts from no memory, as without the store).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import tempfile
import types
import typing
import urllib.parse
from pathlib import Path
from typing import Any

from exporter.config import ConfigError
from exporter.model import PipelineMemory

log = logging.getLogger(__name__)

#: Bumped when a field of the memory changes meaning; a file of another version is ignored.
FORMAT_VERSION = 1
#: A restart takes longer than a few cycles when the pod is rescheduled: at least this.
MIN_MAX_AGE_MS = 5 * 60_000
#: A file dated up to this far ahead is taken as just saved (another node's clock); further
#: ahead it is ignored: its clocks (blocked since, markers pending since) would be too.
CLOCK_SKEW_MS = 60_000


def max_age_ms(interval_ms: int) -> int:
    """The oldest memory a restarted daemon goes on from: three collection intervals, and
    never less than five minutes."""
    return max(MIN_MAX_AGE_MS, 3 * interval_ms)


class MemoryStore:
    """The ``state_dir``: one JSON file per cluster. Raises :class:`ConfigError` at creation
    when the directory cannot be created or written (checked with a probe file)."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.directory, prefix=".probe-"):
                pass
        except OSError as e:
            raise ConfigError([f"state_dir: cannot write to {directory}: {e.strerror or e}"]) from e

    def path(self, cluster: str) -> Path:
        return self.directory / f"{urllib.parse.quote(cluster, safe='')}.json"

    def save(self, cluster: str, memory: PipelineMemory, saved_at_ms: int) -> None:
        """Write the memory; on failure log it and leave the previous file as it was."""
        document = {
            "version": FORMAT_VERSION,
            "cluster": cluster,
            "saved_at_ms": saved_at_ms,
            "memory": _encode(memory),
        }
        target = self.path(cluster)
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{target.name}.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(document, f, separators=(",", ":"))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self._sync_directory()  # the rename itself survives a power loss
        except OSError as e:
            log.warning("cluster %s: pipeline memory not saved to %s: %s", cluster, target, e.strerror or e)

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self, cluster: str, now_ms: int, max_age: int) -> PipelineMemory | None:
        """The memory a previous process saved for ``cluster``, or None when there is none,
        it is older than ``max_age`` ms, or it cannot be read (logged)."""
        target = self.path(cluster)
        try:
            text = target.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cluster %s: pipeline memory in %s not read: %s", cluster, target, e.strerror or e)
            return None
        try:
            document = json.loads(text.decode("utf-8"))
            if document.get("version") != FORMAT_VERSION or document.get("cluster") != cluster:
                raise ValueError(f"version {document.get('version')!r}, cluster {document.get('cluster')!r}")
            saved_at = int(document["saved_at_ms"])
            memory: PipelineMemory = _decode(PipelineMemory, document["memory"])
        except Exception as e:  # whatever the file holds, the daemon starts (without it)
            log.warning("cluster %s: pipeline memory in %s ignored: unreadable (%s)", cluster, target, e)
            return None
        age = now_ms - saved_at
        if age < -CLOCK_SKEW_MS:
            log.warning(
                "cluster %s: pipeline memory in %s ignored: dated %d s in the future of this "
                "clock (was the clock set back, or the file written on another host?)",
                cluster,
                target,
                -age // 1000,
            )
            return None
        if age > max_age:
            log.info(
                "cluster %s: pipeline memory in %s ignored: saved %d s ago (older than %d s)",
                cluster,
                target,
                age // 1000,
                max_age // 1000,
            )
            return None
        log.info(
            "cluster %s: going on from the pipeline memory saved %d s ago (%d hanging candidate(s), "
            "%d group partition(s) waiting at an LSO)",
            cluster,
            max(0, age) // 1000,
            len(memory.candidates),
            len(memory.groups.at_lso),
        )
        return dataclasses.replace(memory, timeout_aborts_total=())


# --- the memory's dataclasses as JSON -------------------------------------------------------


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _decode(kind: Any, data: Any) -> Any:
    """``data`` (parsed JSON) as ``kind``: a dataclass, ``tuple[X, ...]``, ``X | None``, an
    enum, int, str or bool. Raises ValueError/TypeError on anything else."""
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if data is None:
            return None
        if len(args) != 1:
            raise TypeError(f"unsupported type {kind!r}")
        return _decode(args[0], data)
    if origin is tuple:
        (item, *rest) = typing.get_args(kind)
        if rest != [Ellipsis] or not isinstance(data, list):
            raise TypeError(f"expected a list for {kind!r}")
        return tuple(_decode(item, v) for v in data)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {kind.__name__}")
        hints = typing.get_type_hints(kind)
        # A field the file lacks takes its default (or fails as a missing argument).
        present = [f.name for f in dataclasses.fields(kind) if f.name in data]
        return kind(**{name: _decode(hints[name], data[name]) for name in present})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data)
    if kind is bool:
        if not isinstance(data, bool):
            raise TypeError(f"expected a boolean, got {data!r}")
        return data
    if kind is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"expected an integer, got {data!r}")
        return data
    if kind is str:
        if not isinstance(data, str):
            raise TypeError(f"expected a string, got {data!r}")
        return data
    raise TypeError(f"unsupported type {kind!r}")
