"""Checks of the NCCL settings a job on this node would inherit.

Variables come from the environment, ``$NCCL_CONF_FILE`` (or ``~/.nccl.conf``)
and ``/etc/nccl.conf`` (see :mod:`fabricscope.doctor.nccl_settings`); every
finding names where the value came from, so the fix lands in the right place.
Matching rules follow NCCL ``src/misc/utils.cc`` (``parseStringList``,
``matchIfList``): entries are prefixes unless the list starts with ``=``, and
``^`` excludes.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricscope.doctor.checks.base import Check
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NcclSetting, Node
from fabricscope.doctor.parsers import gid_is_link_local, parse_int

__all__ = [
    "NcclAlgoProto",
    "NcclDebug",
    "NcclGdrLevel",
    "NcclGidIndex",
    "NcclIbHca",
    "NcclP2pShm",
    "NcclSettings",
    "NcclSocketIfname",
    "NcclTopoFile",
    "NcclTransport",
    "parse_interface_list",
]

ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True, slots=True)
class InterfaceList:
    """A parsed ``NCCL_IB_HCA``/``NCCL_SOCKET_IFNAME`` value."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]
    """(name or prefix, port or None)."""


def parse_interface_list(value: str) -> InterfaceList:
    """``^=mlx5_0:1,mlx5_1`` -> exclude, exact, ((mlx5_0, 1), (mlx5_1, None))."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries = []
    for item in text.split(","):
        name, _, rest = item.strip().partition(":")
        if name:
            port = parse_int(rest.split(":", 1)[0]) if rest else None
            entries.append((name, port))
    return InterfaceList(exclude=exclude, exact=exact, entries=tuple(entries))


def _matches(name: str, entry: str, exact: bool) -> bool:
    return name == entry if exact else name.startswith(entry)


def _where(setting: NcclSetting) -> str:
    return f"{setting.name}={setting.value} ({setting.source})"


class _NcclCheck(Check):
    variables: tuple[str, ...] = ()

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(v in node.nccl for v in self.variables)


class NcclSettings(Check):
    id = "nccl.settings"
    title = "NCCL settings in effect, and lines of NCCL config files that NCCL misreads"
    reads = "environment, $NCCL_CONF_FILE or ~/.nccl.conf, etc/nccl.conf"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        nccl = {k: v for k, v in node.nccl.items() if k.startswith("NCCL_")}
        if nccl:
            seen = "; ".join(_where(s) for s in nccl.values())
            findings.append(self.finding(Severity.INFO, node.hostname, seen))
        else:
            findings.append(self.finding(Severity.OK, node.hostname, "no NCCL variables set: NCCL auto-detects"))
        for problem in node.nccl_conf_problems:
            where, _, text = problem.partition(": ")
            findings.append(
                self.finding(
                    Severity.WARN,
                    where if text else node.hostname,
                    text or problem,
                    "NAME=value lines",
                    "NCCL splits each line at the first '=' and keeps every space: write NAME=value with no "
                    "spaces, and fix or remove the line",
                )
            )
        return findings


class NcclIbHca(_NcclCheck):
    id = "nccl.ib_hca"
    title = "NCCL_IB_HCA names devices that exist and, without '=', matches no extra ones"
    reads = "NCCL_IB_HCA; sys/class/infiniband/*"
    variables = ("NCCL_IB_HCA",)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        setting = node.nccl["NCCL_IB_HCA"]
        parsed = parse_interface_list(setting.value)
        devices = {d.name: {p.port for p in d.ports} for d in node.rdma}
        subject = "NCCL_IB_HCA"
        if not devices:
            return [self.finding(Severity.INFO, subject, f"{_where(setting)}; no RDMA devices on this node")]
        findings = []
        selected: set[str] = set()
        for name, port in parsed.entries:
            hits = sorted(d for d in devices if _matches(d, name, parsed.exact))
            selected.update(hits)
            extra = [d for d in hits if d != name]
            if extra and not parsed.exact and name in devices:
                verb = "excludes" if parsed.exclude else "also selects"
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{_where(setting)}: '{name}' is a prefix and {verb} {', '.join(extra)}",
                        f"only {name}",
                        f"start the list with '=' for exact names: {'^' if parsed.exclude else ''}="
                        f"{','.join(n for n, _ in parsed.entries)}",
                    )
                )
            elif not hits and not parsed.exclude:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{_where(setting)}: '{name}' matches no device",
                        f"one of {', '.join(sorted(devices))}",
                        f"remove '{name}' or correct it; devices here: {', '.join(sorted(devices))}",
                    )
                )
            elif port is not None and hits and all(port not in devices[d] for d in hits):
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{_where(setting)}: '{name}' has no port {port}",
                        "an existing port",
                        "correct the port number after ':' (ports count from 1)",
                    )
                )
        used = set(devices) - selected if parsed.exclude else selected
        if not used:
            findings.append(
                self.finding(
                    Severity.FAIL,
                    subject,
                    f"{_where(setting)} leaves no RDMA device for NCCL",
                    f"some of {', '.join(sorted(devices))}",
                    "NCCL will fall back to TCP sockets: correct or unset NCCL_IB_HCA",
                )
            )
        elif not findings:
            severity = Severity.OK if parsed.exact else Severity.INFO
            note = "" if parsed.exact else " (prefix match; '=' makes it exact)"
            findings.append(self.finding(severity, subject, f"{_where(setting)}: uses {', '.join(sorted(used))}{note}"))
        return findings


class NcclSocketIfname(_NcclCheck):
    id = "nccl.socket_ifname"
    title = "NCCL_SOCKET_IFNAME matches at least one interface that is up"
    reads = "NCCL_SOCKET_IFNAME; sys/class/net/*/operstate"
    variables = ("NCCL_SOCKET_IFNAME",)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        setting = node.nccl["NCCL_SOCKET_IFNAME"]
        parsed = parse_interface_list(setting.value)
        names = [n.name for n in node.nics]
        hit = [n for n in names if any(_matches(n, e, parsed.exact) for e, _ in parsed.entries)]
        used = [n for n in names if n not in hit and n != "lo"] if parsed.exclude else hit
        up = [n for n in used if (nic := node.nic(n)) is not None and nic.operstate in ("up", "unknown")]
        subject = "NCCL_SOCKET_IFNAME"
        if not used:
            return [
                self.finding(
                    Severity.FAIL,
                    subject,
                    f"{_where(setting)} matches no interface",
                    f"a prefix of one of {', '.join(names) or 'no interfaces'}",
                    "NCCL's bootstrap will fail with 'no socket interface found': correct or unset it",
                )
            ]
        if not up:
            return [
                self.finding(
                    Severity.FAIL,
                    subject,
                    f"{_where(setting)} matches only interfaces that are down: {', '.join(used)}",
                    "an interface that is up",
                    "bring the interface up or point NCCL_SOCKET_IFNAME at one that is",
                )
            ]
        return [self.finding(Severity.OK, subject, f"{_where(setting)}: uses {', '.join(up)}")]


class NcclTransport(_NcclCheck):
    id = "nccl.transport"
    title = "NCCL is not told to use sockets on a node with RDMA ports (NCCL_IB_DISABLE, NCCL_NET)"
    reads = "NCCL_IB_DISABLE, NCCL_NET; sys/class/infiniband/*/ports/*/state"
    variables = ("NCCL_IB_DISABLE", "NCCL_NET")

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        active = [p.label for p in node.ports if p.state is not None and p.state[0] == 4]
        findings = []
        disable = node.nccl.get("NCCL_IB_DISABLE")
        net = node.nccl.get("NCCL_NET")
        if disable is not None:
            if parse_int(disable.value.strip()) not in (None, 0) and active:
                findings.append(self._sockets(disable, active))
            else:
                findings.append(self.finding(Severity.OK, "NCCL_IB_DISABLE", _where(disable)))
        if net is not None:
            value = net.value.strip().lower()
            if value == "socket" and active:
                findings.append(self._sockets(net, active))
            elif value == "ib" and not active:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        "NCCL_NET",
                        f"{_where(net)} but no RDMA port is ACTIVE",
                        "an ACTIVE RDMA port",
                        "NCCL will fail to initialise: unset NCCL_NET or fix the ports",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, "NCCL_NET", _where(net)))
        return findings

    def _sockets(self, setting: NcclSetting, active: list[str]) -> Finding:
        return self.finding(
            Severity.FAIL,
            setting.name,
            f"{_where(setting)} with {len(active)} ACTIVE RDMA ports",
            "NCCL using the RDMA ports",
            f"NCCL will send everything over TCP sockets: remove {setting.name} from {setting.source}",
        )


class NcclGdrLevel(_NcclCheck):
    id = "nccl.gdr_level"
    title = "NCCL_NET_GDR_LEVEL does not switch GPUDirect RDMA off (LOC)"
    reads = "NCCL_NET_GDR_LEVEL, NCCL_IB_GDR_LEVEL"
    variables = ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL")

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for name in self.variables:
            setting = node.nccl.get(name)
            if setting is None:
                continue
            value = setting.value.strip().upper()
            if value in ("LOC", "0"):
                findings.append(
                    self.finding(
                        Severity.WARN,
                        name,
                        f"{_where(setting)}: GPUDirect RDMA never used",
                        "unset (NCCL picks by distance), or PXB/PHB",
                        f"remove {name} from {setting.source} unless GPUDirect RDMA is known broken here",
                    )
                )
            elif value.isdigit():
                findings.append(
                    self.finding(
                        Severity.WARN,
                        name,
                        f"{_where(setting)}: a numeric level",
                        "one of " + ", ".join(GDR_LEVELS),
                        "numeric levels change meaning between NCCL versions: use the name (PXB, PHB, SYS)",
                    )
                )
            elif value not in GDR_LEVELS:
                findings.append(
                    self.finding(
                        Severity.WARN,
                        name,
                        f"{_where(setting)}: not a level NCCL knows",
                        "one of " + ", ".join(GDR_LEVELS),
                        "use PIX, PXB, PHB or SYS (or unset it)",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, name, _where(setting)))
            if name == "NCCL_IB_GDR_LEVEL":
                findings.append(
                    self.finding(Severity.INFO, name, "the old name of NCCL_NET_GDR_LEVEL (renamed in NCCL 2.4)")
                )
        return findings


class NcclP2pShm(_NcclCheck):
    id = "nccl.p2p_shm"
    title = "Intra-node transports (P2P, SHM) are not disabled"
    reads = "NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE"
    variables = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_LEVEL")

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for name in self.variables:
            setting = node.nccl.get(name)
            if setting is None:
                continue
            value = setting.value.strip().upper()
            disabled = value in ("LOC", "0") if name == "NCCL_P2P_LEVEL" else parse_int(value) not in (None, 0)
            if disabled:
                what = "GPU peer-to-peer (NVLink/PCIe)" if "P2P" in name else "shared-memory transport"
                findings.append(
                    self.finding(
                        Severity.WARN,
                        name,
                        f"{_where(setting)}: {what} disabled",
                        "unset",
                        f"NCCL lists {name} under debugging: intra-node traffic goes through host memory. "
                        f"Remove it from {setting.source}",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, name, _where(setting)))
        return findings


class NcclDebug(_NcclCheck):
    id = "nccl.debug"
    title = "NCCL_DEBUG is not left at INFO or TRACE"
    reads = "NCCL_DEBUG"
    variables = ("NCCL_DEBUG",)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        setting = node.nccl["NCCL_DEBUG"]
        if setting.value.strip().upper() in ("INFO", "TRACE"):
            return [
                self.finding(
                    Severity.WARN,
                    "NCCL_DEBUG",
                    _where(setting),
                    "WARN (or unset)",
                    f"verbose NCCL logging slows start-up and floods logs on every rank: set NCCL_DEBUG=WARN "
                    f"in {setting.source} once debugging is done",
                )
            ]
        return [self.finding(Severity.OK, "NCCL_DEBUG", _where(setting))]


class NcclAlgoProto(_NcclCheck):
    id = "nccl.algo_proto"
    title = "NCCL_ALGO/NCCL_PROTO are not forced, and name real algorithms and protocols"
    reads = "NCCL_ALGO, NCCL_PROTO"
    variables = ("NCCL_ALGO", "NCCL_PROTO")

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for name, known in (("NCCL_ALGO", ALGORITHMS), ("NCCL_PROTO", PROTOCOLS)):
            setting = node.nccl.get(name)
            if setting is None:
                continue
            names = _list_names(setting.value)
            unknown = [n for n in names if n.lower() not in known]
            if unknown:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        name,
                        f"{_where(setting)}: unknown {', '.join(unknown)}",
                        "names from " + ", ".join(known),
                        "since NCCL 2.24 an invalid list fails the collective: correct the names or unset it",
                    )
                )
                continue
            risk = " (LL128 forced where unsupported can corrupt data)" if "ll128" in [n.lower() for n in names] else ""
            findings.append(
                self.finding(
                    Severity.WARN,
                    name,
                    f"{_where(setting)}: forced{risk}",
                    "unset (NCCL's tuner picks per size)",
                    f"NCCL's documentation discourages setting {name} outside experiments: remove it from "
                    f"{setting.source} unless a measurement shows it helps",
                )
            )
        return findings


def _list_names(value: str) -> list[str]:
    """Algorithm/protocol names of ``^Tree``, ``Ring,Tree`` or ``allreduce:tree;broadcast:ring``."""
    text = value.strip().lstrip("^")
    names: list[str] = []
    for part in text.split(";"):
        spec = part.split(":", 1)[1] if ":" in part else part
        names.extend(n.strip().lstrip("^") for n in spec.split(",") if n.strip())
    return names


class NcclGidIndex(_NcclCheck):
    id = "nccl.gid_index"
    title = "NCCL_IB_GID_INDEX points at a routable RoCE v2 GID on every RoCE port"
    reads = "NCCL_IB_GID_INDEX; sys/class/infiniband/<dev>/ports/<n>/{gids,gid_attrs/types}/<index>"
    variables = ("NCCL_IB_GID_INDEX",)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        setting = node.nccl["NCCL_IB_GID_INDEX"]
        index = parse_int(setting.value.strip())
        roce = [p for p in node.ports if p.link_layer == "Ethernet"]  # GID indexes matter only for RoCE
        if index is None:
            return [
                self.finding(
                    Severity.FAIL,
                    "NCCL_IB_GID_INDEX",
                    f"{_where(setting)}: not a number",
                    "a GID index, or -1 for automatic",
                    "set a number or unset it (NCCL 2.21+ picks a RoCE v2 IPv4 GID itself)",
                )
            ]
        if index < 0 or not roce:
            why = "automatic selection" if index < 0 else "no RoCE ports here (ignored on InfiniBand)"
            return [self.finding(Severity.OK, "NCCL_IB_GID_INDEX", f"{_where(setting)}: {why}")]
        findings = []
        for port in roce:
            gid = next((g for g in port.gids if g.index == index), None)
            subject = f"{port.label} GID {index}"
            if gid is None:
                findings.append(
                    self.finding(
                        Severity.FAIL,
                        subject,
                        f"{_where(setting)}: entry {index} is empty",
                        "a RoCE v2 GID",
                        "NCCL cannot connect with an empty GID: pick an index from show_gids, or unset it",
                    )
                )
            elif gid.type != "RoCE v2" or gid_is_link_local(gid.gid):
                kind = "link-local" if gid_is_link_local(gid.gid) else ""
                findings.append(
                    self.finding(
                        Severity.WARN,
                        subject,
                        f"{_where(setting)}: {gid.type or 'unknown type'} {kind} GID {gid.gid}".replace("  ", " "),
                        "a RoCE v2 GID with a routable (IPv4) address",
                        "RoCE v1 and link-local GIDs do not cross routers and miss ECN/DSCP marking: use the "
                        "index of the RoCE v2 IPv4 GID (show_gids), or unset it",
                    )
                )
            else:
                findings.append(self.finding(Severity.OK, subject, f"RoCE v2 GID {gid.gid}"))
        return findings


class NcclTopoFile(_NcclCheck):
    id = "nccl.topo_file"
    title = "NCCL_TOPO_FILE, when set, names a file that exists"
    reads = "NCCL_TOPO_FILE and that file"
    variables = ("NCCL_TOPO_FILE",)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        setting = node.nccl["NCCL_TOPO_FILE"]
        if node.topo_file_readable:
            return [self.finding(Severity.OK, "NCCL_TOPO_FILE", _where(setting))]
        return [
            self.finding(
                Severity.FAIL,
                "NCCL_TOPO_FILE",
                f"{_where(setting)}: no such file",
                "a readable topology XML",
                "NCCL fails to build its topology from a missing file: correct the path or unset it",
            )
        ]
