"""The daemon's heap settings (exporter.daemon.heap), each checked in a fresh interpreter:
they only work when made before pyarrow is imported and before threads start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def python(code: str, **env: str) -> str:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_ARENA_MAX")
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


ARROW_POOL = """
    from exporter.daemon.heap import lean_heap
    lean_heap()
    import pyarrow
    print(pyarrow.default_memory_pool().backend_name)
"""

ARENAS = """
    import ctypes, threading
    from exporter.daemon.heap import lean_heap
    if {lean}:
        lean_heap()
    release = threading.Event()
    started = threading.Barrier(11)
    def allocate():
        kept = [bytearray(1000) for _ in range(1000)]
        started.wait()
        release.wait()
    threads = [threading.Thread(target=allocate) for _ in range(10)]
    for t in threads:
        t.start()
    started.wait()
    libc = ctypes.CDLL(None)
    libc.open_memstream.restype = ctypes.c_void_p
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(buf.value.decode().count("<heap nr"))
    release.set()
"""


def test_the_command_line_imports_no_pyarrow_before_run_sets_the_heap() -> None:
    assert python("import sys, exporter.cli; print('pyarrow' in sys.modules)") == "False"


def test_arrow_buffers_go_to_the_system_allocator() -> None:
    assert python(ARROW_POOL) == "system"


def test_an_operators_arrow_pool_wins() -> None:
    assert python(ARROW_POOL, ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_info")
def test_ten_allocating_threads_share_two_malloc_arenas() -> None:
    assert int(python(ARENAS.format(lean=True))) <= 2
    assert int(python(ARENAS.format(lean=False))) > 2  # glibc's default: one per thread
