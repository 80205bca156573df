"""``recover``'s decisions on fixtures (no broker, no Spark): its request, which open
transactions it sees and whose, and what it refuses before writing anything."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.groups_config import BUILTIN_RULES
from exporter.model import (
    ClusterSnapshot,
    CycleResult,
    Finding,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TxnClass,
    UnknownReason,
)
from exporter.operator.actions import CannotVerify, Refused
from exporter.operator.hanging import Classified
from exporter.operator.recover import is_selected, open_transactions, refuse_ambiguity
from exporter.operator.requests import RecoverRequest, UsageError
from tests.unit.test_remediation import hanging


def test_recover_takes_exactly_one_selector() -> None:
    with pytest.raises(UsageError, match="exactly one of"):
        RecoverRequest()
    with pytest.raises(UsageError, match="given: --application, --producer-id"):
        RecoverRequest(application="a", producer_id=1)
    with pytest.raises(UsageError, match="--transactional-id-prefix must not be empty"):
        RecoverRequest(transactional_id_prefix=" ")
    assert RecoverRequest(transactional_id_prefix="orders-").described == "--transactional-id-prefix orders-"


# --- recover: what is open, whose, and when it refuses ---------------------------------------


def _classified(
    findings: tuple[Finding, ...], producers: tuple[ProducerState, ...], *, visible: bool | None = True,
    described: tuple[TransactionDescription, ...] = (),
) -> Classified:  # fmt: skip
    snapshot = ClusterSnapshot(
        "c", 0, producers=producers, transactions=described, transactional_ids_visible=visible
    )
    return Classified(snapshot, CycleResult("c", 0, findings=findings), 1_000)


def _producer(f: Finding) -> ProducerState:
    return ProducerState(f.topic, f.partition, 1, f.producer_id, 0, 0, 0, 0, f.start_offset)


def test_recover_sees_ongoing_transactions_through_their_owner_and_drops_closed_ones() -> None:
    stuck = replace(hanging(), transactional_id="app-0-7")
    owned_p = ProducerState("orders-1", 1, 1, 77, 0, 0, 0, 0, 5)
    closed_p = ProducerState("orders-1", 2, 1, 78, 0, 0, 0, 0, 9)
    owner = TransactionDescription(
        2, "app-1-7", None, "Ongoing", 60_000, 500, 77, 0, (TopicPartition("orders-1", 1),)
    )
    classified = _classified((stuck,), (_producer(stuck), owned_p, closed_p), described=(owner,))
    opens = open_transactions(classified, {"app-0-7": "app", "app-1-7": "app"})
    assert [(o.where, o.txn_class, o.transactional_id, o.application) for o in opens] == [
        ("orders-1-0", TxnClass.HANGING, "app-0-7", "app"),
        ("orders-1-1", TxnClass.ONGOING, "app-1-7", "app"),
    ]
    assert all(is_selected(o, RecoverRequest(application="app")) for o in opens)
    assert not is_selected(opens[0], RecoverRequest(application="ap"))
    assert is_selected(opens[1], RecoverRequest(producer_id=77))


def test_recover_refuses_what_is_ambiguous_before_writing_anything() -> None:
    a = replace(hanging(), transactional_id="orders-0-1")
    b = replace(hanging(partition=1), transactional_id="orders-audit-0-1")
    classified = _classified((a, b), (_producer(a), _producer(b)))
    opens = open_transactions(classified, {"orders-0-1": "orders", "orders-audit-0-1": "orders-audit"})
    with pytest.raises(Refused, match="matches the transactional ids of 2 applications"):
        refuse_ambiguity(classified, opens, RecoverRequest(transactional_id_prefix="orders-"))
    refuse_ambiguity(classified, opens, RecoverRequest(application="orders"))  # clear-cut
    # A principal that may not see every id: an owner may be invisible.
    blind = _classified((a,), (_producer(a),), visible=False)
    with pytest.raises(CannotVerify, match="may not see every transactional id"):
        refuse_ambiguity(blind, open_transactions(blind, {}), RecoverRequest(application="orders"))
    # An unclassed transaction on the application's topic that may be the application's.
    unknown = replace(
        hanging(partition=2, cls=TxnClass.UNKNOWN), unknown_reason=UnknownReason.UNLISTED_WITHIN_TIMEOUT
    )
    doubtful = _classified((a, unknown), (_producer(a), _producer(unknown)))
    opens = open_transactions(doubtful, {"orders-0-1": "orders"})
    with pytest.raises(CannotVerify, match="1 open transaction"):
        refuse_ambiguity(doubtful, opens, RecoverRequest(application="orders"))


def test_the_table_names_each_transaction_its_class_groups_and_action() -> None:
    from exporter.operator.recover import Action, _text

    stuck = replace(hanging(), transactional_id="app-0-7")
    classified = _classified((stuck,), (_producer(stuck),))
    (o,) = open_transactions(classified, {"app-0-7": "app"})
    planned = [
        Action(
            "abort", [o], {"result": "dry_run"}, "Hanging transaction on orders-1-0 ...", result="dry_run"
        ),
        Action("skip", [o], message="a two-phase-commit transaction"),
    ]
    request = RecoverRequest(application="app")
    text = _text(request, planned, [o], {}, 1_000)
    assert text.splitlines()[0] == "1 open transaction(s) match --application app:"
    assert "hanging" in text and "app-0-7" in text
    assert "2. skip orders-1-0: a two-phase-commit transaction" in text
    assert "1. Hanging transaction on orders-1-0 ..." in text
    assert text.endswith("Re-run with --yes to act on every transaction above.")
    done = _text(
        RecoverRequest(application="app", yes=True),
        planned,
        [o],
        {
            "lso_after": {"orders-1-0": 12},
            "groups_unblocked": [("g", "orders-1-0")],
            "groups_still_blocked": [],
        },
        1_000,
    )
    assert "LSO now: orders-1-0 12." in done and "Groups that can read on: g (orders-1-0)." in done
    assert (
        _text(request, [], [], {}, 0) == "No open transaction matches --application app: nothing to recover."
    )


def test_with_a_config_file_recover_attributes_with_the_configs_rules(tmp_path: Path) -> None:
    from exporter.operator.connection import resolve_target
    from exporter.operator.requests import Connection

    config = tmp_path / "config.yml"
    config.write_text(
        "clusters: [{name: prod, bootstrap_servers: 'h:1'}]\n"
        "attribution: [{name: billing, pattern: '^billing-tx-', application: billing}]\n"
    )
    target = resolve_target(Connection(config_file=str(config)))
    assert [r.name for r in target.attribution][-1] == "billing"
    assert resolve_target(Connection(bootstrap_server="h:1")).attribution == BUILTIN_RULES
