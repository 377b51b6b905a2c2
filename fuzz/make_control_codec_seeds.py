#!/usr/bin/env python3
"""Writes the seed corpus of control_codec_fuzz: valid control frames (see control/protocol.h).

Frames are numbered 0 and MACed with the all-zero handshake key, as the fuzz target decodes them.
Usage: fuzz/make_control_codec_seeds.py [out_dir]   (default: fuzz/control_codec next to this file)
"""
import hashlib
import hmac
import os
import struct
import sys

KEY = bytes(32)


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def frame(msg_type, payload, seq=0):
    mac = hmac.new(KEY, bytes([msg_type]) + struct.pack("<Q", seq) + payload, hashlib.sha256).digest()
    return struct.pack("<IBQ", len(payload), msg_type, seq) + payload + mac


SEEDS = {
    "hello": frame(1, bytes([2]) + s("sub-2")),
    "challenge": frame(2, bytes(range(32))),
    "proof": frame(3, bytes(range(32)) + bytes(range(32, 64))),
    "welcome": frame(4, s("coord") + bytes(32)),
    "refused": frame(5, s("authentication failed")),
    "manifest": frame(6, s('{"version":1,"tensors":[]}')),
    "region_keys": frame(7, s(b"ucx-addr") + struct.pack("<I", 2) + struct.pack("<Q", 1) + s(b"rkey-1")
                         + struct.pack("<Q", 2) + s(b"")),
    "placement": frame(8, s('{"tensors":["lm_head.weight"]}')),
    "update_begin": frame(9, struct.pack("<QQQQQ", 7, 3, 0, 2, 30_000)),
    "chunks_verified": frame(10, struct.pack("<QQQQQ", 7, 128, 128 << 20, 2_500_000, 1)),
    "update_failed": frame(11, struct.pack("<Q", 7) + s("hash mismatch")),
    "commit": frame(12, struct.pack("<QQ", 7, 2)),
    "abort": frame(13, struct.pack("<Q", 7) + s("subscriber lost")),
    "heartbeat": frame(14, b""),
    "bye": frame(15, b""),
    "committed": frame(16, struct.pack("<QQ", 7, 1500)),
    # A destination's join (no device copy) and a source's that publishes on its device.
    "plan_join": frame(17, bytes([1]) + struct.pack("<IQ", 2, 0xFEED) + s(b"ucx-addr") + s(b"arena-key")
                       + s(b"") + s(b"")),
    "plan_join_device": frame(17, bytes([0]) + struct.pack("<IQ", 0, 0xFEED) + s(b"ucx-addr") + s(b"arena-key")
                              + s(b"device-key") + s("cuda")),
    "plan_peers": frame(18, struct.pack("<I", 2)
                        + bytes([0]) + struct.pack("<I", 0) + s(b"a0") + s(b"k0") + s(b"d0") + s("cuda")
                        + bytes([1]) + struct.pack("<I", 3) + s(b"a3") + s(b"k3") + s(b"") + s(b"")),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "control_codec")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
