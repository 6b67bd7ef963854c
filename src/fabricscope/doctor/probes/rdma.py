"""RDMA devices and ports: ``/sys/class/infiniband/<dev>/ports/<n>/``.

Formats (``drivers/infiniband/core/sysfs.c``): ``state`` ``4: ACTIVE``,
``phys_state`` ``5: LinkUp``, ``rate`` ``400 Gb/sec (4X NDR)``, ``link_layer``
``InfiniBand`` or ``Ethernet`` (RoCE).  RoCE ports carry a GID table:
``gids/<i>`` and ``gid_attrs/types/<i>`` (``IB/RoCE v1`` or ``RoCE v2``).
"""

from __future__ import annotations

from fabricscope.doctor.inventory import Gid, NetInterface, PciDevice, RdmaDevice, RdmaPort
from fabricscope.doctor.probes.ethtool import read_stats
from fabricscope.doctor.probes.mlnx_qos import read_qos
from fabricscope.doctor.probes.pci import pci_address_in, probe_pci
from fabricscope.kernel_text import gid_is_zero, parse_hex, parse_ib_rate, parse_ib_state, parse_int, parsed
from fabricscope.sysroot import CAPTURE_DIR, SysRoot

__all__ = ["DEV_NODES", "ECN_POINTS", "ERROR_COUNTERS", "HW_COUNTERS", "probe_rdma"]

ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
"""``ports/<n>/counters/``: link and physical-layer errors (narrow counters: alert on any)."""

HW_COUNTERS = (
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "out_of_buffer",
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
)
"""``ports/<n>/hw_counters/`` (mlx5): transport retries and RoCE congestion signals."""

_STATE = "'N: NAME' like '4: ACTIVE'"


def probe_rdma(root: SysRoot, pci: dict[str, PciDevice], nics: list[NetInterface]) -> list[RdmaDevice]:
    """Every RDMA device, its ports, and which netdev carries each port."""
    devices: list[RdmaDevice] = []
    names = root.listdir("sys/class/infiniband")
    uverbs = _uverbs_devices(root) if names else {}
    nodes = _dev_nodes(root) if uverbs else None
    for name in names:
        base = f"sys/class/infiniband/{name}"
        if not root.is_dir(base):
            continue
        address = pci_address_in(root.realpath(f"{base}/device"))
        if address is not None:
            probe_pci(root, address, pci)
        netdevs = root.listdir(f"{base}/device/net")
        has_uverbs, uverbs_name = _uverbs_of(root, name, uverbs)
        device = RdmaDevice(
            name=name,
            pci=address,
            fw_ver=root.text(f"{base}/fw_ver"),
            hca_type=root.text(f"{base}/hca_type"),
            uverbs=has_uverbs,
            dev_node=None if nodes is None or uverbs_name is None else uverbs_name in nodes,
            uverbs_name=uverbs_name,
        )
        for port_name in root.listdir(f"{base}/ports", required=True):
            number = parse_int(port_name)
            if number is None:
                root.garbage(f"{base}/ports/{port_name}", port_name, "a port number")
                continue
            device.ports.append(_probe_port(root, name, number))
        mapped = _netdevs_of(root, device.ports, netdevs)
        for port in device.ports:
            port.netdev = netdev = mapped.get(port.port)
            if netdev is None:
                continue
            nic = next((n for n in nics if n.name == netdev), None)
            if nic is not None:
                nic.rdma = port.label
                if port.link_layer == "Ethernet":
                    nic.ethtool = read_stats(root, nic.name)
                    nic.ecn = _ecn(root, nic.name)
                    nic.qos = read_qos(root, nic.name)
        devices.append(device)
    return devices


def _probe_port(root: SysRoot, device: str, number: int) -> RdmaPort:
    base = f"sys/class/infiniband/{device}/ports/{number}"
    rate_text = root.text(f"{base}/rate", required=True)
    rate = parse_ib_rate(rate_text)
    if rate_text is not None and rate is None:
        root.garbage(f"{base}/rate", rate_text, "a rate like '400 Gb/sec (4X NDR)'")
    link_layer = root.text(f"{base}/link_layer", required=True)
    if link_layer is not None and link_layer not in ("InfiniBand", "Ethernet"):
        root.garbage(f"{base}/link_layer", link_layer, "InfiniBand or Ethernet")
        link_layer = None
    port = RdmaPort(
        device=device,
        port=number,
        state=parsed(root, f"{base}/state", parse_ib_state, _STATE, required=True),
        phys_state=parsed(root, f"{base}/phys_state", parse_ib_state, _STATE, required=True),
        rate_gbps=rate,
        rate_text=rate_text,
        link_layer=link_layer,
    )
    for counter in ERROR_COUNTERS:
        value = parsed(root, f"{base}/counters/{counter}", parse_int, "a counter")
        if value is not None:
            port.counters[counter] = value
    for counter in HW_COUNTERS:
        value = parsed(root, f"{base}/hw_counters/{counter}", parse_int, "a counter")
        if value is not None:
            port.hw_counters[counter] = value
    if link_layer == "Ethernet":
        port.gids = _gids(root, base, port.gids_unread)
    else:
        port.lid = parsed(root, f"{base}/lid", parse_hex, "a LID like 0x1a")
        port.sm_lid = parsed(root, f"{base}/sm_lid", parse_hex, "a LID like 0x1")
    return port


ECN_POINTS = ("roce_np", "roce_rp")
"""mlx5's ECN roles: the notification point (receiver: marks become CNPs) and the reaction point (sender: slows)."""


def _ecn(root: SysRoot, netdev: str) -> dict[str, frozenset[int]] | None:
    """mlx5's per-priority ECN enables (``/sys/class/net/<if>/ecn/<role>/enable/<prio>``); None without them."""
    base = f"sys/class/net/{netdev}/ecn"
    if not root.is_dir(base):
        return None
    found: dict[str, frozenset[int]] = {}
    for role in ECN_POINTS:
        enabled = set()
        for entry in root.listdir(f"{base}/{role}/enable"):
            priority = parse_int(entry)
            value = parsed(root, f"{base}/{role}/enable/{entry}", parse_int, "0 or 1")
            if priority is not None and 0 <= priority <= 7 and value == 1:
                enabled.add(priority)
        found[role] = frozenset(enabled)
    return found


def _gids(root: SysRoot, base: str, unread: list[int]) -> list[Gid]:
    """The port's GID table without its empty (all-zero) entries; indexes that could not be read go to ``unread``."""
    gids: list[Gid] = []
    for entry in root.listdir(f"{base}/gids"):
        index = parse_int(entry)
        text = root.text(f"{base}/gids/{entry}")
        if index is not None and text is None:
            unread.append(index)
        if index is None or gid_is_zero(text) or text is None:
            continue
        gids.append(
            Gid(
                index=index,
                gid=text,
                type=root.text(f"{base}/gid_attrs/types/{entry}"),
                ndev=root.text(f"{base}/gid_attrs/ndevs/{entry}"),
            )
        )
    return sorted(gids, key=lambda g: g.index)


def _netdevs_of(root: SysRoot, ports: list[RdmaPort], netdevs: list[str]) -> dict[int, str]:
    """Which netdev carries each port (by port number); a port that cannot be told is left out, never guessed.

    RoCE ports name theirs in the GID table (``gid_attrs/ndevs``).  Otherwise
    each netdev under the device says its port: ``dev_port`` (the port index
    from 0), or ``dev_id`` on kernels where IPoIB set only that.  A lone netdev
    that says nothing belongs to a device's only port.
    """
    found = {p.port: ndev for p in ports if (ndev := next((g.ndev for g in p.gids if g.ndev), None))}
    for name in netdevs:
        index = _port_index(root, name)
        if index is not None and name not in found.values() and any(p.port == index + 1 for p in ports):
            found.setdefault(index + 1, name)
    if len(ports) == 1 and len(netdevs) == 1 and not found and _port_index(root, netdevs[0]) is None:
        found[ports[0].port] = netdevs[0]
    return found


def _port_index(root: SysRoot, netdev: str) -> int | None:
    """A netdev's port index from 0: ``dev_port``, else ``dev_id`` (IPoIB before dev_port), else None."""
    base = f"sys/class/net/{netdev}"
    dev_port = parse_int(root.text(f"{base}/dev_port"))
    dev_id = parse_hex(root.text(f"{base}/dev_id"))
    if dev_port:
        return dev_port
    if dev_id:
        return dev_id
    return 0 if 0 in (dev_port, dev_id) else None


def _uverbs_devices(root: SysRoot) -> dict[str, str]:
    """RDMA devices that user space can open, with their verbs device (``/sys/class/infiniband_verbs/uverbs*/ibdev``).

    Empty when the class is missing (ib_uverbs not loaded): NCCL then cannot
    use the HCAs at all.
    """
    found: dict[str, str] = {}
    for entry in root.listdir("sys/class/infiniband_verbs"):
        if entry.startswith("uverbs"):
            ibdev = root.text(f"sys/class/infiniband_verbs/{entry}/ibdev")
            found[ibdev or f"?{entry}"] = entry  # '?': its ibdev could not be read
    return found


def _uverbs_of(root: SysRoot, name: str, uverbs: dict[str, str]) -> tuple[bool | None, str | None]:
    """Whether RDMA device ``name`` has a verbs device, and its name; None when that cannot be known.

    Found by ``ibdev`` in the class; where some ``ibdev`` could not be read, the
    verbs devices under the HCA's own PCI function (``device/infiniband_verbs``)
    say which it is.
    """
    if name in uverbs:
        return True, uverbs[name]
    unread = {entry for key, entry in uverbs.items() if key.startswith("?")}
    if not unread:
        return False, None
    for entry in root.listdir(f"sys/class/infiniband/{name}/device/infiniband_verbs"):
        if entry in unread:
            return True, entry
    return None, None


DEV_NODES = f"{CAPTURE_DIR}/dev-infiniband"
"""Where a capture lists the names it found in ``/dev/infiniband`` (device nodes cannot be copied)."""


def _dev_nodes(root: SysRoot) -> set[str] | None:
    """Names in ``/dev/infiniband`` (what a container was given); None when that cannot be known.

    A live root lists the folder and remembers the names for a capture; a
    captured tree replays them; a tree captured without them says nothing.
    """
    if not root.is_live:
        text = root.text(DEV_NODES)
        return None if text is None else set(text.split())
    names = root.listdir("dev/infiniband") if root.is_dir("dev/infiniband") else []
    root.remember(DEV_NODES, "".join(f"{n}\n" for n in names))
    return set(names)
