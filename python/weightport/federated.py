"""Federated rounds: an aggregator (:class:`FedServer`) and clients (:class:`FedClient`) on slow links.

The model travels as one flat float32 vector (``torch.nn.utils.parameters_to_vector`` gives one).
Each round the server sends every client the global model (bf16, only the chunks that changed since
the version the client holds, zstd where it pays); the client trains and sends its update
(``local - start``) as float32, bf16 or fp8 with error feedback; the server folds the updates as they
arrive into a weighted mean (FedAvg, weight = sample count) without ever holding a client's whole
update. A chunk that is not finite or malformed excludes its client from the round, named.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from . import _core
from ._session import load_secret


def _vector(values: Any) -> np.ndarray:
    """A contiguous 1-D float32 NumPy array of `values` (NumPy, torch or anything array-like)."""
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().to("cpu").float().contiguous().numpy()
    return np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {address!r}")
    return host, int(port)


class FedServer:
    """The aggregator: listens at `address` (port 0 picks one), serves `rounds` rounds to the clients
    that joined (round 1 waits for `clients`), and keeps the global model."""

    def __init__(self, address: str, *, secret: bytes | str | os.PathLike, initial: Any, clients: int,
                 rounds: int, chunk_elements: int = 1 << 18, deadline: float = 60.0, late: str = "drop",
                 staleness: float = 0.5, compress: bool = True):
        host, port = _split(address)
        self._server = _core.FedServer(load_secret(secret), host, port, _vector(initial), int(clients), int(rounds),
                                       int(chunk_elements), float(deadline), late, float(staleness), bool(compress))

    @property
    def address(self) -> str:
        """HOST:PORT the clients connect to."""
        return self._server.address

    def run(self) -> list[dict]:
        """Runs every round; one report per round (its time, bytes, and each client: folded or why
        it was excluded)."""
        return json.loads(self._server.run())

    def global_model(self) -> np.ndarray:
        """A copy of the global model, float32."""
        return self._server.global_model()


class FedClient:
    """One client: `next_round()` gives the round's starting model, `send_update()` sends
    what training changed."""

    def __init__(self, address: str, *, secret: bytes | str | os.PathLike, name: str, encoding: str = "bf16",
                 compress: bool = True, timeout: float = 120.0):
        self._client = _core.FedClient(load_secret(secret), address, name, encoding, bool(compress), float(timeout))

    def next_round(self) -> np.ndarray | None:
        """The round's model (float32, a copy the caller owns), or None once the server ended the run."""
        return self._client.next_round()

    def send_update(self, update: Any, samples: float) -> dict:
        """Sends `update` (local - start, the model's length) weighted by `samples`."""
        return json.loads(self._client.send_update(_vector(update), float(samples)))

    @property
    def round(self) -> int:
        """The round in progress."""
        return self._client.round
