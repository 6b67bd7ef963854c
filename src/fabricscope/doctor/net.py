"""Network interfaces: ``/sys/class/net/<if>/``.

``speed`` is in Mb/s and reads ``-1`` or fails with EINVAL when the driver does
not know it (virtio, loopback); both mean unknown.  ``carrier`` fails with
EINVAL on an interface that is administratively down.
"""

from __future__ import annotations

from fabricscope.doctor.inventory import NetInterface, PciDevice
from fabricscope.doctor.parsers import parse_int
from fabricscope.doctor.pci import parsed, pci_address_in, probe_pci
from fabricscope.doctor.sysroot import SysRoot

__all__ = ["probe_nics"]

_NUMBER = "a whole number"
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
        speed = parsed(root, f"{base}/speed", parse_int, _NUMBER)
        nics.append(
            NetInterface(
                name=name,
                virtual=virtual,
                arphrd=parsed(root, f"{base}/type", parse_int, _NUMBER),
                mtu=parsed(root, f"{base}/mtu", parse_int, _NUMBER, required=not virtual),
                speed_mbps=speed if speed is not None and 0 < speed < 0xFFFFFFFF else None,
                duplex=_word(root, f"{base}/duplex", _DUPLEX),
                operstate=_word(root, f"{base}/operstate", _OPERSTATES, required=not virtual),
                carrier=parsed(root, f"{base}/carrier", parse_int, "0 or 1"),
                carrier_down_count=parsed(root, f"{base}/carrier_down_count", parse_int, _NUMBER),
                driver=None if virtual else root.link_name(f"{base}/device/driver"),
                pci=address,
            )
        )
    return nics
