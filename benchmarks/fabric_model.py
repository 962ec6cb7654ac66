"""An example fabric for `benchmarks/links_at_scale.py --model benchmarks/fabric_model.py`: 400G NICs
with 6 % noise between hosts and 2 % inside them, a fabric whose ECMP collides 8 % of a fully cross-leaf
round's flows, and two faults: an optic of node0007's rail 2 that passes 40 % of the rate where the host
receives, and one of leaf03's 16 uplinks at 20 %, onto which ECMP hashes a sixteenth of the leaf's
cross-leaf flows afresh every round. Run it with --leaf-size 32 and from 289 hosts on (leaves 01, 02, ...).

A model defines rate(flow, rng) -> GB/s and PLANTED, the faults it plants in --plant's syntax."""

import math

NIC_GBPS, NVLINK_GBPS = 48.0, 360.0
NOISE, INTRA_NOISE, ECMP = 0.06, 0.02, 0.08
PLANTED = ["rx:node0007:2@0.4", "uplink:leaf03@0.2"]


def rate(flow, rng):
    if flow.src_host == flow.dst_host:
        return NVLINK_GBPS * math.exp(INTRA_NOISE * rng.gauss(0, 1))
    share = 1.0
    if flow.dst_host == "node0007" and flow.dst_local == 2:
        share = 0.4
    if flow.src_leaf != flow.dst_leaf:
        if "leaf03" in (flow.src_leaf, flow.dst_leaf) and rng.random() < 1 / 16:
            share = min(share, 0.2)
        if rng.random() < ECMP * flow.load:
            share = min(share, 0.5)
    return NIC_GBPS * share * math.exp(NOISE * rng.gauss(0, 1))
