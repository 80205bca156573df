"""``doctor``: which permissions the principal lacks for a complete cycle and for the
operator's actions, each with the ``kafka-acls.sh`` line that grants it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from exporter.exitcodes import ExitCode
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.probe import Permission, PermissionCheck, probe_permissions
from exporter.operator.connection import Target
from exporter.operator.records import Columns, rows
from exporter.operator.render import emit, note
from exporter.operator.requests import DoctorRequest

COLUMNS: Columns = (
    ("ResourceType", "resource_type"),
    ("Resource", "resource"),
    ("Operation", "operation"),
    ("Result", "permission"),
    ("NeededFor", "needed_for"),
    ("Detail", "detail"),
)


def grant_command(check: PermissionCheck, principal: str, bootstrap: str) -> str:
    """The kafka-acls.sh line that grants ``check``."""
    resource = {
        "Topic": f"--topic '{check.resource}'",
        "TransactionalId": f"--transactional-id '{check.resource}'",
        "Cluster": "--cluster",
    }[check.resource_type]
    return (
        f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {principal} "
        f"--operation {check.operation} {resource}"
    )


def check_record(check: PermissionCheck, principal: str, bootstrap: str) -> dict[str, Any]:
    record = asdict(check)
    record["permission"] = check.permission.value
    record["grant"] = (
        grant_command(check, principal, bootstrap)
        if check.permission in (Permission.MISSING, Permission.NOT_PROBED)
        else None
    )
    return record


def doctor(admin: ClusterAdmin, target: Target, request: DoctorRequest) -> int:
    checks = probe_permissions(admin, request.topics)
    user = target.cluster.kafka.get("sasl.username")
    principal = f"User:{user}" if user else "User:<exporter principal>"
    bootstrap = target.cluster.bootstrap_servers.split(",")[0]
    records = [check_record(c, principal, bootstrap) for c in checks]
    missing = [r for r in records if r["permission"] == Permission.MISSING.value]
    unverified = [r for r in records if r["permission"] == Permission.UNVERIFIED.value]
    doc = {"principal": principal, "checks": records, "complete_cycle": not missing and not unverified}
    emit(request.output, doc, rows(COLUMNS, records))
    if request.output == "table":
        for r in records:
            if r["grant"] is not None:
                verb = "missing" if r["permission"] == Permission.MISSING.value else "not probed"
                note(
                    f"doctor: {verb}: {r['operation']} on {r['resource_type']} "
                    f"{r['resource']} ({r['needed_for']}); grant it with: {r['grant']}"
                )
    if missing:
        return ExitCode.FINDINGS
    return ExitCode.KAFKA if unverified else ExitCode.OK
