"""Links between instances, by name: where remote MicroAttention queries, their (out, lse) and KV moves travel.

A link is a send/recv curve the calibration measured ("intra-node": NVLink; "inter-node": Vidur's A100 DGX,
~7.8 GB/s at 64 MB) or a bandwidth in GB/s written as a number ("0.125": the papers' 125 MB/s Ethernet). What
a link costs: `Link` and `resolve_link` in calibration/model.py. This module imports nothing heavy, so command
lines can take their defaults and checks from it.
"""
import math

from reference_impl.errors import InputError

INTRA_NODE = "intra-node"
INTER_NODE = "inter-node"
GLOO = "gloo"  # torch.distributed's gloo between two processes of this machine (calibration/profile_link.py)
MEASURED_LINKS = (INTRA_NODE, INTER_NODE, GLOO)  # the calibration's measured send/recv curves
# With 8 GPUs a node, most instance pairs of a 32-GPU cluster are in different nodes; the papers' 125 MB/s is a
# sweep point (sensitivity)
DEFAULT_LINK = INTER_NODE


def link_gb_s(link) -> float:
    """A link given as a bandwidth: its GB/s; InputError when `link` is no number > 0."""
    try:
        gb_s = float(link)
    except (TypeError, ValueError):
        raise InputError(f"unknown link {link!r}") from None
    if not 0 < gb_s < math.inf:
        raise InputError(f"link bandwidth must be > 0 GB/s (got {link!r})")
    return gb_s


def check_link(link) -> str:
    """`link` as text when it is a measured link's name or a bandwidth in GB/s > 0; InputError otherwise."""
    text = str(link).strip()
    if text not in MEASURED_LINKS:
        link_gb_s(text)
    return text
