"""``python -m tests.integration.audited_daemon OUT ARGS...``: the command line (``ARGS``, e.g.
``run --config.file FILE``) with an audit hook that writes to ``OUT`` every module a thread
other than the main one imports for the first time, as ``thread<TAB>module`` lines, and, when
the daemon ends, ``loaded<TAB>module`` for every module then imported (an import that failed,
such as an optional dependency looked for, is not one: it initialised nothing).

CPython raises the ``import`` audit event only for a module not yet in ``sys.modules``
(or one still initialising): exactly the imports that take the module's lock.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, NoReturn


def main() -> None:
    out = open(sys.argv[1], "w", buffering=1)  # noqa: SIM115 (open until os._exit)
    main_thread = threading.main_thread()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import" and threading.current_thread() is not main_thread:
            out.write(f"{threading.current_thread().name}\t{args[0]}\n")

    sys.addaudithook(hook)
    from exporter import cli

    end_process = cli.end_process

    def end(code: int) -> NoReturn:
        for name in list(sys.modules):
            out.write(f"loaded\t{name}\n")
        out.flush()
        end_process(code)

    cli.end_process = end
    sys.exit(cli.main(sys.argv[2:]))


if __name__ == "__main__":
    main()
