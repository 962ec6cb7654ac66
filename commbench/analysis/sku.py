"""A node's SKU: what kind of node wrote a result file, from its topology snapshot (rank 0's host),
the key under which fleet sets nodes side by side and accept picks a node's baselines.

Its parts: GPU model and count, NVLink generation, NVSwitches (their generation, and their PCI model
where the baseboard shows them on PCI, as HGX boards do), InfiniBand ports (count, model, fastest
rate), the other physical NICs by kind, count and model, CPU model and cores. What changes with a
node's health stays out: versions (driver, NCCL), the topology fingerprint, link speeds below the
fastest port's, an NVSwitch missing from PCI. A part an older snapshot does not record (the models,
the NVSwitches on PCI, a NIC's bus) is unknown, not different: same_kind() lets it match anything,
so that a fleet's baselines stay matched when commbench learns more of a node."""

from __future__ import annotations

from typing import Optional

# Unknown: the snapshot does not record the part (it predates it).
UNKNOWN = None


def sku_fields(doc: dict) -> dict[str, Optional[str]]:
    """The SKU's parts, each a string ("" where the node has none) or UNKNOWN."""
    topo = doc.get("topology") or {}
    host = topo.get("host") or {}
    machine = doc.get("machine") or {}
    devices = (topo.get("gpus") or {}).get("devices") or []
    out: dict[str, Optional[str]] = {"gpus": "no GPU", "nvlink": "", "nvswitch": "", "nvswitch_model": ""}
    if devices:
        out["gpus"] = f"{len(devices)}x {'/'.join(sorted({d.get('name', '?') for d in devices}))}"
        versions = sorted({d["nvlink"]["version"] for d in devices
                           if (d.get("nvlink") or {}).get("links_up") and d["nvlink"].get("version")})
        out["nvlink"] = f"NVLink {'/'.join(map(str, versions))}" if versions else ""
        on_pci = host.get("nvswitches")
        bus_ids = {d.get("pci_bus_id") for d in devices}
        # Links that lead to no GPU of the node lead to switches.
        switched = any(link.get("up") and link.get("remote_bus_id") and link["remote_bus_id"] not in bus_ids
                       for d in devices for link in d.get("nvlink_links") or [])
        if switched or on_pci:
            # An NVSwitch generation goes with its NVLink's: NVLink 2, 3, 4, 5 meet NVSwitch 1, 2, 3, 4.
            gens = [str(v - 1) for v in versions if v >= 2]
            out["nvswitch"] = "NVSwitch" + (f" gen {'/'.join(gens)}" if gens else "")
        out["nvswitch_model"] = UNKNOWN if on_pci is None else "/".join(sorted({s["model"] for s in on_pci if s.get("model")}))
    ib = host.get("infiniband") or []
    # The fastest port's rate: a port that trained down (or is down) is the node's health, not its
    # kind, and must be judged against its kind's baseline rather than match none.
    rates = [port["rate_gbps"] for port in ib if port.get("rate_gbps")]
    out["ib"] = f"{len(ib)} IB port(s)" + (f" up to {max(rates):g} Gb/s" if rates else "") if ib else ""
    out["ib_model"] = UNKNOWN if any("model" not in p for p in ib) else "/".join(sorted({p["model"] for p in ib if p["model"]}))
    # Physical NICs other than InfiniBand's own (IPoIB) and loopback: a veth, bridge or tunnel is none,
    # nor an SR-IOV virtual function or a USB link to the board's management controller.
    nics = [n for n in host.get("nics") or [] if not n.get("virtual", True) and n.get("type") not in ("infiniband", "loopback")]
    if any("bus" not in n for n in nics):
        out["nics"] = out["nic_model"] = UNKNOWN
    else:
        nics = [n for n in nics if n["bus"] != "usb" and not n.get("sriov_vf")]
        kinds: dict[str, int] = {}
        for n in nics:
            kinds[n["type"] or "other"] = kinds.get(n["type"] or "other", 0) + 1
        out["nics"] = ", ".join(f"{count}x {kind} NIC" for kind, count in sorted(kinds.items()))
        out["nic_model"] = "/".join(sorted({n["model"] for n in nics if n.get("model")}))
    out["cpu"] = (f"{host.get('cpu_model') or machine.get('cpu_model', '?')}, "
                  f"{host.get('cores') or machine.get('cores', '?')} cores")
    return out


def sku_of(doc: dict) -> str:
    """The SKU in words: '8x NVIDIA H100 80GB HBM3; NVLink 4; NVSwitch gen 3 (10de:22a3); 8 IB port(s)
    15b3:1021 up to 400 Gb/s; 2x ethernet NIC 14e4:16d7; Intel(R) Xeon(R) Platinum 8480+, 112 cores'."""
    f = sku_fields(doc)

    def with_model(part: str, model: Optional[str], inside: bool = False) -> str:
        if not part or not model:
            return part
        return f"{part} ({model})" if inside else f"{part} {model}"
    ib = f["ib"]
    if ib and f["ib_model"]:
        count, _, rate = ib.partition(" up to ")
        ib = f"{count} {f['ib_model']}" + (f" up to {rate}" if rate else "")
    parts = [f["gpus"], f["nvlink"], with_model(f["nvswitch"], f["nvswitch_model"], inside=True), ib,
             with_model(f["nics"] or "", f["nic_model"]), f["cpu"]]
    return "; ".join(p for p in parts if p)


def same_kind(a: dict, b: dict) -> bool:
    """Whether two documents' nodes are of one SKU: every part both record is the same."""
    fa, fb = sku_fields(a), sku_fields(b)
    return all(fa[k] == fb[k] for k in fa if fa[k] is not UNKNOWN and fb[k] is not UNKNOWN)


def differences(a: dict, b: dict) -> list[str]:
    """The parts two SKUs differ in, 'nvlink: NVLink 3 against NVLink 4'."""
    fa, fb = sku_fields(a), sku_fields(b)
    return [f"{k}: {fa[k] or 'none'} against {fb[k] or 'none'}" for k in fa
            if fa[k] is not UNKNOWN and fb[k] is not UNKNOWN and fa[k] != fb[k]]
