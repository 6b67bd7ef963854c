"""Probe one node: run every reader under one root and return a :class:`Node`."""

from __future__ import annotations

import os
from collections.abc import Mapping

from fabricscope.doctor.gpus import probe_gpus
from fabricscope.doctor.host import probe_gpudirect, probe_hostname, probe_modules, probe_tcp
from fabricscope.doctor.inventory import Node, PciDevice
from fabricscope.doctor.nccl_settings import probe_nccl
from fabricscope.doctor.net import probe_nics
from fabricscope.doctor.rdma import probe_rdma
from fabricscope.doctor.sysroot import SysRoot

__all__ = ["node_env", "probe_node"]


def node_env(root: SysRoot) -> dict[str, str]:
    """The environment that goes with a root: the one a capture recorded, else this process's."""
    recorded = root.manifest.get("env")
    if isinstance(recorded, dict):
        return {str(k): str(v) for k, v in recorded.items()}
    return dict(os.environ)


def probe_node(root: SysRoot, env: Mapping[str, str] | None = None) -> Node:
    """Everything the checks need, read under ``root``; never raises for what the files hold.

    ``env`` supplies the NCCL variables; None means :func:`node_env`.
    """
    pci: dict[str, PciDevice] = {}
    nics = probe_nics(root, pci)
    rdma = probe_rdma(root, pci, nics)
    gpus, nvml = probe_gpus(root, pci)
    nccl, problems = probe_nccl(root, node_env(root) if env is None else env)
    topo = nccl.get("NCCL_TOPO_FILE")
    drivers = {n.driver for n in nics if n.driver} | {d.driver for d in pci.values() if d.driver}
    node = Node(
        hostname=probe_hostname(root),
        kernel=root.text("proc/sys/kernel/osrelease"),
        root=str(root.path),
        live=root.is_live,
        nics=nics,
        rdma=rdma,
        pci=pci,
        gpus=gpus,
        gpudirect=probe_gpudirect(root),
        tcp=probe_tcp(root),
        nccl=nccl,
        nccl_conf_problems=problems,
        nvml=nvml,
        topo_file_readable=None if topo is None else root.text(topo.value.strip()) is not None,
        modules=probe_modules(root, drivers | ({"nvidia"} if gpus else set())),
    )
    node.anomalies = list(root.anomalies)
    node.files_read = sum(1 for text in root.read_paths().values() if text is not None)
    return node
