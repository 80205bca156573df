"""Operator subcommands of kafka-txn-exporter: the ``kafka-transactions.sh`` verbs, safer.

``list``, ``describe``, ``describe-producers``, ``find-hanging``, ``abort``,
``force-terminate``, ``recover`` and ``doctor``. This module is the edge: it builds each verb's typed
request from argparse (:mod:`exporter.operator.requests`) and turns outcomes into the exit
codes of :class:`~exporter.exitcodes.ExitCode`.

The Kafka work runs in a worker thread while the main thread waits interruptibly, so Ctrl-C
ends the command at once (exit 130) even while a request waits for a broker. With
``--output json`` every error is also a JSON document on stdout:
``{"error": "...", "exit_code": N}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from exporter.config import ConfigError
from exporter.exitcodes import EPILOG, ExitCode
from exporter.kafka.errors import KafkaRequestError, KafkaUnavailable
from exporter.logs import add_log_level
from exporter.model import COORDINATOR_STATES
from exporter.operator import exporter_api, hanging, views
from exporter.operator.connection import (
    LazyAdmin,
    LazyModule,
    Target,
    add_connection_flags,
    connection_from_args,
    resolve_target,
)
from exporter.operator.render import OUTPUTS, note
from exporter.operator.requests import (
    AbortRequest,
    DescribeProducersRequest,
    DescribeRequest,
    DoctorRequest,
    FindHangingRequest,
    ForceTerminateRequest,
    ListRequest,
    RecoverRequest,
    Source,
    UsageError,
)
from exporter.progress import progress

if TYPE_CHECKING:
    from exporter.kafka.admin import ClusterAdmin
    from exporter.operator import actions
else:  # the Kafka clients load when a command first talks to Kafka, not to answer --help
    actions = LazyModule("exporter.operator.actions")

LIBRDKAFKA_LOGGER = "exporter.kafka.librdkafka"
#: A verb: the admin client, the resolved cluster and the verb's typed request.
Handler = Callable[["ClusterAdmin", Target, Any], int]
#: Builds a verb's typed request from its parsed flags (raises UsageError).
Build = Callable[[argparse.Namespace], Any]


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the operator subcommands on the main parser."""
    _add_list(sub)
    _add_describe(sub)
    _add_describe_producers(sub)
    _add_find_hanging(sub)
    _add_abort(sub)
    _add_force_terminate(sub)
    _add_recover(sub)
    _add_doctor(sub)


def _parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_: str,
    description: str,
    build: Build,
    handler: Handler,
) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_, description=description, epilog=EPILOG)
    add_connection_flags(p)
    p.add_argument(
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table (Kafka's column names first) or json (default: table)",
    )
    add_log_level(p)
    p.set_defaults(handler=_runner(name, p, build, handler))
    return p


def _runner(
    name: str, parser: argparse.ArgumentParser, build: Build, handler: Handler
) -> Callable[[argparse.Namespace], int]:
    """Build the request, resolve the cluster, run in a worker thread, map the outcome."""

    def run(args: argparse.Namespace) -> int:
        output: str = args.output
        try:
            request = build(args)
            target = resolve_target(connection_from_args(args))
        except UsageError as e:
            _usage(parser, output, str(e))
        except ConfigError as e:
            return _fail(name, output, str(e), ExitCode.USAGE)
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                with LazyAdmin(target) as admin:
                    outcome["code"] = handler(cast("ClusterAdmin", admin), target, request)
            except BaseException as e:  # handed to the main thread
                outcome["error"] = e

        worker = threading.Thread(target=work, name=f"kafka-txn-exporter {name}", daemon=True)
        # librdkafka logs every failed connection attempt (dozens per second against a down
        # broker); the command's own message names the failure once.
        client_log = logging.getLogger(LIBRDKAFKA_LOGGER)
        level = client_log.level
        client_log.setLevel(logging.CRITICAL)
        worker.start()
        try:
            with progress(name):
                while worker.is_alive():
                    worker.join(0.1)
        except KeyboardInterrupt:
            writes = getattr(request, "yes", False)
            return _fail(
                name,
                output,
                "interrupted"
                + (
                    "; the action may or may not have been sent: check the transaction before "
                    "running the command again"
                    if writes
                    else ""
                ),
                ExitCode.INTERRUPTED,
            )
        finally:
            client_log.setLevel(level)
        error = outcome.get("error")
        if error is None:
            return int(outcome["code"])
        if isinstance(error, UsageError):
            _usage(parser, output, str(error))
        if isinstance(error, actions.Refused):
            return _fail(name, output, str(error), ExitCode.REFUSED)
        if isinstance(
            error, actions.CannotVerify | KafkaRequestError | KafkaUnavailable | exporter_api.ExporterError
        ):
            return _fail(name, output, str(error), ExitCode.KAFKA)
        raise error

    return run


def _fail(name: str, output: str, message: str, code: ExitCode) -> int:
    note(f"{name}: {message}")
    if output == "json":
        sys.stdout.write(json.dumps({"error": f"{name}: {message}", "exit_code": int(code)}) + "\n")
    return int(code)


def _usage(parser: argparse.ArgumentParser, output: str, message: str) -> NoReturn:
    if output == "json":
        sys.stdout.write(json.dumps({"error": message, "exit_code": int(ExitCode.USAGE)}) + "\n")
    parser.error(message)  # exits 2 with the usage line, like argparse's own errors


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


# --- answers from a running exporter -----------------------------------------------------------


def _add_source_flags(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--exporter",
        metavar="URL",
        help="answer from the last cycle of the exporter at URL (http[s]://[USER[:PASSWORD]@]HOST:PORT; "
        f"the password may be in ${exporter_api.EXPORTER_PASSWORD_ENV}). Without it or --fresh, an "
        f"exporter of the same cluster is looked for (${exporter_api.EXPORTER_URL_ENV}, the "
        "--config.file's listen port, 127.0.0.1:9851) and used when its last cycle is complete "
        "and recent",
    )
    source.add_argument(
        "--fresh", action="store_true", help="collect from Kafka and classify now, whatever exporter runs"
    )


def _source(args: argparse.Namespace) -> Source:
    return Source(exporter=args.exporter, fresh=args.fresh)


def _exporter_answer(target: Target, source: Source, fresh_only: str | None) -> exporter_api.Answer | None:
    """The exporter's answer for ``target``, or None: compute fresh. ``fresh_only`` names the
    flag an exporter cannot answer (a usage error with ``--exporter``)."""
    if source.fresh:
        return None
    if fresh_only is not None:
        if source.exporter is not None:
            raise UsageError(f"--exporter cannot answer {fresh_only}; use --fresh")
        return None
    return exporter_api.find_answer(
        given=source.exporter,
        cluster_name=target.cluster.name if target.config_file else None,
        bootstrap=target.cluster.bootstrap_servers,
        listen_port=target.listen_port,
    )


def _list(admin: ClusterAdmin, target: Target, request: ListRequest) -> int:
    filtered = [
        flag
        for flag, value in (
            ("--duration-filter", request.duration_filter),
            ("--transactional-id-pattern", request.transactional_id_pattern),
        )
        if value is not None
    ]
    answer = _exporter_answer(target, request.source, " or ".join(filtered) or None)
    if answer is not None and answer.cluster.get("transactions") is not None:
        return views.list_answer(answer, request)
    if answer is not None and request.source.exporter is not None:
        raise exporter_api.ExporterError(
            f"exporter at {answer.url} has no coordinator listing of its last cycle yet; --fresh reads it now"
        )
    return views.list_transactions(admin, request)


# --- list, describe, describe-producers ----------------------------------------------------------


def _add_list(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "list",
        "list transactions on every coordinator (ListTransactions)",
        "List transactions with their coordinator, producer id and state, like "
        "kafka-transactions.sh list, with Kafka's filters.",
        lambda a: ListRequest(
            states=tuple(a.state or ()),
            producer_ids=tuple(a.producer_id or ()),
            duration_filter=a.duration_filter,
            transactional_id_pattern=a.transactional_id_pattern,
            output=a.output,
            source=_source(a),
        ),
        _list,
    )
    _add_source_flags(p)
    p.add_argument(
        "--state",
        action="append",
        choices=COORDINATOR_STATES,
        metavar="STATE",
        help=f"only transactions in this state (repeatable): {', '.join(COORDINATOR_STATES)}",
    )
    p.add_argument(
        "--producer-id",
        dest="producer_id",
        action="append",
        type=_non_negative,
        metavar="ID",
        help="only this producer id (repeatable)",
    )
    p.add_argument(
        "--duration-filter",
        dest="duration_filter",
        type=int,
        metavar="MS",
        help="only transactions running longer than MS milliseconds; < 0: all "
        "(ListTransactions v1, brokers 3.8 or newer)",
    )
    p.add_argument(
        "--transactional-id-pattern",
        dest="transactional_id_pattern",
        metavar="REGEX",
        help="only transactional ids matching this Java regular "
        "expression (ListTransactions v2, brokers 4.1 or newer)",
    )


def _add_describe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "describe",
        "describe a transactional id (DescribeTransactions)",
        "Coordinator, producer id and epoch, state, timeout, start time, duration and "
        "partitions of a transactional id, like kafka-transactions.sh describe.",
        lambda a: DescribeRequest(a.transactional_id, output=a.output),
        lambda admin, _t, r: views.describe(admin, r),
    )
    p.add_argument("--transactional-id", dest="transactional_id", required=True, metavar="ID")


def _add_describe_producers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "describe-producers",
        "active producers of a partition (DescribeProducers)",
        "Active producers of a partition on its leader (or --broker-id), like "
        "kafka-transactions.sh describe-producers.",
        lambda a: DescribeProducersRequest(a.topic, a.partition, a.broker_id, output=a.output),
        lambda admin, _t, r: views.describe_producers(admin, r),
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=_non_negative)
    p.add_argument(
        "--broker-id",
        dest="broker_id",
        type=_non_negative,
        metavar="ID",
        help="ask this replica instead of the leader",
    )


# --- find-hanging ------------------------------------------------------------------------------


def _find_hanging(admin: ClusterAdmin, target: Target, request: FindHangingRequest) -> int:
    scoped = (
        "--broker-id (the exporter knows leaders, not replicas)" if request.broker_id is not None else None
    )
    answer = _exporter_answer(target, request.source, scoped)
    if answer is not None:
        return hanging.find_hanging_answer(answer, request)
    with hanging.local_spark(target.spark) as spark:
        return hanging.find_hanging(admin, spark, target, request)


def _add_find_hanging(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "find-hanging",
        "find hanging transactions (no coordinator will ever complete them)",
        "Find open transactions no coordinator owns (KIP-664), classified by the "
        "exporter's pipeline, with the reason and the age measured from the "
        "transaction's start (not from the producer's LastTimestamp as "
        "kafka-transactions.sh does). Without --broker-id or --topic the whole cluster "
        "is searched. Exit 1 when any is found.",
        lambda a: FindHangingRequest(
            broker_id=a.broker_id,
            topic=a.topic,
            partition=a.partition,
            max_transaction_timeout_min=a.max_transaction_timeout,
            output=a.output,
            source=_source(a),
        ),
        _find_hanging,
    )
    _add_source_flags(p)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--broker-id",
        dest="broker_id",
        type=_non_negative,
        metavar="ID",
        help="partitions with a replica on this broker",
    )
    scope.add_argument("--topic", help="partitions of this topic")
    p.add_argument("--partition", type=_non_negative, help="only this partition of --topic")
    p.add_argument(
        "--max-transaction-timeout",
        dest="max_transaction_timeout",
        type=_non_negative,
        default=15,
        metavar="MINUTES",
        help="only transactions older than this many minutes (default: 15, the broker "
        "default of transaction.max.timeout.ms)",
    )


# --- abort, force-terminate --------------------------------------------------------------------


def _add_confirmation(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="show what would be done and change nothing (the default)",
    )
    mode.add_argument("--yes", action="store_true", help="really do it")


def _abort(admin: ClusterAdmin, target: Target, request: AbortRequest) -> int:
    with hanging.local_spark(target.spark) as spark:
        return actions.abort(admin, spark, target, request)


def _add_abort(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "abort",
        "abort a hanging transaction (WriteTxnMarkers; needs ClusterAction)",
        "Abort a hanging transaction on one partition, like kafka-transactions.sh abort, "
        "after checking that exactly that transaction is still open and that no "
        "coordinator owns it (both checked again right before the write). A dry run "
        "unless --yes. After the abort, waits for the partition's last stable offset to "
        "move past the transaction. Refused with exit 3 when the transaction's owner "
        "may be invisible to the principal, and when no coordinator lists it in a cluster "
        "that accepts two-phase-commit transactions (unless --owner-checked).",
        lambda a: AbortRequest(
            topic=a.topic,
            partition=a.partition,
            start_offset=a.start_offset,
            producer_id=a.producer_id,
            producer_epoch=a.producer_epoch,
            coordinator_epoch=a.coordinator_epoch,
            yes=a.yes,
            output=a.output,
            owner_checked=a.owner_checked,
        ),
        _abort,
    )
    p.add_argument(
        "--owner-checked",
        dest="owner_checked",
        action="store_true",
        help="abort a transaction no coordinator lists even though the cluster accepts "
        "two-phase-commit transactions: you checked that no 2PC application owns it under "
        "a transactional id this principal cannot see",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", required=True, type=_non_negative)
    p.add_argument(
        "--start-offset",
        dest="start_offset",
        type=_non_negative,
        metavar="OFFSET",
        help="start offset of the transaction (from find-hanging)",
    )
    p.add_argument(
        "--producer-id",
        dest="producer_id",
        type=_non_negative,
        metavar="ID",
        help="instead of --start-offset: the producer id ...",
    )
    p.add_argument(
        "--producer-epoch",
        dest="producer_epoch",
        type=_non_negative,
        metavar="EPOCH",
        help="... its epoch ...",
    )
    p.add_argument(
        "--coordinator-epoch",
        dest="coordinator_epoch",
        type=int,
        metavar="EPOCH",
        help="... and coordinator epoch, as describe-producers shows them",
    )
    _add_confirmation(p)


def _force_terminate(admin: ClusterAdmin, target: Target, request: ForceTerminateRequest) -> int:
    return actions.force_terminate(admin, target, request)


def _add_force_terminate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "force-terminate",
        "end a transactional id's open transaction through its coordinator (KIP-939)",
        "Fence the producer of a transactional id and abort its open transaction "
        "(InitProducerId with keepPreparedTxn=false, Kafka's forceTerminateTransaction). "
        "For transactions a coordinator owns; hanging ones need abort. A dry run unless "
        "--yes. Refused when the producer id or epoch changes before InitProducerId.",
        lambda a: ForceTerminateRequest(
            a.transactional_id, expected_epoch=a.producer_epoch, yes=a.yes, output=a.output
        ),
        _force_terminate,
    )
    p.add_argument("--transactional-id", dest="transactional_id", required=True, metavar="ID")
    p.add_argument(
        "--producer-epoch",
        dest="producer_epoch",
        type=_non_negative,
        metavar="EPOCH",
        help="the producer epoch you saw (dry run, describe): refused if it changed",
    )
    _add_confirmation(p)


def _recover(admin: ClusterAdmin, target: Target, request: RecoverRequest) -> int:
    from exporter.operator.recover import recover

    with hanging.local_spark(target.spark) as spark:
        return recover(admin, spark, target, request)


def _add_recover(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "recover",
        "end every open transaction an application left (abort or force-terminate each)",
        "List every open transaction of an application (the exporter's attribution rules: "
        "the built-ins for Kafka Streams, Flink and Spring, and the config's attribution), "
        "of transactional ids with a prefix, or of a producer id, with its partitions, start "
        "offset, class, age, coordinator state and the consumer groups it blocks; plan one "
        "action per transaction: an ABORT marker for a hanging one, force-terminate "
        "(InitProducerId, KIP-939) for one its coordinator still owns, two-phase-commit ones "
        "only with --include-prepared. A dry run unless --yes; each write is preceded by the "
        "same two-sided checks as abort and force-terminate. Refused when anything is "
        "ambiguous (a transaction that cannot be classed, an owner that may be invisible, a "
        "prefix matching several applications). Then reports the LSO and the groups that can "
        "read on.",
        lambda a: RecoverRequest(
            application=a.application,
            transactional_id_prefix=a.transactional_id_prefix,
            producer_id=a.producer_id,
            include_prepared=a.include_prepared,
            yes=a.yes,
            output=a.output,
        ),
        _recover,
    )
    p.add_argument("--application", metavar="NAME", help="the application, as the attribution rules name it")
    p.add_argument(
        "--transactional-id-prefix",
        dest="transactional_id_prefix",
        metavar="PREFIX",
        help="transactional ids starting with PREFIX",
    )
    p.add_argument(
        "--producer-id", dest="producer_id", type=_non_negative, metavar="ID", help="one producer id"
    )
    p.add_argument(
        "--include-prepared",
        dest="include_prepared",
        action="store_true",
        help="terminate two-phase-commit (KIP-939) transactions too: only when their external "
        "transaction manager will never decide them",
    )
    _add_confirmation(p)


# --- doctor ------------------------------------------------------------------------------------


def _doctor(admin: ClusterAdmin, target: Target, request: DoctorRequest) -> int:
    from exporter.operator.doctor import doctor

    return doctor(admin, target, request)


def _add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _parser(
        sub,
        "doctor",
        "show which ACLs the principal lacks (probes, writes nothing)",
        "Probe the permissions a complete collection cycle needs (Describe and Read on "
        "topics, Describe on TransactionalId *, DescribeConfigs, metadata of "
        "__transaction_state) and name those the operator's actions need "
        "(ClusterAction for abort, Write on the transactional id for force-terminate), "
        "each with the kafka-acls.sh line that grants it. Exit 1 when one is missing.",
        lambda a: DoctorRequest(topics=tuple(a.topic) if a.topic else None, output=a.output),
        _doctor,
    )
    p.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="check this topic (repeatable; default: every visible topic)",
    )


__all__ = ["add_commands"]
