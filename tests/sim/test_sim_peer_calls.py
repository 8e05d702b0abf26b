"""The simulator charges a peer-call latency to exactly the calls on a peer's rManager that wait for a reply on the
Ray engine: sim/peer_calls.py's list is what backends/ray/peers.py's RemoteRManager sends through `ask` (read from
its source, so a call added, removed or renamed there fails here), and each such call, and a look at a peer's
tables, counts once on the caller."""
import ast
from pathlib import Path

import reference_impl
from reference_impl.control.rmanager import RManager
from reference_impl.sim.backend import Pending
from reference_impl.sim.peer_calls import WAITING_CALLS, CountingPeer

RAY_PEERS = Path(reference_impl.__file__).parent / "backends" / "ray" / "peers.py"


def asking_methods(class_name: str) -> set[str]:
    """Methods of `class_name` in the Ray peers' source that call `ask` (wait for the peer's reply)."""
    tree = ast.parse(RAY_PEERS.read_text())
    (cls,) = [c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == class_name]
    return {f.name for f in cls.body if isinstance(f, ast.FunctionDef) and f.name != "ask"
            and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "ask"
                    for n in ast.walk(f))}


# asks of the designs' own mechanisms on Ray (pd's whole-request hand-over, Llumnix's pairing by load): the simulated
# designs price those by their own events, not as the pooled engine's waiting calls
DESIGN_ASKS = {"room_for_move", "take_for_move", "status"}


def test_the_waiting_calls_are_the_ray_peers_asks():
    assert asking_methods("RemoteRManager") - DESIGN_ASKS == WAITING_CALLS
    assert asking_methods("RemoteTables") == {"__contains__", "__getitem__"}  # a look at a peer's tables


def test_each_waiting_call_and_table_look_counts_once_on_the_caller():
    peers: dict = {}
    rms = [RManager(i, 8, peers=peers) for i in range(2)]
    pending = [Pending(), Pending()]
    peer = CountingPeer(rms[1], 0, pending)
    for name in WAITING_CALLS:
        assert getattr(peer, name) != getattr(rms[1], name)  # wrapped: counted when called
    assert peer.try_move_kvcache(7, 2)
    assert peer.num_reserved_for(7) == 2 and peer.num_lendable == rms[1].num_lendable  # no reply waited for
    assert 7 not in peer.tables
    peer.cancel_reservation(7)
    assert [p.num_peer_calls for p in pending] == [2, 0]
