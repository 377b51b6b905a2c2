#!/usr/bin/env python3
"""mooncake_transfer: the Mooncake Transfer Engine (TCP) peer baseline of the fan-out benchmark.

Mooncake has no broadcast. Every rank registers a --bytes buffer with a TransferEngine (protocol "tcp",
metadata "P2PHANDSHAKE", so no etcd). Then, per iteration, either
  --mode read  (default): every receiver reads the source's buffer at once (concurrent pulls), or
  --mode write: the source writes its buffer to each receiver in turn (sequential pushes).
A TCP side channel at --master (rank 0 listens) carries what the engine does not: receivers' segment names
and buffer addresses, the barrier before each iteration and the "have it" after. One warm-up and --repeat
timed iterations, each timed from the barrier to this rank having the bytes; the root's time ends when
every receiver has them. Receivers check the bytes outside the timed region. Prints one JSON line on
stdout; exit 1 on failure, 2 for usage, 3 (with an "error" key in the JSON) when the engine cannot run.
"""
import faulthandler
import json
import socket
import sys
import time

import numpy as np

from peer_common import check, fill, parse_rank_args, rank_parser

WATCHDOG_SLACK_S = 10  # an iteration may take --timeout-s plus this before the watchdog ends the process


class EngineUnavailable(Exception):
    """Mooncake cannot run on this host (exit 3)."""


class Peer:
    """One side-channel connection: JSON messages, one per line, every read bounded by the socket timeout."""

    def __init__(self, sock):
        self.sock, self.file = sock, sock.makefile("rwb")
        self.info = {}  # on rank 0, the receiver's hello: rank, segment, addr

    def send(self, **msg):
        self.file.write(json.dumps(msg).encode() + b"\n")
        self.file.flush()

    def recv(self, expect):
        who = f"rank {self.info.get('rank', 0)}"  # the other end: a receiver, or rank 0
        try:
            line = self.file.readline()
        except TimeoutError:
            raise RuntimeError(f"side channel: no '{expect}' from {who} within the timeout") from None
        if not line:
            raise RuntimeError(f"side channel: {who} closed it while we awaited '{expect}'")
        msg = json.loads(line)
        if msg.get("op") != expect:
            raise RuntimeError(f"side channel: expected '{expect}', got {msg}")
        return msg


def accept_receivers(master, n, timeout_s):
    """Rank 0: listens on master and returns the n receivers' Peers, indexed by rank - 1."""
    host, port = master.rsplit(":", 1)
    srv = socket.create_server((host, int(port)))
    srv.settimeout(timeout_s)
    peers = [None] * n
    try:
        for i in range(n):
            try:
                sock, _ = srv.accept()
            except TimeoutError:
                raise RuntimeError(f"only {i} of {n} receivers reached {master} in {timeout_s} s") from None
            sock.settimeout(timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = Peer(sock)
            peer.info = peer.recv("hello")
            r = peer.info["rank"]
            if not 1 <= r <= n or peers[r - 1]:
                raise RuntimeError(f"side channel: unexpected or duplicate receiver rank {r}")
            peers[r - 1] = peer
    finally:
        srv.close()
    return peers


def connect_root(master, timeout_s):
    """Receivers: connects to rank 0's side channel, retrying while it is not listening yet."""
    host, port = master.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot reach rank 0's side channel at {master}: {e}") from e
            time.sleep(0.2)
    sock.settimeout(timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Peer(sock)


def start_engine(local, nbytes):
    """Returns (engine, segment name, buffer); raises EngineUnavailable when Mooncake cannot run here."""
    try:
        from mooncake.engine import TransferEngine
    except ImportError as e:  # e.g. the CUDA wheel on a host without libcuda.so.1
        raise EngineUnavailable(f"import mooncake.engine: {e}") from e
    engine = TransferEngine()
    rc = engine.initialize(local, "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise EngineUnavailable(f"TransferEngine.initialize({local!r}, 'P2PHANDSHAKE', 'tcp') returned {rc}")
    buf = np.empty(nbytes, dtype=np.uint8)
    rc = engine.register_memory(buf.ctypes.data, nbytes)
    if rc != 0:
        raise EngineUnavailable(f"register_memory of {nbytes} bytes returned {rc}")
    # With P2PHANDSHAKE a segment is named by the engine's RPC address.
    return engine, f"{local}:{engine.get_rpc_port()}", buf


def run_root(a, engine, buf, seg):
    peers = accept_receivers(a.master, a.world - 1, a.timeout_s)
    for p in peers:
        if p.info.get("mode") != a.mode:
            mode = p.info.get("mode")
            raise RuntimeError(f"rank {p.info['rank']} runs --mode {mode}, rank 0 runs --mode {a.mode}")
        p.send(op="hello", segment=seg, addr=buf.ctypes.data)
    seconds = []
    for it in range(a.repeat + 1):  # iteration 0 is the warm-up
        # The engine's sync calls take no timeout: a watchdog thread ends the process (exit 1, traceback
        # on stderr) if an iteration hangs. It fires after the side channel's own timeouts would.
        faulthandler.dump_traceback_later(a.timeout_s + WATCHDOG_SLACK_S, exit=True)
        fill(buf, it)
        for p in peers:
            p.recv("ready")
        for p in peers:
            p.send(op="go", it=it)
        t0 = time.perf_counter()
        if a.mode == "write":
            for p in peers:
                rc = engine.transfer_sync_write(p.info["segment"], buf.ctypes.data, p.info["addr"], a.bytes)
                if rc != 0:
                    raise RuntimeError(f"transfer_sync_write to rank {p.info['rank']} returned {rc}")
                p.send(op="written", it=it)
        for p in peers:
            p.recv("have")
        t1 = time.perf_counter()
        if it > 0:
            seconds.append(t1 - t0)
    faulthandler.cancel_dump_traceback_later()
    return seconds, True


def run_receiver(a, engine, buf, seg):
    root = connect_root(a.master, a.timeout_s)
    root.send(op="hello", rank=a.rank, mode=a.mode, segment=seg, addr=buf.ctypes.data)
    src = root.recv("hello")
    seconds, verified = [], True
    for it in range(a.repeat + 1):
        faulthandler.dump_traceback_later(a.timeout_s + WATCHDOG_SLACK_S, exit=True)
        root.send(op="ready", it=it)
        root.recv("go")
        t0 = time.perf_counter()
        if a.mode == "read":
            rc = engine.transfer_sync_read(src["segment"], buf.ctypes.data, src["addr"], a.bytes)
            if rc != 0:
                raise RuntimeError(f"transfer_sync_read from rank 0 returned {rc}")
        else:
            root.recv("written")
        t1 = time.perf_counter()
        root.send(op="have", it=it)
        if it > 0:
            seconds.append(t1 - t0)
        if not check(buf, it):
            print(f"mooncake_transfer: rank {a.rank}: iteration {it}: received bytes differ from the pattern",
                  file=sys.stderr)
            verified = False
    faulthandler.cancel_dump_traceback_later()
    return seconds, verified


def main():
    p = rank_parser(__doc__.splitlines()[0])
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's side channel")
    p.add_argument("--local", required=True, help="this rank's address for the transfer engine")
    p.add_argument("--mode", choices=["read", "write"], default="read")
    a = parse_rank_args(p)

    result = {"system": "mooncake-tcp", "rank": a.rank, "world": a.world, "bytes": a.bytes}
    try:
        engine, seg, buf = start_engine(a.local, a.bytes)
        run = run_root if a.rank == 0 else run_receiver
        seconds, verified = run(a, engine, buf, seg)
    except EngineUnavailable as e:
        print(f"mooncake_transfer: rank {a.rank}: cannot run: {e}", file=sys.stderr)
        print(json.dumps({**result, "seconds": [], "verified": False, "error": str(e)}))
        return 3
    except Exception as e:  # side channel (OSError, socket.timeout) or a failed transfer: name it and fail
        print(f"mooncake_transfer: rank {a.rank} of {a.world}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({**result, "seconds": [round(s, 6) for s in seconds], "verified": verified}))
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
