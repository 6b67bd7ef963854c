"""A RoCE NIC's QoS state from MLNX_OFED's ``mlnx_qos -i <if>``: trust state, DSCP map, PFC priorities.

Which priority a RoCE packet travels on depends on the port's trust state,
which sysfs does not show: under ``pcp`` trust it is the QP's service level
(``NCCL_IB_SL``, carried as the VLAN tag's PCP), under ``dscp`` trust the
DSCP of the traffic class (``NCCL_IB_TC >> 2``) through the port's DSCP map.
``mlnx_qos`` prints both, with the priorities PFC is enabled on.  On the live
node it is run where installed (10 s at most); a capture keeps its text in
``fabricscope-capture/mlnx_qos/<if>`` (what a person can also paste:
``mlnx_qos -i eth2 > tree/fabricscope-capture/mlnx_qos/eth2``).
"""

from __future__ import annotations

import re

from fabricscope.doctor.inventory import Qos
from fabricscope.doctor.probes.tools import run_tool
from fabricscope.sysroot import CAPTURE_DIR, SysRoot

__all__ = ["QOS_DIR", "parse_mlnx_qos", "read_qos"]

QOS_DIR = f"{CAPTURE_DIR}/mlnx_qos"
_TIMEOUT_S = 10.0
_TRUST = re.compile(r"^\s*Priority trust (?:state|mode)\s*:\s*(\w+)\s*$", re.IGNORECASE)
_DSCP = re.compile(r"^\s*prio\s*:\s*([0-7])\s+dscp\s*:\s*([0-9,\s]{0,400})$")
_PFC_HEADER = re.compile(r"^\s*priority\s+0\s+1\s+2\s+3\s+4\s+5\s+6\s+7\s*$")
_PFC_ENABLED = re.compile(r"^\s*enabled\s+([01](?:\s+[01]){7})\s*$")


def parse_mlnx_qos(text: str) -> Qos | None:
    """``mlnx_qos -i <if>`` -> :class:`Qos`; None when the text says neither the trust state nor PFC."""
    trust = None
    dscp: dict[int, int] = {}
    pfc = None
    after_header = False
    for line in text.splitlines()[:1000]:
        if (match := _TRUST.match(line)) is not None:
            trust = match.group(1).lower() if match.group(1).lower() in ("pcp", "dscp") else None
        elif (match := _DSCP.match(line)) is not None:
            for value in filter(None, (v.strip() for v in match.group(2).split(","))):
                if value.isdigit() and int(value) < 64:
                    dscp[int(value)] = int(match.group(1))
        elif _PFC_HEADER.match(line):
            after_header = True
            continue
        elif after_header and (match := _PFC_ENABLED.match(line)) is not None:
            pfc = tuple(p for p, flag in enumerate(match.group(1).split()) if flag == "1")
        after_header = False
    if trust is None and pfc is None:
        return None
    return Qos(trust=trust, dscp_priority=dscp, pfc=pfc)


def read_qos(root: SysRoot, ifname: str) -> Qos | None:
    """The QoS state of ``ifname``: ``mlnx_qos`` on the live root where installed, else its captured text."""
    rel = f"{QOS_DIR}/{ifname}"
    if root.is_live:
        _, text = run_tool("mlnx_qos", ["-i", ifname], _TIMEOUT_S)
        if text is None:
            return None
        qos = parse_mlnx_qos(text)
        if qos is not None:
            root.remember(rel, text)
        return qos
    text = root.text(rel)
    if text is None:
        return None
    qos = parse_mlnx_qos(text)
    if qos is None:
        root.garbage(rel, text.splitlines()[0] if text.strip() else text, "the text mlnx_qos -i <if> prints")
    return qos
