"""Network interfaces: ``/sys/class/net/<if>/``.

``speed`` is in Mb/s and reads ``-1`` or fails with EINVAL when the driver does
not know it (virtio, loopback); both mean unknown.  ``carrier`` fails with
EINVAL on an interface that is administratively down.  The fastest speed an
Ethernet NIC supports is not in sysfs: it comes from its ``ethtool`` link
modes (:func:`~fabricscope.doctor.probes.ethtool.read_supported_mbps`).
"""

from __future__ import annotations

from fabricscope.doctor.inventory import NetInterface, PciDevice
from fabricscope.doctor.probes.ethtool import read_supported_mbps
from fabricscope.doctor.probes.pci import pci_address_in, probe_pci
from fabricscope.kernel_text import NET_SPEED_UNKNOWN, parse_int, parse_net_speed, parsed
from fabricscope.sysroot import SysRoot

__all__ = ["ARPHRD_ETHER", "ARPHRD_INFINIBAND", "ARPHRD_LOOPBACK", "MAX_MTU", "probe_nics"]

ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 1, 32, 772
"""Link types in ``/sys/class/net/<if>/type`` (``include/uapi/linux/if_arp.h``)."""
_NUMBER = "a whole number"
MAX_MTU = 65536
"""The largest MTU an interface carries IP with (loopback's); IPoIB tops out at 65520, Ethernet jumbo near 9216."""
_MTU = f"a whole number from 0 to {MAX_MTU}"
_OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
_DUPLEX = ("half", "full", "unknown")


def _word(root: SysRoot, rel: str, allowed: tuple[str, ...], *, required: bool = False) -> str | None:
    text = root.text(rel, required=required)
    if text is None:
        return None
    if text not in allowed:
        root.garbage(rel, text, " or ".join(allowed))
        return None
    return text


def _mtu(text: str | None) -> int | None:
    """An interface's ``mtu``; None for garbage and for numbers no interface has (``-5``)."""
    value = parse_int(text)
    return value if value is not None and 0 <= value <= MAX_MTU else None


def probe_nics(root: SysRoot, pci: dict[str, PciDevice]) -> list[NetInterface]:
    """Every interface under ``sys/class/net``, with the PCI device behind it."""
    nics: list[NetInterface] = []
    for name in root.listdir("sys/class/net", required=True):
        base = f"sys/class/net/{name}"
        if not root.is_dir(base):
            continue
        real = root.realpath(base)
        has_device = root.exists(f"{base}/device")
        virtual = real is None or real.startswith("sys/devices/virtual/") or not has_device
        address = None if virtual else pci_address_in(root.realpath(f"{base}/device"))
        if address is not None:
            probe_pci(root, address, pci)
        arphrd = parsed(root, f"{base}/type", parse_int, _NUMBER)
        nics.append(
            NetInterface(
                name=name,
                virtual=virtual,
                arphrd=arphrd,
                mtu=parsed(root, f"{base}/mtu", _mtu, _MTU, required=not virtual),
                speed_mbps=parsed(root, f"{base}/speed", parse_net_speed, "Mb/s or -1", unknown=NET_SPEED_UNKNOWN),
                duplex=_word(root, f"{base}/duplex", _DUPLEX),
                operstate=_word(root, f"{base}/operstate", _OPERSTATES, required=not virtual),
                carrier=parsed(root, f"{base}/carrier", parse_int, "0 or 1"),
                carrier_down_count=parsed(root, f"{base}/carrier_down_count", parse_int, _NUMBER),
                driver=None if virtual else root.link_name(f"{base}/device/driver"),
                pci=address,
                supported_mbps=read_supported_mbps(root, name) if not virtual and arphrd == ARPHRD_ETHER else None,
            )
        )
    return nics
