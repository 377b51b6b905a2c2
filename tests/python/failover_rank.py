"""One rank of a plan session as a process of its own, for the failover tests on the testbed: a
source (--role pub) holding rows [32 r, 32 r + 32) of a 64 x 32 f32 tensor, or a destination
(--role sub) holding all of it. It joins through etcd (coordinator "etcd://HOST:PORT", --session),
prints "joined", then follows commands on stdin, one per line, answering one line each:

  publish V   -> "published V"               (its rows of the tensor, each element + V)
  wait V      -> "committed V" | "aborted V: why"   (a source: the verdict)
                 "live V ok" | "live V bad" | "error: why"   (a destination: swapped and checked)
  quit        -> leaves
"""
import argparse
import sys

import numpy as np

import weightport

ROWS, COLS = 64, 32
FULL = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)


def say(line):
    print(line, flush=True)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--role", choices=["pub", "sub"], required=True)
    a.add_argument("--rank", type=int, default=0)
    a.add_argument("--world", type=int, default=1)
    a.add_argument("--store", required=True)
    a.add_argument("--session", required=True)
    a.add_argument("--secret", required=True)
    a.add_argument("--host", required=True)
    a.add_argument("--timeout", type=float, default=60.0)
    o = a.parse_args()
    common = dict(secret=o.secret, rank=o.rank, world_size=o.world, session=o.session, host=o.host,
                  transport="tcp", timeout=o.timeout)
    if o.role == "pub":
        rows = ROWS // o.world
        shard = FULL[rows * o.rank:rows * (o.rank + 1)].copy()
        member = weightport.Publisher(o.store, **common)
        member.register({"w": shard}, weightport.Sharded(o.rank, o.world))
    else:
        recv = {"w": np.zeros((ROWS, COLS), np.float32)}
        member = weightport.Subscriber(o.store, **common)
        member.bind(recv, mode="copy")
    say("joined")
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "quit":
                break
            v = int(arg)
            if cmd == "publish":
                shard[:] = FULL[rows * o.rank:rows * (o.rank + 1)] + v
                member.publish(v)
                say(f"published {v}")
            elif cmd == "wait" and o.role == "pub":
                try:
                    member.wait(v)
                    say(f"committed {v}")
                except weightport.Unavailable as e:
                    say(f"aborted {v}: {e}")
            elif cmd == "wait":
                member.wait(v)
                member.swap()
                say(f"live {v} {'ok' if np.array_equal(recv['w'], FULL + v) else 'bad'}")
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            say(f"error: {type(e).__name__}: {e}")
    member.close()


if __name__ == "__main__":
    main()
