"""The example Alertmanager configuration, with its endpoints swapped for tests or proxies.

``render_example(pagerduty_url=..., routing_key_file=..., ticket_webhook_url=...)`` returns
alerts/alertmanager.example.yml with those keys replaced (comments are dropped), e.g. so an
end-to-end test sends pages to a local stand-in for PagerDuty's Events API v2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parent / "alertmanager.example.yml"
PAGERDUTY_RECEIVER = "kafka-pagerduty"
TICKET_RECEIVER = "kafka-tickets"


def load_example(path: Path = EXAMPLE) -> dict[str, Any]:
    loaded: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a mapping")
    return loaded


def _receiver(config: dict[str, Any], name: str) -> dict[str, Any]:
    for receiver in config.get("receivers", []):
        if receiver.get("name") == name:
            return dict(receiver)
    raise KeyError(f"receiver {name!r} not in the Alertmanager config")


def with_endpoints(
    config: dict[str, Any],
    *,
    pagerduty_url: str | None = None,
    routing_key_file: str | Path | None = None,
    ticket_webhook_url: str | None = None,
) -> dict[str, Any]:
    """A copy of ``config`` with the PagerDuty and ticket endpoints replaced where given."""
    updated = dict(config)
    receivers = []
    for original in config.get("receivers", []):
        receiver = dict(original)
        if receiver.get("name") == PAGERDUTY_RECEIVER:
            pagers = [dict(p) for p in receiver.get("pagerduty_configs", [])]
            for pager in pagers:
                if pagerduty_url is not None:
                    pager["url"] = pagerduty_url
                if routing_key_file is not None:
                    pager["routing_key_file"] = str(routing_key_file)
            receiver["pagerduty_configs"] = pagers
        if receiver.get("name") == TICKET_RECEIVER and ticket_webhook_url is not None:
            hooks = [dict(h) for h in receiver.get("webhook_configs", [])]
            for hook in hooks:
                hook["url"] = ticket_webhook_url
            receiver["webhook_configs"] = hooks
        receivers.append(receiver)
    updated["receivers"] = receivers
    _receiver(updated, PAGERDUTY_RECEIVER)  # both receivers must still exist
    _receiver(updated, TICKET_RECEIVER)
    return updated


def render_example(
    *,
    pagerduty_url: str | None = None,
    routing_key_file: str | Path | None = None,
    ticket_webhook_url: str | None = None,
    path: Path = EXAMPLE,
) -> str:
    """The example config as YAML text with the given endpoints swapped in."""
    config = with_endpoints(
        load_example(path),
        pagerduty_url=pagerduty_url,
        routing_key_file=routing_key_file,
        ticket_webhook_url=ticket_webhook_url,
    )
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=1_000_000)
