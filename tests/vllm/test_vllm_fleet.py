"""A fleet of vLLM engines fed by one trainer: two `vllm serve` replicas (separate processes on this
host) behind one weightport.vllm.FleetClient. The trainer sends one copy; the replicas relay it to
each other; both swap only once both have built, and both then generate the trainer's tokens. Then
one replica is killed: under a quorum the next version commits to the other, which serves it, and
the dead one is dropped from the fleet instead of failing every later update. A replacement started
late joins the trainer's next session. Without vLLM: how a fleet numbers its engines and which it
keeps."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/setup --vllm)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_models  # noqa: E402

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
TIMEOUT = 90.0  # the trainer's: how long a version may wait for a replica that never answers


def test_two_replicas_share_one_copy_and_a_dead_one_is_dropped(tmp_path):
    import contextlib

    from fleet_trainer import next_version, start
    from serve_process import vllm_server
    from vllm.distributed.weight_transfer import HTTPVLLMWeightSyncClient

    model_dir = tiny_models.make_model("llama", str(tmp_path / "llama"), hidden=256, layers=2, positions=128)
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(vllm_server(model_dir, tmp_path / f"serve{i}.log")) for i in range(2)]
        bases = [s.base for s in servers]
        model, sync, fleet = start(model_dir, bases, timeout=TIMEOUT, min_replicas=1, quorum=1)
        model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        for version in (1, 2):
            report = next_version(model, sync, version, model_dir, bases)
            assert report["built_before_swap"] and all(report["tokens_match"]), report
        # One copy leaves the trainer; the second replica's comes from the first.
        assert report["source_bytes"] == model_bytes and report["relayed_bytes"] == model_bytes, report
        assert fleet.lost == {}

        os.killpg(servers[1].process.pid, signal.SIGKILL)
        servers[1].process.wait(30)
        started = time.monotonic()
        report = next_version(model, sync, 3, model_dir, bases[:1])
        assert all(report["tokens_match"]), report
        assert time.monotonic() - started < TIMEOUT / 2, report  # not held for the dead one's timeout
        assert list(fleet.lost) == [1], fleet.lost
        assert all(next_version(model, sync, 4, model_dir, bases[:1])["tokens_match"])  # the fleet goes on

        # A replacement comes up late: it joins the trainer's next session, and from then on the
        # version goes to both (each worker keeps its placement; this version moves whole).
        late = stack.enter_context(vllm_server(model_dir, tmp_path / "serve-late.log"))
        fleet.add(HTTPVLLMWeightSyncClient(late.base, timeout=TIMEOUT))
        started = time.monotonic()
        sync = sync.reform()
        print(f"the fleet re-formed with the late replica in {time.monotonic() - started:.2f} s")
        assert fleet.session == [0, 2] and fleet.lost == {1: fleet.lost[1]}, (fleet.session, fleet.lost)
        report = next_version(model, sync, 5, model_dir, [bases[0], late.base])
        assert report["tokens_match"] == [True, True] and report["relayed_bytes"] == model_bytes, report
        sync.shutdown()


class FakeEngine:
    """A sync client that records its calls; `fail` maps a call name to the exception it raises."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail or {}

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if name in self.fail:
            raise self.fail[name]

    def init_weight_transfer_engine(self, info):
        self._call("init", info.get("replica"), info.get("replicas"))

    def start_weight_update(self):
        self._call("start")

    def update_weights(self, info):
        self._call("check" if info.get("check_only") else "update", info["version"])

    def finish_weight_update(self, weight_version=None):
        self._call("finish", weight_version)

    def shutdown_weight_transfer_engine(self):
        self._call("shutdown")


def test_a_fleet_numbers_its_engines_and_none_swaps_unless_all_have_the_version():
    from weightport.vllm import FleetClient

    good, refusing = FakeEngine(), FakeEngine({"check": ValueError("version 3 is not built")})
    fleet = FleetClient([good, refusing])
    fleet.init_weight_transfer_engine({"coordinator": "x"})
    assert good.calls[0] == ("init", 0, 2) and refusing.calls[0] == ("init", 1, 2)
    with pytest.raises(ValueError, match="replica 1 of 2: version 3 is not built"):
        fleet.update_weights({"version": 3})
    assert ("update", 3) not in good.calls and ("finish", None) in good.calls  # checked, closed, not swapped


def test_an_engine_down_when_the_trainer_starts_is_left_out_and_joins_a_later_session():
    from weightport.vllm import FleetClient

    up, down = FakeEngine(), FakeEngine({"init": ConnectionRefusedError("refused")})
    fleet = FleetClient([FakeEngine(), down, up], min_replicas=2)
    fleet.init_weight_transfer_engine({"tensors": []})  # the trainer's check: who answers
    assert fleet.session == [0, 2] and list(fleet.lost) == [1]
    fleet.init_weight_transfer_engine({"coordinator": "x"})
    assert up.calls[-1] == ("init", 1, 2), "numbered among the engines in the session"
    del down.fail["init"]  # it came up; and one more is added
    added = FakeEngine()
    assert fleet.add(added) == 3
    fleet.init_weight_transfer_engine({"tensors": []})
    fleet.init_weight_transfer_engine({"coordinator": "x"})
    assert fleet.session == [0, 1, 2, 3] and fleet.lost == {}
    assert (down.calls[-1], up.calls[-1], added.calls[-1]) == (("init", 1, 4), ("init", 2, 4), ("init", 3, 4))
    with pytest.raises(ConnectionError, match="replica 0 of 1"):  # every engine or none: nothing is left out
        FleetClient([FakeEngine({"init": ConnectionRefusedError("refused")})]).init_weight_transfer_engine({})


def test_an_unreachable_engine_is_dropped_only_while_enough_remain():
    from weightport.errors import Error
    from weightport.vllm import FleetClient

    def fleet_of(min_replicas):
        return FleetClient([FakeEngine(), FakeEngine({"check": ConnectionRefusedError("refused")})],
                           min_replicas=min_replicas)

    tolerant = fleet_of(1)
    tolerant.update_weights({"version": 2})
    assert list(tolerant.lost) == [1] and ("update", 2) in tolerant.clients[0].calls
    tolerant.finish_weight_update("2")
    assert ("finish", "2") not in tolerant.clients[1].calls  # dropped: not called again
    with pytest.raises(ConnectionError, match="replica 1 of 2"):
        fleet_of(None).update_weights({"version": 2})  # every engine or none

    class Odd(Exception):  # an exception type that cannot be rebuilt from a message alone
        def __init__(self, a, b):
            super().__init__(f"{a} {b}")

    with pytest.raises(Error, match="replica 0 of 1: odd thing"):
        FleetClient([FakeEngine({"start": Odd("odd", "thing")})]).start_weight_update()
