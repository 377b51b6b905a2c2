"""The byte pattern the Python peers fill and check: byte i of iteration `it` is (i*31 + it) & 0xff."""
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
