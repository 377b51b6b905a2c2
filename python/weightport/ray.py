"""Ray as the distributed engine: where each actor runs, and ranks placed by Ray node.

weightport's plan needs to know which ranks share a host (they exchange through shared memory and
relay to each other) and the address each rank is reached at. Under Ray both come from the node an
actor runs on: :func:`node_address` is the address Ray itself uses for the node (``ray start
--node-ip-address``), :func:`node_id` the node's identity. Nothing here carries weights: weightport's
own transport moves them (UCX TCP between hosts, shared memory within one), never Ray's object store.

Usage, in the driver::

    nodes = weightport.ray.alive_nodes()                   # [{"node_id", "address", "cpus"}], by address
    strategies = weightport.ray.spread(len(ranks), nodes)  # one scheduling strategy per rank
    actors = [Trainer.options(scheduling_strategy=s).remote(...) for s in strategies]

and in an actor: ``weightport.ray.node_address()``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import ray


class UnreachableNode(RuntimeError):
    """A Ray node whose address other hosts cannot reach (a loopback address in a cluster of several
    nodes: the node was started without ``--node-ip-address``)."""


def check_reachable(address: str, node: str, nodes_in_cluster: int) -> str:
    """`address` if other nodes can reach it; raises :class:`UnreachableNode` naming `node` when it is
    empty, not an IP address, or a loopback address while the cluster has more than one node."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        raise UnreachableNode(f"Ray node {node} reports address {address!r}, which is not an IP address; "
                              f"start it with --node-ip-address") from None
    if (ip.is_loopback or ip.is_unspecified) and nodes_in_cluster > 1:
        raise UnreachableNode(f"Ray node {node} reports address {address}, which the cluster's other "
                              f"{nodes_in_cluster - 1} nodes cannot reach; start it with --node-ip-address")
    return str(ip)


def node_id() -> str:
    """The Ray node this process runs on."""
    return ray.get_runtime_context().get_node_id()


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes, each ``{"node_id", "address", "cpus"}``, ordered by address (the head
    first when its address is lowest); every address is checked with :func:`check_reachable`."""
    live = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [{"node_id": n["NodeID"], "address": check_reachable(n["NodeManagerAddress"], n["NodeID"], len(live)),
              "cpus": float(n.get("Resources", {}).get("CPU", 0))} for n in live]
    return sorted(nodes, key=lambda n: ipaddress.ip_address(n["address"]))


def node_address() -> str:
    """The address other hosts reach this process's node at (Ray's own, as given by ``ray start
    --node-ip-address``); raises :class:`UnreachableNode` when it is loopback in a cluster of several."""
    me = node_id()
    live = [n for n in ray.nodes() if n.get("Alive")]
    for n in live:
        if n["NodeID"] == me:
            return check_reachable(n["NodeManagerAddress"], me, len(live))
    return check_reachable(ray.util.get_node_ip_address(), me, len(live))


def spread(count: int, nodes: list[dict[str, Any]] | None = None, first: int = 0) -> list[Any]:
    """`count` scheduling strategies that place rank i on node ``(first + i) % len(nodes)`` (nodes as
    :func:`alive_nodes` gives them), so a rank's host is known before it starts. ``soft=False``: a
    rank never lands elsewhere when its node is full; it waits for room, as a placement should."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes() if nodes is None else nodes
    if not nodes:
        raise ValueError("no live Ray node to place ranks on")
    return [NodeAffinitySchedulingStrategy(node_id=nodes[(first + i) % len(nodes)]["node_id"], soft=False)
            for i in range(count)]


def hosts_of(metadata: list[dict[str, Any]]) -> list[list[int]]:
    """Ranks grouped by host, from each rank's ``{"node_id"}``: the ranks that share one, in rank
    order, groups ordered by their first rank."""
    groups: dict[str, list[int]] = {}
    for rank, m in enumerate(metadata):
        groups.setdefault(m["node_id"], []).append(rank)
    return list(groups.values())
