"""A quick look at a Ray cluster's address before ``ray.init``, which waits minutes on a dead one.

``ray.init(address="HOST:PORT")`` retries the GCS for a long time (past 180 s) when
nothing listens there; one TCP connect with a short timeout tells the same in seconds.
Addresses Ray resolves itself (``auto``, ``local``, none) are left to it.
"""

from __future__ import annotations

import socket

from tracebank.transform.errors import TransformError

PROBE_TIMEOUT_S = 3.0
_RAY_RESOLVES = {"", "auto", "local"}
RAY_HINT = "start one with `ray start --head`, or pass its address with --address HOST:PORT"


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in brackets); None for the rest."""
    text = address.strip().removeprefix("ray://")
    if text in _RAY_RESOLVES or ":" not in text:
        return None
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise a one-line TransformError naming ``address`` when nothing accepts a connection there."""
    target = host_port(address or "")
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            return
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or type(exc).__name__
        raise TransformError(f"cannot reach the Ray cluster at {address}: {reason}", RAY_HINT) from None
