"""A clear, one-line error when the listen address cannot be bound (IPv4 and IPv6 are bound
by :class:`exporter.daemon.http.MetricsServer`)."""

from __future__ import annotations

from exporter.config import WebConfig


class ListenError(OSError):
    """The listen address cannot be bound (in use, not local, not permitted). One line."""


def listen_error_text(web: WebConfig, error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"cannot listen on {web.listen_address} (web.listen_address): {reason}"
