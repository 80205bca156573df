"""The exit codes of every ``kafka-txn-exporter`` command, in one place."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    #: find-hanging found hanging transactions, or an action was refused after checking the
    #: cluster (nothing was changed), or doctor found missing permissions.
    FINDINGS = 1
    REFUSED = 1
    #: A bad flag or configuration (nothing was sent to Kafka), or the listen port is taken.
    USAGE = 2
    #: Kafka answered with an error or could not be reached.
    KAFKA = 3
    #: A bug: an unexpected exception.
    INTERNAL = 4
    #: Interrupted (Ctrl-C, SIGINT): 128 + 2, as shells report it.
    INTERRUPTED = 130


EPILOG = (
    "exit codes: 0 ok or dry run; 1 hanging transactions found (find-hanging), missing "
    "permissions (doctor) or the action was refused (nothing changed); 2 usage or "
    "configuration error; 3 Kafka error; 4 unexpected error; 130 interrupted"
)
