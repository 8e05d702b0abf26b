"""The data plane between instance actors: one torch.distributed group over the live instances (gloo on CPU,
NCCL on GPU). Ray carries control messages only; tensors (DistAttention's queries and `(out, lse)`, KV blocks
that move) go point to point here.

The group's members step in lockstep (ray_loop.py): a token passed rank to rank serialises the control phases,
one `all_gather_object` of the step plans follows, and every tensor exchange of the step is posted as
non-blocking sends and receives whose sizes both sides know from the plans, so no exchange can deadlock.
"""
import socket
from dataclasses import dataclass
from datetime import timedelta

import ray
import torch
import torch.distributed as dist

MOVE_TAG, QUERY_TAG, PARTIAL_TAG, TOKEN_TAG = 1, 2, 3, 4


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
        self.messaging_s = 0.0  # time this actor spent waiting on the group (token, plans, tensors)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def take_token(self) -> None:
        """Wait for the previous rank's control phase to end."""
        if self.rank:
            dist.recv(torch.zeros(1, device=self.device), src=self.rank - 1, tag=TOKEN_TAG)

    def pass_token(self) -> None:
        if self.rank + 1 < self.world_size:
            dist.send(torch.zeros(1, device=self.device), dst=self.rank + 1, tag=TOKEN_TAG)

    def all_plans(self, plan) -> dict[int, object]:
        """Every member's plan of this step, by inst_id."""
        plans = [None] * self.world_size
        dist.all_gather_object(plans, plan)
        return dict(zip(self.spec.members, plans))

    def post(self, sends: dict[int, torch.Tensor], recvs: dict[int, torch.Tensor], tag: int) -> list:
        """Non-blocking sends and receives by inst_id; returns the works to wait on. NCCL gets them as one group
        (separate NCCL sends and receives between two ranks can wait on each other)."""
        if self.spec.backend == "nccl":
            ops = [dist.P2POp(dist.isend, t.contiguous(), self.rank_of[i], tag=tag) for i, t in sends.items()]
            ops += [dist.P2POp(dist.irecv, t, self.rank_of[i], tag=tag) for i, t in recvs.items()]
            return dist.batch_isend_irecv(ops) if ops else []
        works = [dist.isend(t.contiguous(), dst=self.rank_of[i], tag=tag) for i, t in sends.items()]
        works += [dist.irecv(t, src=self.rank_of[i], tag=tag) for i, t in recvs.items()]
        return works


def wait_all(works: list) -> None:
    for work in works:
        work.wait()


def pick_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"
