"""The verl checkpoint engine's contract, without a Ray cluster: verl's registry resolves it from
custom_backend_module, bad options and bad groups are refused with clear errors, and a Ray node
whose address other hosts cannot reach is named."""

import pytest
from verl.checkpoint_engine import CheckpointEngineRegistry
from verl.utils.import_utils import import_external_libs

import weightport.ray as wp_ray


def engine_class():
    import_external_libs("weightport.verl")  # what verl does with custom_backend_module
    return CheckpointEngineRegistry.get("weightport")


def test_verl_registry_resolves_weightport_from_the_custom_backend_module():
    cls = engine_class()
    assert cls.__module__ == "weightport.verl.engine"
    engine = CheckpointEngineRegistry.new("weightport", bucket_size=1 << 20, is_master=False, transport="tcp")
    assert isinstance(engine, cls) and engine.options["transport"] == "tcp"
    assert engine.wire_format == "named_tensors"


def test_an_unknown_engine_option_is_named():
    engine_class()
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['trnasport'\].*known: \["):
        CheckpointEngineRegistry.new("weightport", bucket_size=1, trnasport="tcp")
    with pytest.raises(ValueError, match="trainer_layout must be one of"):
        CheckpointEngineRegistry.new("weightport", bucket_size=1, trainer_layout="rows")


def _meta(master=None, node="n0", broken=False):
    m = {"node_id": node, "host": "198.18.0.10", "joined": False, "broken": broken}
    if master is not None:
        m["master"] = master
    return m


MASTER = {"coordinator": "198.18.0.10:1", "manifest": "198.18.0.10:2", "secret": "00", "trainers": None,
          "rollouts": None}


def test_topology_gives_every_worker_its_role_and_rank():
    actor, rollout = engine_class().build_topology(2, 3, [_meta(MASTER), _meta(), _meta(), _meta(), _meta()])
    assert actor["role"] == ["trainer"] * 2 and actor["rank"] == [0, 1] and actor["rollouts"] == [3] * 2
    assert rollout["role"] == ["rollout"] * 3 and rollout["rank"] == [0, 1, 2] and rollout["trainers"] == [2] * 3
    assert actor["rebuild"] == [False] * 2


def test_topology_without_a_master_on_trainer_rank_0_is_refused():
    with pytest.raises(ValueError, match="trainer rank 0, and only it, must be built with is_master=True"):
        engine_class().build_topology(2, 1, [_meta(), _meta(MASTER), _meta()])


def test_a_resized_group_or_a_failed_join_makes_a_new_session():
    live = {**MASTER, "trainers": 1, "rollouts": 2}
    cls = engine_class()
    _, same = cls.build_topology(1, 2, [_meta(live), _meta(), _meta()])
    _, grown = cls.build_topology(1, 3, [_meta(live), _meta(), _meta(), _meta()])
    _, broken = cls.build_topology(1, 2, [_meta(live), _meta(), _meta(broken=True)])
    assert same["rebuild"] == [False] * 2 and grown["rebuild"] == [True] * 3 and broken["rebuild"] == [True] * 2


def test_an_unreachable_ray_node_is_named():
    assert wp_ray.check_reachable("198.18.0.11", "node-a", 3) == "198.18.0.11"
    assert wp_ray.check_reachable("127.0.0.1", "node-a", 1) == "127.0.0.1"  # one node: loopback is fine
    with pytest.raises(wp_ray.UnreachableNode, match="Ray node node-b reports address 127.0.0.1.*--node-ip-address"):
        wp_ray.check_reachable("127.0.0.1", "node-b", 2)
    with pytest.raises(wp_ray.UnreachableNode, match="not an IP address"):
        wp_ray.check_reachable("", "node-c", 2)


def test_hosts_of_groups_ranks_by_node():
    assert wp_ray.hosts_of([{"node_id": "a"}, {"node_id": "b"}, {"node_id": "a"}]) == [[0, 2], [1]]


def _trainer(rank, trainers, layout="sharded"):
    engine = CheckpointEngineRegistry.new("weightport", bucket_size=1, is_master=rank == 0, trainer_layout=layout)
    engine.init_process_group("trainer", rank, trainers, 1, dict(MASTER, secret="ab"))
    return engine


def test_each_trainer_rank_publishes_its_rows_of_a_tensor_every_rank_holds():
    import torch

    engine_class()
    weight, scalar = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3), torch.tensor(5)
    parts = [_trainer(r, 3)._part("w", weight) for r in range(3)]
    # torch.chunk's split: rows 0-3, 4-7, 8-9; each part a view of the rank's rows, placed in the whole
    assert [p[1] for p in parts] == [([10, 3], [0, 0], [4, 3]), ([10, 3], [4, 0], [4, 3]), ([10, 3], [8, 0], [2, 3])]
    assert torch.equal(torch.cat([p[0] for p in parts]), weight)
    assert parts[1][0].data_ptr() == weight[4].data_ptr()  # nothing copied
    assert _trainer(1, 3)._part("s", scalar)[1] == ([], [], [])  # a scalar is offered whole
    whole = _trainer(1, 3, "whole")._part("w", weight)
    assert whole[1] == ([10, 3], [0, 0], [10, 3]) and whole[0] is weight
