#!/usr/bin/env python3
"""torch_broadcast: the torch.distributed (gloo backend) peer baseline of the fan-out benchmark.

Rank 0 broadcasts --bytes to ranks 1..W-1 with dist.broadcast on a uint8 CPU tensor. One warm-up and
--repeat timed iterations, each timed from a barrier before the broadcast to its end on this rank, and on
the root to a barrier after it (every receiver has the bytes). Receivers check the bytes outside the
timed region. Prints one JSON line on stdout; errors go to stderr, exit 1 (2 for usage).
"""
import datetime
import json
import os
import sys
import time

from peer_common import check, fill, parse_rank_args, rank_parser


def main():
    p = rank_parser(__doc__.splitlines()[0])
    p.add_argument("--master", required=True, help="ADDR:PORT where rank 0 runs the TCP store")
    p.add_argument("--iface", required=True, help="network interface for gloo (GLOO_SOCKET_IFNAME)")
    a = parse_rank_args(p)

    # Must be set before the process group creates its gloo devices.
    os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    import torch
    import torch.distributed as dist

    try:
        # The timeout bounds the rendezvous and every collective.
        dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                                world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout_s))
        buf = torch.empty(a.bytes, dtype=torch.uint8)
        seconds, verified = [], True
        for it in range(a.repeat + 1):  # iteration 0 is the warm-up
            if a.rank == 0:
                fill(buf.numpy(), it)
            dist.barrier()
            t0 = time.perf_counter()
            dist.broadcast(buf, src=0)
            if a.rank == 0:
                dist.barrier()  # the root is done when every receiver is
            t1 = time.perf_counter()
            if a.rank != 0:
                dist.barrier()
            if it > 0:
                seconds.append(t1 - t0)
            if a.rank != 0 and not check(buf.numpy(), it):
                print(f"torch_broadcast: rank {a.rank}: iteration {it}: received bytes differ from the "
                      "pattern", file=sys.stderr)
                verified = False
        dist.destroy_process_group()
    except Exception as e:  # RuntimeError, DistBackendError, DistNetworkError, ...: name it and fail
        # The first line says what failed; the rest of torch's messages is a C++ stack trace.
        why = (str(e).splitlines() or [""])[0]
        print(f"torch_broadcast: rank {a.rank} of {a.world}: {type(e).__name__}: {why}", file=sys.stderr)
        return 1

    print(json.dumps({"system": "torch-gloo", "rank": a.rank, "world": a.world, "bytes": a.bytes,
                      "seconds": [round(s, 6) for s in seconds], "verified": verified}))
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
