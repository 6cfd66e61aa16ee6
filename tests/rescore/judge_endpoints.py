"""Loopback judge endpoints for the tests: one that answers a fixed body, one that sleeps, one
that redirects; each records the requests' Authorization headers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def endpoint(
    answer: dict[str, Any] | None = None, sleep: float = 0.0, redirect: str | None = None
) -> Iterator[Any]:
    """A server on 127.0.0.1 (a free port); yields it, with ``.url`` (``.../v1``) and ``.seen``."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "authorization": self.headers.get("Authorization"), "body": body})
            time.sleep(sleep)
            if redirect:
                self.send_response(307)
                self.send_header("Location", redirect)
                self.end_headers()
                return
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    server.seen = seen  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def chat_answer(content: str, top: list[tuple[str, float]] | None = None) -> dict[str, Any]:
    """An OpenAI chat-completions body with ``content`` (and first-token alternatives ``top``)."""
    logprobs = None
    if top is not None:
        entries = [{"token": t, "logprob": lp} for t, lp in top]
        logprobs = {"content": [{"token": top[0][0], "logprob": top[0][1], "top_logprobs": entries}]}
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": logprobs}]
    }
