"""PCI paths and GPU-to-NIC distances as nvidia-smi topo -m names them."""

from __future__ import annotations

from doctor_helpers import FIXTURES

from fabricscope.doctor.inventory import PciDevice
from fabricscope.doctor.probes.pci import distance, pci_address_in, probe_pci, split_pci_path
from fabricscope.sysroot import SysRoot


def dev(path: str, numa: int | None = 0) -> PciDevice:
    split = split_pci_path(path)
    assert split is not None
    root, chain = split
    return PciDevice(address=chain[-1], root=root, bridges=chain[:-1], numa_node=numa)


SWITCH = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"


def test_split_drops_what_follows_the_device() -> None:
    assert split_pci_path("sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0") == ("pci0000:00", ("0000:00:03.0",))
    assert pci_address_in("sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/net/ib0") == "0000:16:00.0"
    assert split_pci_path("sys/devices/virtual/net/lo") is None
    assert split_pci_path(None) is None


def test_same_switch_is_pix() -> None:
    gpu = dev(f"{SWITCH}/0000:17:01.0/0000:19:00.0")
    nic = dev(f"{SWITCH}/0000:17:00.0/0000:18:00.0")
    assert distance(gpu, nic) == "PIX"
    assert distance(nic, gpu) == "PIX"


def test_two_levels_of_switches_is_pxb() -> None:
    top = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"
    gpu = dev(f"{top}/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0")
    nic = dev(f"{top}/0000:17:01.0/0000:1b:00.0/0000:1c:00.0/0000:1d:00.0")
    assert distance(gpu, nic) == "PXB"
    same_leaf = dev(f"{top}/0000:17:00.0/0000:18:00.0/0000:19:01.0/0000:1e:00.0")
    assert distance(gpu, same_leaf) == "PIX"


def test_host_bridge_numa_and_socket() -> None:
    gpu = dev("sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0", numa=0)
    same_root = dev("sys/devices/pci0000:15/0000:15:02.0/0000:17:00.0", numa=0)
    other_root = dev("sys/devices/pci0000:26/0000:26:01.0/0000:27:00.0", numa=0)
    far = dev("sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", numa=1)
    unknown = dev("sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", numa=None)
    assert distance(gpu, same_root) == "PHB"
    assert distance(gpu, other_root) == "NODE"
    assert distance(gpu, far) == "SYS"
    assert distance(gpu, unknown) == "NODE"


def test_probe_reads_device_and_upstream_port() -> None:
    root = SysRoot(FIXTURES / "degraded-ib-8gpu")
    cache: dict[str, PciDevice] = {}
    nic = probe_pci(root, "0000:4b:00.0", cache)
    assert nic is not None and nic.link is not None
    assert (nic.vendor, nic.device, nic.class_code, nic.numa_node) == (0x15B3, 0x1021, 0x020700, 0)
    assert nic.driver == "mlx5_core"
    assert (nic.link.current_width, nic.link.max_width, nic.link.upstream_max_width) == (8, 16, 16)
    assert nic.link.capable_gts == 32.0
    assert nic.bridges == ("0000:48:01.0", "0000:49:00.0", "0000:4a:00.0")
    assert probe_pci(root, "0000:4b:00.0", cache) is nic
    assert probe_pci(root, "0000:ff:00.0", cache) is None


def test_virtio_device_has_no_link() -> None:
    root = SysRoot(FIXTURES / "vm-virtio")
    device = probe_pci(root, "0000:00:03.0", {})
    assert device is not None
    assert device.link is None and device.numa_node is None
