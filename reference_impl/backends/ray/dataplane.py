"""The data plane between instance actors: one torch.distributed group over the live instances (gloo on CPU,
NCCL on GPU), used point to point only: no collective runs after the group forms, so instances that exchange
nothing never wait for each other. Ray carries control messages; tensors (DistAttention's queries and
`(out, lse)`, KV blocks that move) go here, posted as non-blocking sends and receives whose sizes both sides
know from the home's plan (the creditor gets its part of it in a message), so no exchange can deadlock.
"""
import socket
from dataclasses import dataclass
from datetime import timedelta

import ray
import torch
import torch.distributed as dist

MOVE, QUERY, PARTIAL = 1, 2, 3  # kinds of message in a home's step
SEGMENT_KV = 0  # a sequence-parallel prefill's K/V between members, and its last hidden states (sp_prefill.py)
MAX_LAYERS = 512


def tag(home: int, layer: int, kind: int) -> int:
    """The tag of one message of home `home`'s step: unique per (home, layer, kind), so two instances that take
    part in the steps of several homes at once match each message to the right receive."""
    return (home * MAX_LAYERS + layer) * 4 + kind


@dataclass(frozen=True, slots=True)
class GroupSpec:
    address: str  # host:port of rank 0's rendezvous store
    members: tuple[int, ...]  # inst_ids in rank order
    backend: str  # "gloo" or "nccl"
    timeout_s: float


def free_address() -> str:
    """host:port free on this node, for the group's rendezvous (called in the rank-0 actor)."""
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return f"{ray.util.get_node_ip_address()}:{port}"


class DataPlane:
    """This actor's membership of the group; `inst_id`s are translated to ranks here."""

    def __init__(self, spec: GroupSpec, inst_id: int, device: torch.device):
        self.spec = spec
        self.inst_id = inst_id
        self.device = device
        self.rank_of = {inst: rank for rank, inst in enumerate(spec.members)}
        self.rank = self.rank_of[inst_id]
        self.world_size = len(spec.members)
        dist.init_process_group(spec.backend, init_method=f"tcp://{spec.address}", rank=self.rank,
                                world_size=self.world_size, timeout=timedelta(seconds=spec.timeout_s))
        # this group's own handle: a transfer posted after a re-formation by a step of the old group fails
        # instead of landing in the new group
        self.group = dist.group.WORLD

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def post(self, sends: dict[int, torch.Tensor], recvs: dict[int, torch.Tensor], tag: int) -> list:
        """Non-blocking sends and receives by inst_id; returns the works to wait on. NCCL gets them as one group
        (separate NCCL sends and receives between two ranks can wait on each other)."""
        if self.spec.backend == "nccl":
            ops = [dist.P2POp(dist.isend, t.contiguous(), self.rank_of[i], self.group, tag) for i, t in sends.items()]
            ops += [dist.P2POp(dist.irecv, t, self.rank_of[i], self.group, tag) for i, t in recvs.items()]
            return dist.batch_isend_irecv(ops) if ops else []
        works = [dist.isend(t.contiguous(), dst=self.rank_of[i], group=self.group, tag=tag) for i, t in sends.items()]
        works += [dist.irecv(t, src=self.rank_of[i], group=self.group, tag=tag) for i, t in recvs.items()]
        return works


def pick_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"
