"""PCI devices: where they sit in the tree, their PCIe links, and GPU-to-NIC distance.

sysfs names a device by its path from the host bridge,
``/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0``:
the host bridge (``pci0000:15``), the bridges in between, the device last.
:func:`distance` turns two such paths into the ``nvidia-smi topo -m`` names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fabricscope.doctor.inventory import DISTANCES, Aer, BridgeConfig, PciDevice, PcieLink
from fabricscope.kernel_text import (
    PCI_ADDRESS,
    PCIE_SPEED_UNKNOWN,
    parse_aer,
    parse_cpu_list,
    parse_hex,
    parse_int,
    parse_pcie_speed,
    parse_pcie_width,
    parsed,
)
from fabricscope.sysroot import CAPTURE_DIR, SysRoot, read_regular_file
from fabricscope.units import is_digits

__all__ = [
    "ACS_CONFIG_DIR",
    "MAX_IRQS",
    "distance",
    "nearest",
    "parse_acs_control",
    "parse_bridge_config",
    "pci_address_in",
    "probe_aer",
    "probe_bridge_config",
    "probe_irqs",
    "probe_numa_cpus",
    "probe_pci",
    "split_pci_path",
]

MAX_IRQS = 1024
"""Interrupts read per device (a NIC has one per queue: a few hundred at most)."""

_HOST_BRIDGE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_SPEED = "a speed like '16.0 GT/s PCIe' or '8 GT/s'"
_WIDTH = "a lane count like 16"


def split_pci_path(real: str | None) -> tuple[str, tuple[str, ...]] | None:
    """``sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/virtio2`` -> (``pci0000:15``, (addresses...)).

    Everything after the last PCI address (``virtio2``, ``net/eth0``) is dropped.
    None when the path does not run through a PCI host bridge.
    """
    if not real:
        return None
    parts = real.split("/")
    for start, part in enumerate(parts):
        if _HOST_BRIDGE.match(part):
            chain: list[str] = []
            for item in parts[start + 1 :]:
                if not PCI_ADDRESS.match(item):
                    break
                chain.append(item.lower())
            return (part, tuple(chain)) if chain else None
    return None


def pci_address_in(real: str | None) -> str | None:
    """The PCI address of the device a sysfs path belongs to (the deepest one on the path)."""
    split = split_pci_path(real)
    return split[1][-1] if split else None


def probe_pci(root: SysRoot, address: str, cache: dict[str, PciDevice]) -> PciDevice | None:
    """Read one PCI function (and its upstream port's limits); None when sysfs has no such device."""
    if address in cache:
        return cache[address]
    real = root.realpath(f"sys/bus/pci/devices/{address}")
    split = split_pci_path(real)
    if real is None or split is None or split[1][-1] != address:
        return None
    host_bridge, chain = split
    base = real
    device = PciDevice(
        address=address,
        root=host_bridge,
        bridges=chain[:-1],
        vendor=parsed(root, f"{base}/vendor", parse_hex, "a hex id like 0x15b3"),
        device=parsed(root, f"{base}/device", parse_hex, "a hex id like 0x1021"),
        class_code=parsed(root, f"{base}/class", parse_hex, "a hex class like 0x020700"),
        numa_node=_numa(root, f"{base}/numa_node"),
        driver=root.link_name(f"{base}/driver"),
        link=_link(root, base, upstream=base.rsplit("/", 1)[0] if chain[:-1] else None),
        switches=_switch_ports(chain),
        iommu=root.text(f"{base}/iommu_group/type"),
    )
    cache[address] = device
    for port in device.switches:  # each switch's upstream port is a PCI function too: its link is the uplink
        probe_pci(root, port, cache)
    return device


def _switch_ports(chain: tuple[str, ...]) -> tuple[str, ...]:
    """The upstream ports of the PCIe switches above a device, nearest first.

    Below a host bridge the chain is a root port, then (switch upstream port,
    switch downstream port) pairs, then the device, as NCCL reads sysfs; so the
    upstream ports sit at odd positions.
    """
    bridges = chain[:-1]
    return tuple(bridges[index] for index in range(len(bridges) - 2, 0, -2))


def _numa(root: SysRoot, rel: str) -> int | None:
    value = parsed(root, rel, parse_int, "a NUMA node number or -1")
    return value if value is not None and value >= 0 else None


def _speed(root: SysRoot, rel: str) -> float | None:
    return parsed(root, rel, parse_pcie_speed, _SPEED, unknown=PCIE_SPEED_UNKNOWN)


def _width(root: SysRoot, rel: str) -> int | None:
    return parsed(root, rel, parse_pcie_width, _WIDTH, unknown=("0",))


def _link(root: SysRoot, base: str, upstream: str | None) -> PcieLink | None:
    if root.text(f"{base}/max_link_speed") is None and root.text(f"{base}/current_link_speed") is None:
        return None  # virtio and integrated devices have no link files
    link = PcieLink(
        current_gts=_speed(root, f"{base}/current_link_speed"),
        max_gts=_speed(root, f"{base}/max_link_speed"),
        current_width=_width(root, f"{base}/current_link_width"),
        max_width=_width(root, f"{base}/max_link_width"),
    )
    if upstream is not None:
        link.upstream_max_gts = _speed(root, f"{upstream}/max_link_speed")
        link.upstream_max_width = _width(root, f"{upstream}/max_link_width")
    return link


def _switch_parents(device: PciDevice) -> list[str]:
    """The PCI switches above a device, as NCCL's topology sees them.

    NCCL walks sysfs two levels at a time, so a switch's downstream and upstream
    ports count as one switch named by its upstream port (``NVIDIA/nccl``
    ``src/graph/xml.cc``: "Rewind two '/' and follow the upper PCI switch").
    """
    chain = [*device.bridges, device.address]
    return [chain[i] for i in range(len(chain) - 3, -1, -2)]


def distance(a: PciDevice, b: PciDevice) -> str:
    """``nvidia-smi topo -m`` distance between two PCI devices.

    PIX: one PCIe switch between them; PXB: several switches, no host bridge;
    PHB: through one host bridge (the CPU root complex); NODE: between host
    bridges of one NUMA node; SYS: across the inter-socket link.  When a NUMA
    node is unknown (-1) the two are taken as one node (single-socket systems
    report -1), so the answer is NODE, not SYS.
    """
    parents_a, parents_b = _switch_parents(a), _switch_parents(b)
    for hops_a, switch in enumerate(parents_a):
        if switch in parents_b:
            return "PIX" if hops_a + parents_b.index(switch) == 0 else "PXB"
    if a.root == b.root:
        return "PHB"
    if a.numa_node is None or b.numa_node is None or a.numa_node == b.numa_node:
        return "NODE"
    return "SYS"


def nearest(device: PciDevice, candidates: Sequence[tuple[str, PciDevice]]) -> tuple[str, str] | None:
    """The candidate closest to ``device``: (its distance, its name); ties go to the first name in order."""
    ranked = [(DISTANCES.index(distance(device, other)), name) for name, other in candidates]
    if not ranked:
        return None
    rank, name = min(ranked)
    return DISTANCES[rank], name


_AER = "'Name count' lines ending with TOTAL_ERR_*"


def probe_aer(root: SysRoot, pci: dict[str, PciDevice]) -> dict[str, Aer]:
    """AER counts of every probed device and of every bridge above one, by address (devices without AER left out)."""
    addresses = sorted({a for d in pci.values() for a in (*d.bridges, d.address)})
    found: dict[str, Aer] = {}
    for address in addresses:
        base = f"sys/bus/pci/devices/{address}"
        aer = Aer(
            correctable=parsed(root, f"{base}/aer_dev_correctable", parse_aer, _AER),
            nonfatal=parsed(root, f"{base}/aer_dev_nonfatal", parse_aer, _AER),
            fatal=parsed(root, f"{base}/aer_dev_fatal", parse_aer, _AER),
        )
        if aer.correctable is not None or aer.nonfatal is not None or aer.fatal is not None:
            found[address] = aer
    return found


def probe_irqs(root: SysRoot, device: PciDevice) -> None:
    """Fill ``device.irqs``: each MSI/MSI-X interrupt and the CPUs it may run on (None when unreadable)."""
    base = f"sys/bus/pci/devices/{device.address}/msi_irqs"
    for entry in root.listdir(base)[:MAX_IRQS]:
        number = parse_int(entry)
        if number is None or number < 0:
            continue
        root.text(f"{base}/{entry}")  # "msix" or "msi": read so that a capture keeps the entry
        rel = f"proc/irq/{number}/smp_affinity_list"
        device.irqs[number] = parsed(root, rel, parse_cpu_list, "a CPU list like 0-55,112-167")


def probe_numa_cpus(root: SysRoot) -> dict[int, frozenset[int]]:
    """The CPUs of each NUMA node."""
    nodes: dict[int, frozenset[int]] = {}
    for entry in root.listdir("sys/devices/system/node")[:1024]:
        if entry.startswith("node") and is_digits(entry[4:]):
            cpus = parsed(root, f"sys/devices/system/node/{entry}/cpulist", parse_cpu_list, "a CPU list")
            if cpus is not None:
                nodes[int(entry[4:])] = cpus
    return nodes


ACS_CONFIG_DIR = f"{CAPTURE_DIR}/pci-config"
"""Where a capture keeps each bridge's PCI configuration space, as hex (it is bytes, not text)."""
_ACS_ID = 0x000D
"""The Access Control Services extended capability (PCIe base spec 7.7.11; ``lspci -vvv``'s ACSCtl)."""


def parse_acs_control(config: bytes) -> int | None:
    """The ACS Control register of a configuration space, walking the extended capabilities from 0x100.

    None when the space holds no extended capabilities (the 64 or 256 bytes a
    non-root reader gets, or a device without ACS).  A loop or a pointer out
    of the space ends the walk.
    """
    offset, seen = 0x100, set()
    while 0x100 <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == _ACS_ID:
            return int.from_bytes(config[offset + 6 : offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return None


_PCIE_ID = 0x10
"""The PCI Express capability, in the list that starts at 0x34 (PCIe base spec 7.5.3; ``lspci -vvv``'s "Express")."""


def _express_registers(config: bytes) -> tuple[int, int, int] | None:
    """(Device/Port Type, Link Control, Link Status) from the PCI Express capability, or None.

    The capability list is walked from the pointer at 0x34 when the Status
    register says there is one; a loop or a pointer out of the space ends the
    walk (a space of 64 bytes, what a reader who is not root gets, has none).
    """
    if len(config) < 0x40 or not config[0x06] & 0x10:
        return None
    pointer, seen = config[0x34] & 0xFC, set()
    while 0x40 <= pointer <= len(config) - 2 and pointer not in seen:
        seen.add(pointer)
        if config[pointer] == _PCIE_ID:
            if pointer + 0x14 > len(config):
                return None
            capabilities, control, status = (
                int.from_bytes(config[pointer + at : pointer + at + 2], "little") for at in (0x02, 0x10, 0x12)
            )
            return (capabilities >> 4) & 0xF, control, status
        pointer = config[pointer + 1] & 0xFC
    return None


def parse_bridge_config(config: bytes) -> BridgeConfig:
    """What the doctor reads of a bridge's configuration space: ACS control and the PCI Express link registers."""
    express = _express_registers(config)
    acs = parse_acs_control(config) if len(config) > 0x100 else None
    if express is None:
        return BridgeConfig(acs)
    port_type, control, status = express
    return BridgeConfig(acs, port_type, control, status)


def probe_bridge_config(root: SysRoot, addresses: list[str]) -> dict[str, BridgeConfig]:
    """The configuration space of each bridge: read live (root only: others see 64 bytes), or from a capture."""
    found: dict[str, BridgeConfig] = {}
    for address in addresses:
        if root.is_live:
            try:
                data = read_regular_file(root.file(f"sys/bus/pci/devices/{address}/config"))
            except (OSError, ValueError):
                continue
            root.remember(f"{ACS_CONFIG_DIR}/{address}", data.hex())
        else:
            text = root.text(f"{ACS_CONFIG_DIR}/{address}")
            if text is None:
                continue
            try:
                data = bytes.fromhex(text)
            except ValueError:
                root.garbage(f"{ACS_CONFIG_DIR}/{address}", text, "hex bytes of a configuration space")
                continue
        if len(data) > 0x40:
            found[address] = parse_bridge_config(data)
    return found
