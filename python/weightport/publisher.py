"""The trainer side: weightport.Publisher."""

from __future__ import annotations

import os
from typing import Any, Iterable

from . import _core, _options
from ._session import Member, load_secret
from ._tensors import copy_into, dtype_name, local_of
from .layouts import Layout
from .naming import Rename, Rule


class Coordinator:
    """The coordinator of one session, on its own: it makes the plan once every rank has joined and
    runs each version's commit. :class:`Publisher` rank 0 starts one unless ``serve=False``; start it
    yourself when its address must be known before any rank has its tensors (an RL framework that
    hands addresses out before the first update). ``address``: "host:port" (port 0 picks a free one).
    The other arguments are :class:`Publisher`'s."""

    def __init__(self, address: str = "127.0.0.1:0", *, secret: bytes | str | os.PathLike, chunk_bytes: int = 0,
                 relay_fanout: int = 1, timeout: float = 60.0, quorum: int = 0, rotate_keys: bool = False,
                 store: str = "", session: str = "default", rejoin: bool = False):
        host, port = _options.address(address, "the coordinator's address")
        self._core = _core.Service(load_secret(secret), host or "127.0.0.1", port,
                                   _options.whole("chunk_bytes", chunk_bytes),
                                   _options.whole("relay_fanout", relay_fanout), _options.number("timeout", timeout),
                                   _options.whole("quorum", quorum), bool(rotate_keys), str(store), str(session),
                                   bool(rejoin))

    @property
    def address(self) -> str:
        """The "host:port" ranks connect to."""
        return self._core.address

    def wait_outcome(self, version: int, timeout: float, rollback: bool = False, from_index: int = 0) -> dict:
        """The report of `version` once it is committed or aborted (see :meth:`Publisher.wait`)."""
        return self._core.wait_outcome(_options.version(version), _options.wait_seconds(timeout), rollback,
                                       int(from_index))

    def outcome_count(self) -> int:
        """How many versions (and rollbacks) have an outcome so far."""
        return self._core.outcome_count()

    def plan_json(self) -> str:
        """The plan, as JSON ("" before every rank has joined)."""
        return self._core.plan_json()

    def stop(self) -> None:
        """Says goodbye to every rank and stops. Idempotent."""
        self._core.stop()


class Publisher(Member):
    """One rank of the group that holds a model's weights (trainer ranks, a weight server).

    ``rank`` 0 also runs the coordinator at ``coordinator`` ("host:port"; port 0 picks a free one,
    see :attr:`coordinator`), unless ``serve=False``. Every publisher rank and every subscriber rank
    connects to it with the same ``secret`` (bytes, or a path to a file holding them).

    On the rank that runs the coordinator, ``quorum`` N > 0 commits each version once every
    subscriber still there has it and at least N do (a lost one is dropped; 0: every subscriber or
    none), and ``rotate_keys=True`` gives every rank new transport keys after each version, so a
    subscriber that dropped out cannot read or write later versions: then every publisher and
    subscriber rank is created with ``rotate_keys=True``. ``rejoin=True`` lets a rank that left (a
    subscriber closed or restarted) come back once versions flow: a new ``Subscriber`` with the same
    rank and layout registers again and receives in full from the next version on, through the
    relays the plan gives it (its peers) where it has them; with a quorum the others go on meanwhile.

    A coordinator that survives being killed: run two or more ``weightport coordinator
    --rendezvous etcd://HOST:PORT --session NAME`` processes and give every rank
    ``coordinator="etcd://HOST:PORT"`` and ``session=NAME``. The ranks find the leader in etcd and,
    when it dies, join the one that takes over; the version in flight is completed or aborted as
    etcd records it, the same on every rank.

    ``rename`` maps the registered tensors' names to the names the plan matches with the
    subscribers' (a :class:`weightport.naming.Rename`, a dict of segment replacements or a callable;
    default: the names as given). ``rename=weightport.naming.UNWRAP`` publishes a DDP, FSDP (v1) or
    torch.compile-wrapped model (``module.fc.weight``) to replicas of the bare model (``fc.weight``).
    The layout still sees the tensors' own names; errors from the plan name the mapped ones.

    Usage::

        pub = weightport.Publisher("10.0.0.1:29600", rank=r, world_size=n, secret=path)
        pub.register(model.state_dict(), layout=weightport.Sharded(r, n))  # waits for every rank
        for step in ...:
            train(...)
            pub.publish(step)          # copies the weights out, then returns; they move meanwhile
        pub.close()
    """

    _JOIN = "register()"

    def __init__(self, coordinator: str = "127.0.0.1:0", *, secret: bytes | str | os.PathLike,
                 rank: int = 0, world_size: int = 1, serve: bool | None = None, host: str | None = None,
                 transport: str = "auto", chunk_bytes: int = 0, relay_fanout: int = 1,
                 timeout: float = 60.0, quorum: int = 0, rotate_keys: bool = False,
                 session: str = "default", rename: Rename | Rule | None = None, rejoin: bool = False):
        secret = load_secret(secret)
        # Checked on every rank, whether it serves or not: a value no rank could use is refused.
        chunk_bytes = _options.whole("chunk_bytes", chunk_bytes)
        relay_fanout, quorum = _options.whole("relay_fanout", relay_fanout), _options.whole("quorum", quorum)
        self._service = None
        store = _options.coordinator(coordinator)
        if serve is None:
            serve = rank == 0 and not store  # with a store the coordinators run on their own
        if serve:
            self._service = Coordinator("127.0.0.1:0" if store else coordinator, secret=secret,
                                        chunk_bytes=chunk_bytes, relay_fanout=relay_fanout, timeout=timeout,
                                        quorum=quorum, rotate_keys=rotate_keys, store=store, session=session,
                                        rejoin=rejoin)
            if not store:
                coordinator = self._service.address
        self._coordinator = coordinator
        super().__init__(coordinator, secret, rank, world_size, host, transport, timeout, session, rename)
        self._args.rotate_keys = bool(rotate_keys)

    @property
    def coordinator(self) -> str:
        """The coordinator's "host:port" (the one chosen when port 0 was given)."""
        return self._coordinator

    def register(self, tensors: Any, layout: Layout | None = None) -> "Publisher":
        """Declares the weights this rank holds and joins the group: returns once every publisher and
        subscriber rank has registered and the plan is made (or raises, naming the rank or tensor at
        fault). `tensors`: a state dict, a module or (name, tensor) pairs; DTensors give their own
        layout, other tensors are placed by `layout` (default: whole). Two names that the ``rename``
        rule maps to one, or a name it maps to "", raise ValueError naming the originals."""
        self._join(_core.Publisher, tensors, layout)
        return self

    def publish(self, version: int, wait: bool = False) -> None:
        """Publishes the registered tensors' current values as `version` (larger than the last):
        waits for the previous version to finish, copies the weights into the send buffer, hashes
        them and returns; the transfer runs in the background (training may go on). With
        ``wait=True``, returns only once `version` is committed everywhere."""
        core = self._need_core()
        core.wait_idle(self._timeout)
        for b in self._bound:
            if b.shard >= 0:
                copy_into(core.shard_array(b.shard), b.tensor)
        core.publish(_options.version(version))
        if wait:
            self.wait(version)

    def publish_tensors(self, version: int, tensors: Iterable[tuple[str, Any]], wait: bool = False) -> None:
        """Publishes `version` from the tensors given here instead of the registered ones: (name,
        tensor) pairs, each this rank's part of a registered tensor in its registered shape and dtype,
        every registered tensor exactly once. A generator is read once, one tensor at a time, each
        copied into the send buffer as it comes: tensors made one by one (an FSDP engine gathering
        each in turn) never need to exist together. On a name, shape or dtype that does not match,
        raises ValueError naming the tensor, and the version is not published."""
        core = self._need_core()
        core.wait_idle(self._timeout)
        by_name = {b.name: b for b in self._bound}
        seen: set[str] = set()
        for name, tensor in tensors:
            b = by_name.get(name)
            if b is None:
                raise ValueError(f"tensor '{name}' was not registered (registered: {len(by_name)} tensors)")
            if name in seen:
                raise ValueError(f"tensor '{name}' is given twice")
            seen.add(name)
            local = local_of(tensor)
            dtype = dtype_name(local, name)
            if dtype != b.dtype or list(local.shape) != b.local_shape:
                raise ValueError(f"tensor '{name}': registered as {b.dtype} {b.local_shape}, "
                                 f"given {dtype} {list(local.shape)}")
            if b.shard >= 0:
                copy_into(core.shard_array(b.shard), local)
        missing = [n for n in by_name if n not in seen]
        if missing:
            raise ValueError(f"{len(missing)} registered tensors were not given, the first '{missing[0]}'")
        core.publish(_options.version(version))
        if wait:
            self.wait(version)

    def wait(self, version: int, timeout: float | None = None) -> dict | None:
        """Waits until `version` is committed by every subscriber (with a quorum: every one still
        there); raises ``weightport.Unavailable`` with the reason when it was aborted. On the rank
        that runs the coordinator, returns its report: bytes moved, seconds, ``rekey_seconds`` (the
        move to new keys after it, with ``rotate_keys``), ``dropped`` (the subscribers left out,
        with why) and ``rejoined`` (the ranks let back in before it, with ``rejoin``)."""
        self._need_core().wait(_options.version(version), self._seconds(timeout))
        if self._service is not None:
            return self._service.wait_outcome(int(version), self._seconds(timeout))
        return None

    def rollback(self, version: int, timeout: float | None = None) -> dict | None:
        """Makes `version`, committed before, live again on every subscriber, or on none: each
        restores the copy it kept (``Subscriber(keep_versions=K)``), and the version they had stays
        live everywhere when any of them cannot (it no longer keeps `version`, or a reader still holds
        the copy it must restore into); then this raises ``weightport.Unavailable`` naming the
        subscriber and why. For an RL run that finds a bad step: restore the trainer's weights too,
        then publish on with versions newer than every one published. On the rank that runs the
        coordinator, returns its report (``rollback`` True, ``bytes`` 0: nothing crosses a link)."""
        core = self._need_core()
        start = self._service.outcome_count() if self._service is not None else 0
        core.rollback(_options.version(version), self._seconds(timeout))
        if self._service is not None:
            return self._service.wait_outcome(int(version), self._seconds(timeout), True, start)
        return None

    def close(self) -> None:
        """Ends this rank's session; the coordinator (rank 0) says goodbye to every rank. Idempotent."""
        if self._service is not None:
            self._service.stop()
        super().close()
