"""Every check the doctor runs, in report order.

Adding a check is adding a :class:`~fabricscope.doctor.checks.base.Check`
subclass to a module of its area and one entry to :data:`CHECKS`.
"""

from __future__ import annotations

from fabricscope.doctor.checks.base import Check, one_run
from fabricscope.doctor.checks.gpu import (
    GpuClocks,
    GpuCount,
    GpuDirectRdma,
    GpuDriverCuda,
    GpuEcc,
    GpuNicDistance,
    GpuNvLink,
    GpuPcieReplays,
    GpuPersistence,
    GpuXid,
)
from fabricscope.doctor.checks.host import (
    HostGovernor,
    HostHugePages,
    HostIommu,
    HostMemlock,
    HostNumaBalancing,
    HostShm,
)
from fabricscope.doctor.checks.nccl import (
    NcclAlgoProto,
    NcclDebug,
    NcclGdrLevel,
    NcclGidIndex,
    NcclIbHca,
    NcclP2pShm,
    NcclSettings,
    NcclSocketIfname,
    NcclTopoFile,
    NcclTransport,
)
from fabricscope.doctor.checks.nic import (
    NicCount,
    NicFlaps,
    NicIrqAffinity,
    NicLink,
    NicMtu,
    NicPresent,
    NicSpeed,
)
from fabricscope.doctor.checks.pcie import PcieAcs, PcieAer, PcieLinkCheck, PcieRetrain, PcieSlot, PcieUplink
from fabricscope.doctor.checks.rdma import (
    RdmaCm,
    RdmaDevNodes,
    RdmaEcn,
    RdmaErrors,
    RdmaFirmware,
    RdmaGid,
    RdmaLinkLayer,
    RdmaPfc,
    RdmaPortState,
    RdmaPresent,
    RdmaRate,
    RdmaRoceMtu,
    RdmaSubnetManager,
    RdmaTrafficClass,
    RdmaUverbs,
)
from fabricscope.doctor.checks.system import ProbeRead, TcpBuffers, TcpCongestion, TcpOptions
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding
from fabricscope.doctor.inventory import Node

__all__ = ["CHECKS", "Check", "run_checks"]

CHECKS: tuple[Check, ...] = (
    ProbeRead(),
    NicPresent(),
    NicLink(),
    NicFlaps(),
    NicSpeed(),
    NicMtu(),
    NicCount(),
    NicIrqAffinity(),
    RdmaPresent(),
    RdmaUverbs(),
    RdmaCm(),
    RdmaDevNodes(),
    RdmaPortState(),
    RdmaSubnetManager(),
    RdmaRate(),
    RdmaLinkLayer(),
    RdmaFirmware(),
    RdmaErrors(),
    RdmaGid(),
    RdmaPfc(),
    RdmaTrafficClass(),
    RdmaEcn(),
    RdmaRoceMtu(),
    PcieLinkCheck(),
    PcieSlot(),
    PcieUplink(),
    PcieAer(),
    PcieAcs(),
    PcieRetrain(),
    GpuCount(),
    GpuXid(),
    GpuEcc(),
    GpuNvLink(),
    GpuPcieReplays(),
    GpuClocks(),
    GpuPersistence(),
    GpuNicDistance(),
    GpuDirectRdma(),
    GpuDriverCuda(),
    HostIommu(),
    HostMemlock(),
    HostShm(),
    HostHugePages(),
    HostNumaBalancing(),
    HostGovernor(),
    NcclSettings(),
    NcclTransport(),
    NcclIbHca(),
    NcclSocketIfname(),
    NcclGdrLevel(),
    NcclP2pShm(),
    NcclDebug(),
    NcclAlgoProto(),
    NcclGidIndex(),
    NcclTopoFile(),
    TcpBuffers(),
    TcpCongestion(),
    TcpOptions(),
)


def run_checks(node: Node, expect: Expectations | None = None) -> list[Finding]:
    """Every finding of every check that applies to ``node``, in report order."""
    expect = expect or Expectations()
    findings: list[Finding] = []
    with one_run():
        for check in CHECKS:
            if check.applies(node, expect):
                findings.extend(check.run(node, expect))
    return findings
