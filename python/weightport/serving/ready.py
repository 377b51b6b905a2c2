"""A version is built: each serving engine's worker tells the trainer, so the swap calls (which pause
generation) are made only once there is nothing left to do but swap.

The engines' update calls (vLLM's sync-client protocol, SGLang's weight-update requests) block the
engine; a worker builds a committed version in the background, and a trainer that asked for the swap
right after the commit would hold generation for the build. So the trainer (rank 0) listens on a
small TCP port and each worker sends one line per built version: ``rank world version phases hmac``,
where `phases` is the build's seconds per phase in microseconds (``build,alloc,copy,process``) and
`hmac` the HMAC-SHA256 of the rest of the line under the session's secret. Lines that do not verify
are dropped. Without this channel (a notice lost, a firewall) nothing breaks: the trainer waits up
to its timeout and the swap call then waits for the build itself.

A worker also answers a trainer's command on it where the engine's own call cannot carry an error
back (SGLang's custom weight loader: an exception there ends the engine): the same line with a
fifth word, ``command:`` for done or ``command:reason`` for refused (the reason percent-encoded).
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
import urllib.parse

MAX_LINE = 1024
MAX_CONNECTIONS = 4096
PHASES = ("build_s", "alloc_s", "copy_s", "process_s")  # a worker's build, in the line's order


def _mac(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()


def _body(rank: int, world: int, version: int, phases: dict[str, float], answer: str = "") -> str:
    micros = ",".join(str(max(0, round(phases.get(k, 0.0) * 1e6))) for k in PHASES)
    return f"{rank} {world} {version} {micros}" + (f" {answer}" if answer else "")


def _answer(command: str, error: str) -> str:
    """A command's answer word: ``command:`` or ``command:reason`` (cut to fit a line, with its
    four numbers and 64-digit MAC, in MAX_LINE)."""
    reason = urllib.parse.quote(error[:600], safe="")
    return f"{command}:{reason[:MAX_LINE - 200]}"


class ReadyListener:
    """Trainer side: collects which worker has built which version."""

    def __init__(self, host: str, secret: bytes):
        self._secret = secret
        self._sock = socket.create_server((host, 0))
        self._sock.settimeout(0.5)
        self._built: dict[int, int] = {}  # worker rank -> newest version built
        self._gone: set[int] = set()  # ranks whose connection closed (their engine died or left)
        self._phases: dict[int, dict[str, float]] = {}  # worker rank -> that build's phases
        self._answers: dict[tuple[str, int], dict[int, str]] = {}  # (command, version) -> rank -> error
        self._world = 0
        self._cond = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, name="weightport-ready", daemon=True)
        self._accepter.start()

    @property
    def address(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"{host}:{port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            if len(self._threads) >= MAX_CONNECTIONS:
                conn.close()
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)
        buf = b""
        ranks: set[int] = set()  # who spoke on this connection: gone when it closes
        try:
            with conn:
                while not self._closed:
                    try:
                        data = conn.recv(4096)
                    except socket.timeout:
                        continue
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        rank = self._take(line)
                        if rank is not None:
                            ranks.add(rank)
                    if len(buf) > MAX_LINE:
                        return
        finally:
            with self._cond:
                self._gone |= ranks
                self._cond.notify_all()

    def _take(self, line: bytes) -> int | None:
        """Takes one notice; returns its rank when it verifies."""
        try:
            body, mac = line.decode().rsplit(" ", 1)
            rank, world, version, micros, *answer = body.split(" ")
            rank, world, version = int(rank), int(world), int(version)
            values = [int(x) for x in micros.split(",")]
        except ValueError:
            return None
        if (not hmac.compare_digest(mac, _mac(self._secret, body)) or not 0 <= rank < world
                or len(values) != len(PHASES) or len(answer) > 1 or (answer and ":" not in answer[0])):
            return None
        with self._cond:
            self._gone.discard(rank)  # spoke again (it reconnected)
            self._world = max(self._world, world)
            if answer:
                command, error = answer[0].split(":", 1)
                self._answers.setdefault((command, version), {})[rank] = urllib.parse.unquote(error)
            elif version > self._built.get(rank, 0):
                self._built[rank] = version
                self._phases[rank] = {k: v / 1e6 for k, v in zip(PHASES, values)}
            self._cond.notify_all()
        return rank

    def wait(self, version: int, timeout: float) -> bool:
        """Whether every worker still there has built `version` (or newer) within `timeout` seconds:
        one whose connection closed (its engine died) is not waited for."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                live = [r for r in range(self._world) if r not in self._gone]
                if live and all(self._built.get(r, 0) >= version for r in live):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def answers(self, command: str, version: int, timeout: float, world: int = 0) -> dict[int, str]:
        """Each worker's answer to `command` for `version` (rank -> "" when done, else why not),
        once every worker has answered or `timeout` seconds have passed (then only those that did).
        `world`: how many workers to expect when none has spoken yet. Unlike :meth:`wait`, a worker
        whose connection closed is still waited for: a worker reconnects to answer (its previous
        connection may close just before), and one that died is reported as silent."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = dict(self._answers.get((command, version), {}))
                world = max(world, self._world)
                if world and all(r in got for r in range(world)):
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    return got
                self._cond.wait(left)

    def phases(self, version: int) -> dict[str, float]:
        """The slowest worker's seconds per build phase of `version` (each phase's maximum over the
        workers whose newest build it is); empty when none reported it."""
        with self._cond:
            got = [p for r, p in self._phases.items() if self._built.get(r) == version]
        return {k: max(p[k] for p in got) for k in PHASES} if got else {}

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        self._accepter.join(timeout=2)


class ReadyNotifier:
    """Worker side: tells the trainer each version it has built; never raises."""

    def __init__(self, address: str, secret: bytes, rank: int, world: int, log=None):
        self._address, self._secret, self._rank, self._world = address, secret, rank, world
        self._sock: socket.socket | None = None
        self._log = log

    def built(self, version: int, phases: dict[str, float] | None = None) -> None:
        self._send(version, _body(self._rank, self._world, version, phases or {}))

    def answer(self, command: str, version: int, error: str = "") -> None:
        """Tells the trainer that `command` for `version` is done (`error` empty) or why not."""
        self._send(version, _body(self._rank, self._world, version, {}, _answer(command, error)))

    def _send(self, version: int, body: str) -> None:
        line = f"{body} {_mac(self._secret, body)}\n"
        for _ in range(2):  # one reconnect
            try:
                if self._sock is None:
                    host, _, port = self._address.rpartition(":")
                    self._sock = socket.create_connection((host, int(port)), timeout=5)
                self._sock.sendall(line.encode())
                return
            except OSError as e:
                self.close()
                err = e
        if self._log is not None:
            self._log("weightport: could not tell the trainer at %s about version %d: %s",
                      self._address, version, err)

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
