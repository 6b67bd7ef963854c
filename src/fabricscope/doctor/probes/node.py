"""Probe one node: run every reader under one root and return a :class:`Node`."""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricscope.doctor.inventory import Node, PciDevice
from fabricscope.doctor.probes.gpus import probe_gpus
from fabricscope.doctor.probes.host import (
    probe_boot_id,
    probe_gpudirect,
    probe_host,
    probe_hostname,
    probe_libraries,
    probe_modules,
    probe_tcp,
    probe_uptime,
)
from fabricscope.doctor.probes.kernel_log import probe_xids
from fabricscope.doctor.probes.nccl import probe_nccl
from fabricscope.doctor.probes.net import probe_nics
from fabricscope.doctor.probes.pci import probe_aer, probe_bridge_config, probe_irqs, probe_numa_cpus
from fabricscope.doctor.probes.rdma import probe_rdma
from fabricscope.sysroot import SysRoot

__all__ = ["NodeEnv", "node_env", "passwd_home", "probe_node"]


@dataclass(kw_only=True, slots=True)
class NodeEnv:
    """The environment a node's NCCL settings are read from, and where it came from."""

    variables: dict[str, str]
    source: str
    """``this process's environment``, ``the environment the capture recorded (...)``..."""
    home: str | None = None
    """The user's home directory as NCCL finds it (the passwd entry), for ``~/.nccl.conf``."""
    ignored: list[str] = field(default_factory=list)
    """NCCL variables of this process that are not used (a capture's recorded environment is)."""


DRIVER_GPUS = "proc/driver/nvidia/gpus"
"""One folder per GPU the driver manages; a container's shows only the GPUs it was given."""


def passwd_home() -> str | None:
    """The home directory of this user's passwd entry, as NCCL's ``getpwuid(getuid())`` finds it."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or None
    except KeyError:
        return None


def node_env(root: SysRoot, *, live: bool = False, process: Mapping[str, str] | None = None) -> NodeEnv:
    """The environment that goes with a root: the one a capture recorded, else this process's.

    ``live`` uses this process's environment even for a capture that
    recorded one; otherwise the NCCL variables of this process that the
    recorded one does not share are listed in :attr:`NodeEnv.ignored`.
    """
    mine = dict(os.environ if process is None else process)
    recorded = root.manifest.get("env")
    if isinstance(recorded, dict) and not live:
        variables = {str(k): str(v) for k, v in recorded.items()}
        home = root.manifest.get("home")
        when = root.manifest.get("created")
        return NodeEnv(
            variables=variables,
            source="the environment the capture recorded" + (f" ({when})" if isinstance(when, str) else ""),
            home=home if isinstance(home, str) else variables.get("HOME"),
            ignored=sorted(k for k, v in mine.items() if k.startswith("NCCL_") and variables.get(k) != v),
        )
    live_note = " (--live-env)" if isinstance(recorded, dict) else ""
    return NodeEnv(variables=mine, source=f"this process's environment{live_note}", home=passwd_home())


def probe_node(root: SysRoot, env: Mapping[str, str] | NodeEnv | None = None) -> Node:
    """Everything the checks need, read under ``root``; never raises for what the files hold.

    ``env`` supplies the NCCL variables: a :class:`NodeEnv`, a plain mapping
    (its ``HOME`` then stands for the user's home directory), or None for
    :func:`node_env`.
    """
    if env is None:
        env = node_env(root)
    elif not isinstance(env, NodeEnv):
        env = NodeEnv(variables=dict(env), source="the environment given to the probe", home=env.get("HOME"))
    pci: dict[str, PciDevice] = {}
    nics = probe_nics(root, pci)
    rdma = probe_rdma(root, pci, nics)
    gpus, nvml, cuda = probe_gpus(root, pci)
    nccl, problems = probe_nccl(root, env.variables, env.home)
    topo = nccl.get("NCCL_TOPO_FILE")
    conf_file = env.variables.get("NCCL_CONF_FILE")
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
        topo_file_readable=None if not topo or not topo.value else root.text(topo.value) is not None,
        nccl_conf_unreadable=root.read_problem(conf_file) if conf_file else None,
        nccl_conf_too_large=root.too_large(conf_file) if conf_file else False,
        modules=probe_modules(root, drivers | ({"nvidia"} if gpus else set())),
        boot_id=probe_boot_id(root),
        uptime_s=probe_uptime(root),
        env_source=env.source,
        env_ignored=list(env.ignored),
        host=probe_host(root),
        aer=probe_aer(root, pci),
        cuda_driver=cuda,
        driver_gpus=frozenset(e.lower() for e in root.listdir(DRIVER_GPUS)) if root.is_dir(DRIVER_GPUS) else None,
        libraries=probe_libraries(root),
        rdma_cm=root.exists("sys/class/misc/rdma_cm") if rdma else None,
    )
    nic_functions = {n.pci for n in nics if n.pci} | {d.pci for d in rdma if d.pci}
    for address in sorted(nic_functions):
        if address in pci:
            probe_irqs(root, pci[address])
    if any(pci[a].irqs for a in nic_functions if a in pci):
        node.numa_cpus = probe_numa_cpus(root)
    endpoints = [pci[a] for a in sorted(nic_functions | {g.pci for g in gpus}) if a in pci]
    node.bridge_config = probe_bridge_config(root, sorted({b for d in endpoints for b in d.bridges}))
    node.xids, node.kernel_log = probe_xids(root)
    # An NCCL_CONF_FILE too large to check is nccl.settings' finding, with its own advice (NCCL reads it):
    # not a file the node failed to give.
    big_conf = os.path.normpath("/" + conf_file).lstrip("/") if node.nccl_conf_too_large and conf_file else None
    node.anomalies = [a for a in root.anomalies if a.path != big_conf]
    node.files_read = sum(1 for text in root.read_paths().values() if text is not None)
    return node
