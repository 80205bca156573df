"""The daemon process's own heap: set once, first thing in ``run``, before any thread.

Freed memory goes back to the system instead of staying in per-thread arenas and Arrow's
pool, so the RSS follows what a cycle uses (figures: bench/results/daemon_memory.md).

* glibc gives each thread that allocates its own arena (up to 8 per core), and a thread's
  arena keeps its freed pages. The daemon runs a dozen threads that allocate (librdkafka's,
  kafka-python's I/O thread, the collection pool, gRPC's in thin mode, the HTTP server), so
  freed memory is spread over many arenas. Two arenas, as the Spark driver already gets
  (``MALLOC_ARENA_MAX``): the RSS slope over the minute went from +11.4 to +2.4 MiB/min.
* pyarrow's default pool (mimalloc) keeps the segments of the cycle's Arrow tables for
  reuse; on the system allocator they go back with the rest, and :func:`trim` returns what
  a cycle freed in the middle of the heap, which ``free`` alone keeps.

An operator's own ``MALLOC_ARENA_MAX`` or ``ARROW_DEFAULT_MEMORY_POOL`` wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

#: glibc's ``mallopt`` parameter for the arena limit (``M_ARENA_MAX`` in malloc.h).
M_ARENA_MAX = -8
MAX_ARENAS = 2


def lean_heap() -> None:
    """Two malloc arenas and Arrow on the system allocator, unless the environment says
    otherwise. Must run before pyarrow is imported and before threads start."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: its allocator, its defaults
        return
    if mallopt(M_ARENA_MAX, MAX_ARENAS) != 1:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", MAX_ARENAS)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def trim() -> None:
    """Give the pages a cycle freed back to the system (glibc; a few milliseconds)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
