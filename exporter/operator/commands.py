"""Operator subcommands of kafka-txn-exporter: the ``kafka-transactions.sh`` verbs, safer.

``list``, ``describe``, ``describe-producers``, ``find-hanging``, ``abort`` and
``force-terminate``. Exit codes: 0 ok (or dry run), 1 hanging transactions found
(find-hanging) or the action was refused after checking the cluster (abort,
force-terminate: nothing changed), 2 usage or configuration error, 3 Kafka error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaRequestError, KafkaUnavailable
from exporter.model import COORDINATOR_STATES
from exporter.operator import actions, hanging, views
from exporter.operator.connection import Target, UsageError, add_connection_flags, resolve_target
from exporter.operator.render import OUTPUTS, note

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_KAFKA = 3

Handler = Callable[[ClusterAdmin, Target, argparse.Namespace], int]

_EPILOG = ("exit codes: 0 ok or dry run; 1 hanging transactions found (find-hanging) or the "
           "action was refused (nothing changed); 2 usage or configuration error; 3 Kafka error; "
           "4 unexpected error")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the operator subcommands on the main parser."""
    _add_list(sub)
    _add_describe(sub)
    _add_describe_producers(sub)
    _add_find_hanging(sub)
    _add_abort(sub)
    _add_force_terminate(sub)


def _parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_: str,
            description: str, handler: Handler) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=description, epilog=_EPILOG)
    add_connection_flags(p)
    p.add_argument("--output", choices=OUTPUTS, default="table",
                   help="table (Kafka's column names first) or json (default: table)")
    p.set_defaults(handler=_runner(name, handler), operator_parser=p)
    return p


def _runner(name: str, handler: Handler) -> Callable[[argparse.Namespace], int]:
    """Resolve the cluster, run, and turn failures into the documented exit codes."""

    def run(args: argparse.Namespace) -> int:
        parser: argparse.ArgumentParser = args.operator_parser
        try:
            target = resolve_target(args)
        except UsageError as e:
            parser.error(str(e))  # exits 2 with the usage line, like argparse's own errors
        try:
            with target.admin() as admin:
                return handler(admin, target, args)
        except UsageError as e:
            parser.error(str(e))
        except actions.Refused as e:
            note(f"{name}: {e}")
            return EXIT_REFUSED
        except (KafkaRequestError, KafkaUnavailable) as e:
            note(f"{name}: {e}")
            return EXIT_KAFKA

    return run


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


# --- list, describe, describe-producers ----------------------------------------------------------


def _add_list(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "list", "list transactions on every coordinator (ListTransactions)",
                "List transactions with their coordinator, producer id and state, like "
                "kafka-transactions.sh list, with Kafka's filters.",
                lambda admin, _t, args: views.list_transactions(admin, args))
    p.add_argument("--state", action="append", choices=COORDINATOR_STATES, metavar="STATE",
                   help=f"only transactions in this state (repeatable): "
                        f"{', '.join(COORDINATOR_STATES)}")
    p.add_argument("--producer-id", dest="producer_id", action="append", type=_non_negative,
                   metavar="ID", help="only this producer id (repeatable)")
    p.add_argument("--duration-filter", dest="duration_filter", type=int, metavar="MS",
                   help="only transactions running longer than MS milliseconds; < 0: all "
                        "(ListTransactions v1, brokers 3.8 or newer)")
    p.add_argument("--transactional-id-pattern", dest="transactional_id_pattern",
                   metavar="REGEX", help="only transactional ids matching this Java regular "
                                         "expression (ListTransactions v2, brokers 4.1 or newer)")


def _add_describe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "describe", "describe a transactional id (DescribeTransactions)",
                "Coordinator, producer id and epoch, state, timeout, start time, duration and "
                "partitions of a transactional id, like kafka-transactions.sh describe.",
                lambda admin, _t, args: views.describe(admin, args))
    p.add_argument("--transactional-id", dest="transactional_id", required=True, metavar="ID")


def _add_describe_producers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "describe-producers",
                "active producers of a partition (DescribeProducers)",
                "Active producers of a partition on its leader (or --broker-id), like "
                "kafka-transactions.sh describe-producers.",
                lambda admin, _t, args: views.describe_producers(admin, args))
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=_non_negative)
    p.add_argument("--broker-id", dest="broker_id", type=_non_negative, metavar="ID",
                   help="ask this replica instead of the leader")


# --- find-hanging ------------------------------------------------------------------------------


def _find_hanging(admin: ClusterAdmin, target: Target, args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition requires --topic")
    with hanging.local_spark() as spark:
        return hanging.find_hanging(admin, spark, target, args)


def _add_find_hanging(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "find-hanging",
                "find hanging transactions (no coordinator will ever complete them)",
                "Find open transactions no coordinator owns (KIP-664), classified by the "
                "exporter's pipeline, with the reason and the age measured from the "
                "transaction's start (not from the producer's LastTimestamp as "
                "kafka-transactions.sh does). Without --broker-id or --topic the whole cluster "
                "is searched. Exit 1 when any is found.", _find_hanging)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--broker-id", dest="broker_id", type=_non_negative, metavar="ID",
                       help="partitions with a replica on this broker")
    scope.add_argument("--topic", help="partitions of this topic")
    p.add_argument("--partition", type=_non_negative, help="only this partition of --topic")
    p.add_argument("--max-transaction-timeout", dest="max_transaction_timeout", type=_non_negative,
                   default=15, metavar="MINUTES",
                   help="only transactions older than this many minutes (default: 15, the broker "
                        "default of transaction.max.timeout.ms)")


# --- abort, force-terminate --------------------------------------------------------------------


def _add_confirmation(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", dest="dry_run", action="store_true",
                      help="show what would be done and change nothing (the default)")
    mode.add_argument("--yes", action="store_true", help="really do it")


def _abort(admin: ClusterAdmin, target: Target, args: argparse.Namespace) -> int:
    if args.start_offset is None and args.producer_id is None:
        raise UsageError("identify the transaction with --start-offset, or with --producer-id, "
                         "--producer-epoch and --coordinator-epoch")
    if args.start_offset is not None and args.producer_id is not None:
        raise UsageError("--start-offset and --producer-id are mutually exclusive")
    if args.start_offset is None:
        for flag, value in (("--producer-epoch", args.producer_epoch),
                            ("--coordinator-epoch", args.coordinator_epoch)):
            if value is None:
                raise UsageError(f"--producer-id needs {flag}")
    elif args.producer_epoch is not None or args.coordinator_epoch is not None:
        raise UsageError("--producer-epoch and --coordinator-epoch go with --producer-id")
    with hanging.local_spark() as spark:
        return actions.abort(admin, spark, target, args)


def _add_abort(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "abort", "abort a hanging transaction (WriteTxnMarkers; needs ClusterAction)",
                "Abort a hanging transaction on one partition, like kafka-transactions.sh abort, "
                "after checking that exactly that transaction is still open and that no "
                "coordinator owns it. A dry run unless --yes. After the abort, waits for the "
                "partition's last stable offset to move past the transaction.", _abort)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=_non_negative)
    p.add_argument("--start-offset", dest="start_offset", type=_non_negative, metavar="OFFSET",
                   help="start offset of the transaction (from find-hanging)")
    p.add_argument("--producer-id", dest="producer_id", type=_non_negative, metavar="ID",
                   help="instead of --start-offset: the producer id ...")
    p.add_argument("--producer-epoch", dest="producer_epoch", type=_non_negative, metavar="EPOCH",
                   help="... its epoch ...")
    p.add_argument("--coordinator-epoch", dest="coordinator_epoch", type=int, metavar="EPOCH",
                   help="... and coordinator epoch, as describe-producers shows them")
    _add_confirmation(p)


def _add_force_terminate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(sub, "force-terminate",
                "end a transactional id's open transaction through its coordinator (KIP-939)",
                "Fence the producer of a transactional id and abort its open transaction "
                "(InitProducerId with keepPreparedTxn=false, Kafka's forceTerminateTransaction). "
                "For transactions a coordinator owns; hanging ones need abort. A dry run unless "
                "--yes.", lambda admin, _t, args: actions.force_terminate(admin, args))
    p.add_argument("--transactional-id", dest="transactional_id", required=True, metavar="ID")
    _add_confirmation(p)


__all__ = ["add_commands"]
