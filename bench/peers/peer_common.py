"""What the Python peers share: their common options, and the byte pattern they fill and check
(byte i of iteration `it` is (i*31 + it) & 0xff)."""
import argparse

import numpy as np

CHUNK = 64 << 20  # fill and check in 64 MiB pieces (a multiple of 256) to bound temporary memory


def period_chunk(nbytes, it):
    """Byte i is (i*31 + it) & 0xff, which depends on i mod 256 only: one chunk of it fits everywhere."""
    period = ((np.arange(256, dtype=np.uint32) * 31 + it) & 0xFF).astype(np.uint8)
    return np.resize(period, min(nbytes, CHUNK))


def fill(buf, it):
    ref = period_chunk(len(buf), it)
    for off in range(0, len(buf), CHUNK):
        piece = buf[off:off + CHUNK]
        piece[:] = ref[:len(piece)]


def check(buf, it):
    ref = period_chunk(len(buf), it)
    for off in range(0, len(buf), CHUNK):
        piece = buf[off:off + CHUNK]
        if not np.array_equal(piece, ref[:len(piece)]):
            return False
    return True


def rank_parser(description):
    """The options every peer takes; each adds its rendezvous options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout-s", type=int, default=300)
    return p


def parse_rank_args(p):
    a = p.parse_args()
    if a.world < 2 or not 0 <= a.rank < a.world or a.bytes <= 0 or not 1 <= a.repeat <= 250:
        p.error("need world >= 2, 0 <= rank < world, bytes > 0, 1 <= repeat <= 250")
    return a
