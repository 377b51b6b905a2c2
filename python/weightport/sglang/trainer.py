"""The trainer side of the SGLang backend: publish a model's tensors into a serving SGLang.

:class:`SGLangTrainer` runs a weightport coordinator and :class:`~weightport.Publisher` over the
trainer's tensors; every SGLang tensor-parallel worker joins as a subscriber through the custom
weight loader (:mod:`.worker`). Per version the bytes move and are built into shadow layers while
SGLang keeps generating; the swap is one short weight-update session (``begin_weight_update``,
``update_weights_from_tensor`` naming the swap, ``end_weight_update``), during which SGLang does
not generate. Two clients drive SGLang: :class:`EngineClient` (an in-process ``sglang.Engine``)
and :class:`HTTPClient` (a server started with ``--custom-weight-loader weightport.sglang.load``).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

import torch

from .. import errors
from .._tensors import dtype_name, local_of, named_tensors
from ..hf import checkpoint_tensors
from ..publisher import Publisher
from ..serving.ready import ReadyListener
from .worker import command_name

from . import LOADER  # what SGLang's --custom-weight-loader must list
logger = logging.getLogger("weightport.sglang")


def _carrier(command: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """The named tensors that carry `command`: one empty tensor named by it (no weights travel)."""
    return [(command_name(command), torch.empty(0, dtype=torch.uint8))]


def _refused(what: str, result: Any) -> str | None:
    """Why SGLang refused a call, from its (success, message, ...) result; None when it did not."""
    if isinstance(result, (tuple, list)) and result and result[0] is False:
        return f"SGLang refused {what}: {result[1] if len(result) > 1 else ''}"
    if isinstance(result, Mapping) and result.get("success") is False:
        return f"SGLang refused {what}: {result.get('message', '')}"
    return None


class EngineClient:
    """Drives an in-process ``sglang.Engine`` started with ``custom_weight_loader=[LOADER]``."""

    def __init__(self, engine: Any):
        self.engine = engine

    @property
    def tp_size(self) -> int:
        return int(self.engine.server_args.tp_size)

    def command(self, command: dict[str, Any], flush_cache: bool = False) -> None:
        """Runs `command` on every worker in one weight-update session (generation waits for it)."""
        steps = [("begin_weight_update", lambda: self.engine.begin_weight_update()),
                 ("update_weights_from_tensor", lambda: self.engine.update_weights_from_tensor(
                     _carrier(command), load_format=LOADER, flush_cache=flush_cache))]
        _session(steps, ("end_weight_update", lambda: self.engine.end_weight_update()))


class HTTPClient:
    """Drives an SGLang server (``python -m sglang.launch_server ... --custom-weight-loader
    weightport.sglang.load``) at `url` ("http://host:port")."""

    def __init__(self, url: str, timeout: float = 600.0):
        self.url, self.timeout = url.rstrip("/"), timeout
        self._tp_size: int | None = None

    def _call(self, route: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + route, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:  # SGLang answers a refusal with 400 and its reason
            try:
                return json.loads(e.read())
            except ValueError:
                raise errors.Unavailable(f"SGLang at {self.url}{route}: HTTP {e.code}") from e

    @property
    def tp_size(self) -> int:
        if self._tp_size is None:
            self._tp_size = int(self._call("/server_info")["tp_size"])
        return self._tp_size

    def command(self, command: dict[str, Any], flush_cache: bool = False) -> None:
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401  (torch's reductions: an empty tensor's storage)

        buf = io.BytesIO()
        ForkingPickler(buf).dump(_carrier(command))
        payload = base64.b64encode(buf.getvalue()).decode()
        body = {"serialized_named_tensors": [payload] * self.tp_size, "load_format": LOADER,
                "flush_cache": flush_cache}
        _session([("begin_weight_update", lambda: self._call("/begin_weight_update", {})),
                  ("update_weights_from_tensor", lambda: self._call("/update_weights_from_tensor", body))],
                 ("end_weight_update", lambda: self._call("/end_weight_update", {})))


def _session(steps, end) -> None:
    """Runs `steps` then `end` (always, once the first step succeeded); raises the first refusal."""
    name, call = steps[0]
    why = _refused(name, call())
    if why:
        raise errors.FailedPrecondition(why)
    try:
        for name, call in steps[1:]:
            why = _refused(name, call())
            if why:
                raise errors.FailedPrecondition(why)
    finally:
        why_end = _refused(end[0], end[1]())
    if why_end:
        raise errors.FailedPrecondition(why_end)


def _state_of(source: Any) -> Mapping[str, Any]:
    """The tensors to publish, under the names SGLang's loaders know: a checkpoint's (a
    transformers model's fused experts split per expert, as views)."""
    if isinstance(source, torch.nn.Module):
        source = dict(source.named_parameters())
    if isinstance(source, Mapping):
        return checkpoint_tensors(source)
    raise TypeError(f"weightport trainer: source must be a module or a state dict, got {type(source).__name__}")


class SGLangTrainer:
    """Publishes `source` (a module or a state dict) into the SGLang that `client` drives.

    Every SGLang worker first checks the trainer's checkpoint against its model (a name it does not
    have, or a shape its loader refuses, raises here before anything joins), then joins.
    ``host``: the address SGLang's workers reach this process at; ``transport``, ``delta``,
    ``chunk_bytes`` and ``timeout`` as for :class:`~weightport.Publisher`."""

    def __init__(self, client: EngineClient | HTTPClient, source: Any, *, host: str = "127.0.0.1",
                 coordinator: str | None = None, transport: str = "auto", delta: bool = True,
                 chunk_bytes: int = 0, timeout: float = 120.0):
        self.client, self.timeout, self.version = client, float(timeout), 0
        self.reports: list[dict[str, Any]] = []
        state = _state_of(source)
        tensors = [[name, list(local_of(t).shape), dtype_name(local_of(t), name)] for name, t in named_tensors(state)]
        secret = os.urandom(32)
        self.ready = ReadyListener(host, secret)
        self.publisher: Publisher | None = None
        notify = {"notify": self.ready.address, "secret_hex": secret.hex()}
        try:
            self._command({"op": "check", "tensors": tensors, **notify}, 0, "check the checkpoint")
            self.publisher = Publisher(coordinator or f"{host}:0", secret=secret, host=host, transport=transport,
                                       chunk_bytes=chunk_bytes, timeout=timeout)
            joined: list[Exception] = []

            def join_workers():
                try:
                    self._command({"op": "join", "tensors": tensors, "coordinator": self.publisher.coordinator,
                                   "transport": transport, "delta": delta, "timeout": timeout, **notify},
                                  0, "join")
                except Exception as e:  # raised on this thread once the publisher's join returns
                    joined.append(e)

            rpc = threading.Thread(target=join_workers, name="weightport-join-sglang")
            rpc.start()
            try:
                self.publisher.register(state)  # returns once every SGLang worker has joined too
            finally:
                rpc.join()
            if joined:
                raise joined[0]
        except BaseException:
            self.close(leave=False)
            raise

    def _command(self, command: dict[str, Any], version: int, what: str, flush_cache: bool = False) -> None:
        """Runs `command` on every worker and raises, naming the version and the rank, unless every
        one answered that it is done."""
        self.client.command(command, flush_cache)
        world = self.client.tp_size
        got = self.ready.answers(command["op"], version, timeout=min(self.timeout, 30.0), world=world)
        failed = {r: why for r, why in got.items() if why}
        silent = [r for r in range(world) if r not in got]
        if failed or silent:
            said = "; ".join(f"tensor-parallel rank {r}: {why}" for r, why in sorted(failed.items()))
            if silent:
                said += ("; " if said else "") + f"no answer from ranks {silent} (see SGLang's log)"
            raise errors.FailedPrecondition(f"weightport: SGLang could not {what}"
                                            f"{f' version {version}' if version else ''}: {said}")

    def send_weights(self, version: int | None = None) -> dict[str, Any]:
        """Publishes the source's current values as `version` (default: the next) and has SGLang
        swap them in; returns the report: version, bytes, update_s (publish to live), transfer_s
        (publish to committed; of it publish_s), build_s (committed to built on every worker, while
        SGLang may generate), pause_s (the swap session, while it does not) and worker_build (the
        slowest worker's seconds per phase). Raises naming the version when it is not live
        everywhere; SGLang then serves the version it had."""
        version = self.version + 1 if version is None else int(version)
        t0 = time.perf_counter()
        self.publisher.publish(version)
        t_published = time.perf_counter()
        outcome = self.publisher.wait(version, self.timeout) or {}
        t_commit = time.perf_counter()
        built = self.ready.wait(version, self.timeout)
        t1 = time.perf_counter()
        self._command({"op": "swap", "version": version, "timeout": self.timeout}, version, "swap in",
                      flush_cache=True)
        t2 = time.perf_counter()
        self.version = version
        report = {"version": version, "bytes": int(outcome.get("bytes", 0)), "update_s": t2 - t0,
                  "transfer_s": t_commit - t0, "publish_s": t_published - t0, "build_s": t1 - t_commit,
                  "pause_s": t2 - t1, "built_before_swap": built,
                  "worker_build": self.ready.phases(version) if built else {}}
        self.reports.append(report)
        return report

    def close(self, leave: bool = True) -> None:
        """Leaves the session (SGLang keeps serving the version it has)."""
        if leave and self.publisher is not None:
            try:
                self.client.command({"op": "leave"})
            except Exception as e:  # SGLang may be gone already
                logger.warning("weightport: SGLang's workers did not leave cleanly: %s", e)
        self.ready.close()
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
