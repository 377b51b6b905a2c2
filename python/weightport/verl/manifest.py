"""The model's manifest (tensor names, shapes, dtypes), from trainer rank 0 to rollout workers.

A rollout worker binds to the weights it will receive before the first version moves, but under
verl it learns the model only from the trainer's first ``send_weights``. Trainer rank 0 serves the
manifest on a small authenticated socket (``multiprocessing.connection``: an HMAC challenge with the
session's secret, then one JSON document; nothing is unpickled) and rollout workers fetch it once.
Only this metadata crosses it; the weights move over weightport's transport.
"""

from __future__ import annotations

import json
import threading
from multiprocessing.connection import Client, Listener
from typing import Any


class ManifestServer:
    """Serves one manifest to every client that authenticates; clients that connect before it is
    set wait for it (up to their own timeout)."""

    def __init__(self, host: str, secret: bytes):
        self._listener = Listener((host, 0), family="AF_INET", authkey=secret)
        self._ready = threading.Event()
        self._payload = b""
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="wp-verl-manifest", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._listener.address
        return f"{host}:{port}"

    def set(self, manifest: list[dict[str, Any]]) -> None:
        """The manifest to serve: ``[{"name", "shape", "dtype"}]`` in the trainer's order."""
        self._payload = json.dumps(manifest).encode()
        self._ready.set()

    def clear(self) -> None:
        """Withdraws the manifest (a new session: the trainer sets it again at its first update)."""
        self._ready.clear()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:  # closed, or a client that failed the challenge: go on unless closed
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Any) -> None:
        with conn:
            # A client waits at most its timeout; bound this side too so a stray connection ends.
            if self._ready.wait(timeout=3600):
                try:
                    conn.send_bytes(self._payload)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def fetch_manifest(address: str, secret: bytes, timeout: float) -> list[dict[str, Any]]:
    """The manifest trainer rank 0 serves at `address`; raises TimeoutError when it has none within
    `timeout` seconds (the trainer has not started a version)."""
    host, _, port = address.rpartition(":")
    try:
        conn = Client((host, int(port)), family="AF_INET", authkey=secret)
    except OSError as e:
        raise ConnectionError(f"weightport: cannot reach trainer rank 0's manifest at {address}: {e}") from e
    with conn:
        if not conn.poll(timeout):
            raise TimeoutError(f"weightport: trainer rank 0 ({address}) sent no manifest within {timeout:.0f} s: "
                               f"has send_weights started on the trainer ranks?")
        return json.loads(conn.recv_bytes())
