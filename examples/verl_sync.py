"""verl's weight sync with weightport as its checkpoint engine: trainer and rollout ranks as Ray actors.

    python examples/verl_sync.py --model DIR --replicas R --steps N [--hosts K] [--json]

DIR holds a model's safetensors files. T trainer ranks (``--trainer-ranks``, default 2) each load it
and make N "training steps" (the same deterministic change on every rank, as verl's FSDP engine hands
every rank the whole gathered tensor); R rollout replicas each receive every version. The weights
move through verl's own machinery: ``CheckpointEngineRegistry`` resolves ``--backend`` (default
``weightport``) from ``--backend-module`` (default ``weightport.verl``, as
``checkpoint_engine.custom_backend_module`` does), verl's ``CheckpointEngineManager.update_weights``
runs each update over a ``RayWorkerGroup`` of the trainer actors and verl's own
``CheckpointEngineWorker`` actors on the rollout side. What runs here instead of a serving engine is
the rollout server adapter: it loads each received tensor into the replica's model (``--rollout-model``,
default DIR), checking its name, shape and dtype. After every step each replica's model must equal the
trainer's, bit for bit (blake2b of every tensor).

``--hosts K`` (root): the Ray cluster spans K testbed hosts (scripts/testbed, links at ``--rate``): the
trainer on h0, replica i on h(1 + i mod (K-1)); the bytes the trainer's host sent in each update are
read from its link. Without it, Ray runs on this machine alone.

``--kill-replica I --kill-at-step S``: replica I's actor is killed while version S moves; the others must
keep version S-1, the update must fail naming the lost worker, and after Ray restarts the actor the
next version must land everywhere.

``--add-replica-at-step S``: one more replica joins before step S (verl's ``add_replicas``); the
session is made again for the new group and version S must land on every replica, the new one too.

``--json`` prints ``{"steps": [{"version", "match", "update_s", "bytes", "bytes_from_trainer"}],
"ray_nodes": K, "backend"}``. Exit code 0 only if every step matched.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", required=True, help="directory with the model's *.safetensors")
    ap.add_argument("--rollout-model", help="the replicas' model (default: --model); its tensors must match")
    ap.add_argument("--replicas", type=int, default=2, help="rollout replicas, one worker each (default 2)")
    ap.add_argument("--steps", type=int, default=3, help="weight updates after the initial one (default 3)")
    ap.add_argument("--trainer-ranks", type=int, default=2, help="trainer ranks (default 2)")
    ap.add_argument("--hosts", type=int, default=0, help="testbed hosts the Ray cluster spans (root; default: none)")
    ap.add_argument("--rate", default="1gbit", help="testbed link rate with --hosts (default 1gbit)")
    ap.add_argument("--backend", default="weightport", help="checkpoint engine (default weightport)")
    ap.add_argument("--backend-module", default="weightport.verl",
                    help="module that registers it (checkpoint_engine.custom_backend_module)")
    ap.add_argument("--engine-kwargs", default="{}", help="JSON: checkpoint_engine.engine_kwargs[backend]")
    ap.add_argument("--bucket-mb", type=int, default=256, help="update_weights_bucket_megabytes (default 256)")
    ap.add_argument("--kill-replica", type=int, help="replica to kill while --kill-at-step's version moves")
    ap.add_argument("--kill-at-step", type=int, default=2, help="the step whose version it dies in (default 2)")
    ap.add_argument("--kill-after", type=float, default=0.5, help="seconds into that update (default 0.5)")
    ap.add_argument("--add-replica-at-step", type=int, help="a replica that joins late, before this step")
    ap.add_argument("--ray-address", help=argparse.SUPPRESS)  # set when --hosts re-runs this as the driver
    ap.add_argument("--timeout", type=float, default=600, help="seconds the whole run may take (default 600)")
    ap.add_argument("--json", action="store_true", help="print the per-step report as JSON")
    a = ap.parse_args(argv)
    if not any(pathlib.Path(a.model).glob("*.safetensors")):
        ap.error(f"--model {a.model}: no *.safetensors files there")
    if a.replicas < 1 or a.steps < 1 or a.trainer_ranks < 1:
        ap.error("--replicas, --steps and --trainer-ranks must be at least 1")
    if a.hosts == 1 or a.hosts < 0:
        ap.error("--hosts needs at least 2 (a trainer host and a replica host)")
    if a.kill_replica is not None and not (0 <= a.kill_replica < a.replicas and 1 <= a.kill_at_step < a.steps):
        ap.error("--kill-replica must name a replica and --kill-at-step a step before the last")
    try:
        a.engine_kwargs = json.loads(a.engine_kwargs)
        assert isinstance(a.engine_kwargs, dict)
    except (ValueError, AssertionError):
        ap.error(f"--engine-kwargs: not a JSON object: {a.engine_kwargs}")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.hosts and a.backend == "weightport":
        # The testbed's hosts share one kernel: UCX's "auto" would find shared memory between them.
        a.engine_kwargs.setdefault("transport", "tcp")
    if a.hosts and not a.ray_address:
        return run_on_testbed(a, argv if argv is not None else sys.argv[1:])
    sys.path.insert(0, str(HERE))
    import ray
    from verl_sync_actors import run

    if a.ray_address:
        ray.init(address=a.ray_address, logging_level="ERROR", log_to_driver=True)
    else:
        ray.init(num_cpus=a.trainer_ranks + a.replicas + 2, include_dashboard=False, logging_level="ERROR",
                 object_store_memory=128 << 20, runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}})
    try:
        report = run(a)
    except Exception as e:  # noqa: BLE001 -- a Ray error carries the remote traceback: say its last line
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        print(f"verl_sync: {type(e).__name__}: {lines[-1] if lines else e}", file=sys.stderr)
        return 2
    finally:
        ray.shutdown()
    if a.json:
        print(json.dumps(report))
    else:
        for s in report["steps"]:
            print(f"version {s['version']}: match={s['match']} update {s['update_s']:.2f} s, "
                  f"{s['bytes']} B moved, {s['bytes_from_trainer']} B from the trainer"
                  + (f" ({s['error']})" if s.get("error") else ""))
    return 0 if report["steps"] and all(s["match"] for s in report["steps"]) else 1


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def run_on_testbed(a: argparse.Namespace, argv: list[str]) -> int:
    """Brings up the testbed and a Ray node per host, runs this script again in h0 as the driver."""
    sys.path.insert(0, str(HERE))
    from ray_testbed import RayCluster

    with RayCluster(a.hosts, a.rate, env={"PYTHONPATH": _pythonpath()}) as cluster:
        driver = [sys.executable, str(pathlib.Path(__file__).resolve()), *argv,
                  "--ray-address", cluster.head_address]
        return cluster.run_driver(driver, timeout=a.timeout).returncode


if __name__ == "__main__":
    sys.exit(main())
