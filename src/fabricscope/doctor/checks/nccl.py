"""Checks of the NCCL settings a job on this node would inherit.

Variables come from the environment, ``$NCCL_CONF_FILE`` (or ``~/.nccl.conf``)
and ``/etc/nccl.conf`` (see :mod:`fabricscope.doctor.probes.nccl`); every
finding names where the value came from, so the fix lands in the right place.
Values are read as NCCL reads them: interface lists with NCCL's matching (no
space trimmed, ``=`` exact, ``^`` exclude, ``:port``), integers with
``strtoll`` (``0x3`` and ``3x`` are 3), level names case-sensitively.
"""

from __future__ import annotations

from collections.abc import Iterator

from fabricscope.doctor.checks.base import Check, compute_ports, is_active
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NcclSetting, Node, RdmaPort
from fabricscope.doctor.probes.nccl import nccl_int, parse_interface_list
from fabricscope.doctor.probes.net import ARPHRD_LOOPBACK
from fabricscope.kernel_text import gid_is_link_local
from fabricscope.units import is_digits

__all__ = [
    "ALGORITHMS",
    "GDR_LEVELS",
    "LOCAL_ONLY_PREFIXES",
    "PROTOCOLS",
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
]

ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
"""What NCCL reads a numeric level as (``levelsOldToNew`` in ``src/graph/paths.cc``); larger numbers are the last."""
LOCAL_ONLY_PREFIXES = ("docker", "virbr")
"""Bridges of containers and VMs behind NAT (and ``lo``): they carry no traffic between nodes."""


def _where(setting: NcclSetting) -> str:
    return f"{setting.name}={setting.value} ({setting.source})"


def _level(value: str) -> str | None:
    """A GDR/P2P level as NCCL reads it: an exact (case-sensitive) name, or an old number; None when neither."""
    if value in GDR_LEVELS or value in ("NVL", "NVB"):
        return value
    if is_digits(value[:1]):
        number, _ = nccl_int(value)
        return OLD_LEVELS[min(number or 0, len(OLD_LEVELS) - 1)]
    return None


class _NcclCheck(Check):
    """A check of some NCCL variables: applies when one is set; findings name the variable and where it was set.

    :meth:`judge` yields what it finds about one setting; a setting it says
    nothing about is ok.
    """

    variables: tuple[str, ...] = ()

    def applies(self, node: Node, expect: Expectations) -> bool:
        return any(v in node.nccl for v in self.variables)

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        for setting in (node.nccl[name] for name in self.variables if name in node.nccl):
            findings.extend(list(self.judge(node, expect, setting)) or [self.about(Severity.OK, setting)])
        return findings

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        raise NotImplementedError

    def about(
        self, severity: Severity, setting: NcclSetting, note: str = "", expected: str = "", advice: str = ""
    ) -> Finding:
        observed = _where(setting) + (f": {note}" if note else "")
        return self.finding(severity, setting.name, observed, expected, advice)

    def number(self, setting: NcclSetting) -> tuple[int | None, list[Finding]]:
        """The value as NCCL's ``strtoll`` reads it, and a warning when that is not what it looks like."""
        value, rest = nccl_int(setting.value)
        if rest == "" or (value is None and setting.value == ""):
            return value, []
        if value is None:
            note = "out of range: NCCL keeps its default"
        elif rest == setting.value:
            note = f"not a number: NCCL reads it as {value}"
        else:
            note = f"NCCL reads it as {value} and ignores {rest!r}"
        advice = f"write a plain number in {setting.source}"
        return value, [self.about(Severity.WARN, setting, note, "a number", advice)]


class NcclSettings(Check):
    id = "nccl.settings"
    title = "NCCL settings in effect and which environment they came from; config lines NCCL misreads"
    reads = "environment (this process's, or the capture's), $NCCL_CONF_FILE or ~/.nccl.conf, etc/nccl.conf"

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        findings = []
        nccl = {k: v for k, v in node.nccl.items() if k.startswith("NCCL_")}
        if nccl:
            findings.append(self.finding(Severity.INFO, node.hostname, "; ".join(_where(s) for s in nccl.values())))
        else:
            findings.append(self.finding(Severity.OK, node.hostname, "no NCCL variables set: NCCL auto-detects"))
        if node.env_ignored:
            findings.append(
                self.finding(
                    Severity.INFO,
                    node.hostname,
                    f"not used from this shell: {', '.join(node.env_ignored)} (the capture's recorded environment "
                    "is checked; --live-env checks this shell's instead)",
                )
            )
        conf_file = node.nccl.get("NCCL_CONF_FILE")
        if node.nccl_conf_too_large and conf_file is not None:
            findings.append(
                self.finding(
                    Severity.WARN,
                    "NCCL_CONF_FILE",
                    f"NCCL_CONF_FILE={conf_file.value} is larger than 1 MiB: not checked",
                    "a config file the doctor can check (a few lines of NCCL variables)",
                    "NCCL reads it whole, so its settings apply: look at them by hand (grep '^NCCL_'), and trim "
                    "the file to the variables it sets",
                )
            )
        elif node.nccl_conf_unreadable is not None and conf_file is not None:
            findings.append(
                self.finding(
                    Severity.WARN,
                    "NCCL_CONF_FILE",
                    f"NCCL_CONF_FILE={conf_file.value} cannot be read under {node.root}: {node.nccl_conf_unreadable}",
                    "a file NCCL can read",
                    "NCCL skips a config file it cannot open, without a word: correct the path in NCCL_CONF_FILE "
                    f"({conf_file.source}) or the file's permissions, so the job's user can read it",
                )
            )
        for problem in node.nccl_conf_problems:
            where, _, text = problem.partition(": ")
            findings.append(
                self.finding(
                    Severity.WARN,
                    where if text else node.hostname,
                    text or problem,
                    "NAME=value lines",
                    "NCCL splits each line at the first '=' and keeps every other character, spaces and "
                    "carriage returns included: write NAME=value with nothing around it",
                )
            )
        return findings


class NcclIbHca(_NcclCheck):
    id = "nccl.ib_hca"
    title = "NCCL_IB_HCA leaves NCCL ACTIVE ports, names devices and ports that exist, and matches no extra ones"
    reads = "NCCL_IB_HCA; sys/class/infiniband/*/ports/*/state"
    variables = ("NCCL_IB_HCA",)

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        yield from self._judge(node, setting)

    def _judge(self, node: Node, setting: NcclSetting) -> list[Finding]:
        if not node.rdma:
            return [self.about(Severity.INFO, setting, "no RDMA devices on this node")]
        parsed = parse_interface_list(setting.value)
        devices = sorted(d.name for d in node.rdma)
        exact = ("^" if parsed.exclude else "") + "=" + ",".join(n.strip() for n, _ in parsed.entries)
        findings: list[Finding] = []
        for name, port in parsed.entries:
            findings.extend(self._entry(node, setting, parsed.exact, parsed.exclude, name, port, devices, exact))
        selected = [p for p in node.ports if parsed.matches(p.device, p.port)]
        active = [p for p in selected if is_active(p)]
        idle = ", ".join(
            f"{p.label} ({p.state[1] if p.state else 'state unreadable'})" for p in selected if p not in active
        )
        if not selected:
            findings.append(
                self.about(
                    Severity.FAIL,
                    setting,
                    "leaves no RDMA device for NCCL",
                    f"some of {', '.join(devices)}",
                    "NCCL will fall back to TCP sockets: correct or unset NCCL_IB_HCA",
                )
            )
        elif not active:
            findings.append(
                self.about(
                    Severity.FAIL,
                    setting,
                    f"selects only ports that are not ACTIVE: {idle}",
                    "an ACTIVE port",
                    "NCCL uses ACTIVE ports only, so it falls back to TCP sockets (or fails with NCCL_NET=IB): "
                    "bring the ports up or select ACTIVE ones",
                )
            )
        elif idle:
            findings.append(
                self.about(
                    Severity.WARN,
                    setting,
                    f"selects ports that are not ACTIVE: {idle}",
                    "only ACTIVE ports",
                    "NCCL skips them and runs on fewer NICs: bring them up or leave them out",
                )
            )
        if not findings:
            note = "" if parsed.exact else " (prefix match; '=' makes it exact)"
            used = f"uses {', '.join(p.label for p in active)}{note}"
            findings.append(self.about(Severity.OK if parsed.exact else Severity.INFO, setting, used))
        return findings

    def _entry(
        self,
        node: Node,
        setting: NcclSetting,
        exact: bool,
        exclude: bool,
        name: str,
        port: int | None,
        devices: list[str],
        fixed: str,
    ) -> Iterator[Finding]:
        """Every problem of one entry of the list: spaces, a prefix matching more, nothing matched, no such port."""
        hits = [d for d in devices if (d == name if exact else d.startswith(name))]
        if name != name.strip():
            yield self.about(
                Severity.WARN,
                setting,
                f"entry {name!r} has spaces, which NCCL keeps" + ("" if hits else ": it matches no device"),
                f"{name.strip()!r}",
                f"remove the spaces: {fixed}",
            )
        elif not hits and not exclude:
            yield self.about(
                Severity.WARN,
                setting,
                f"'{name}' matches no device",
                f"one of {', '.join(devices)}",
                f"remove '{name}' or correct it; devices here: {', '.join(devices)}",
            )
        extra = [d for d in hits if d != name]
        if extra and not exact and name in devices:
            verb = "excludes" if exclude else "also selects"
            yield self.about(
                Severity.WARN,
                setting,
                f"'{name}' is a prefix and {verb} {', '.join(extra)}",
                f"only {name}",
                f"start the list with '=' for exact names: {fixed}",
            )
        ports = {p.port for p in node.ports if p.device in hits}
        if port is not None and hits and port not in ports:
            yield self.about(
                Severity.WARN,
                setting,
                f"'{name}' has no port {port}",
                f"port {' or '.join(str(p) for p in sorted(ports))}",
                "correct the port number after ':' (ports count from 1)",
            )


class NcclSocketIfname(_NcclCheck):
    id = "nccl.socket_ifname"
    title = "NCCL_SOCKET_IFNAME matches an interface that is up and can reach other nodes"
    reads = "NCCL_SOCKET_IFNAME; sys/class/net/*/{operstate,type}"
    variables = ("NCCL_SOCKET_IFNAME",)

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        parsed = parse_interface_list(setting.value)
        names = [n.name for n in node.nics]
        used = [n for n in node.nics if parsed.matches(n.name)]
        up = [n for n in used if n.operstate in ("up", "unknown")]
        local = [n.name for n in up if n.arphrd == ARPHRD_LOOPBACK or n.name.startswith(LOCAL_ONLY_PREFIXES)]
        if not used:
            yield self.about(
                Severity.FAIL,
                setting,
                "matches no interface",
                f"a prefix of one of {', '.join(names) or 'no interfaces'}",
                "NCCL's bootstrap will fail with 'no socket interface found': correct or unset it",
            )
        elif not up and any(n.operstate is None for n in used):
            yield self.about(
                Severity.WARN,
                setting,
                "could not read whether "
                + ", ".join(n.name for n in used if n.operstate is None)
                + " is up (operstate unreadable)",
                "an interface that is up",
                "probe.read says why; ip link show says whether it is up",
            )
        elif not up:
            yield self.about(
                Severity.FAIL,
                setting,
                f"matches only interfaces that are down: {', '.join(n.name for n in used)}",
                "an interface that is up",
                "bring the interface up or point NCCL_SOCKET_IFNAME at one that is",
            )
        elif local:
            yield self.about(
                Severity.WARN,
                setting,
                f"uses {', '.join(local)}, which cannot carry traffic between nodes",
                "the interface of the network between nodes",
                "loopback and container or VM bridges (docker*, virbr*) reach only this node: a job across "
                "nodes hangs or fails at start-up; name the NIC of the cluster network (NCCL_SOCKET_IFNAME==eth0)",
            )
        else:
            yield self.about(Severity.OK, setting, f"uses {', '.join(n.name for n in up)}")


class NcclTransport(_NcclCheck):
    id = "nccl.transport"
    title = "NCCL is not told to use sockets on a node with RDMA ports (NCCL_IB_DISABLE, NCCL_NET)"
    reads = "NCCL_IB_DISABLE, NCCL_NET; sys/class/infiniband/*/ports/*/state"
    variables = ("NCCL_IB_DISABLE", "NCCL_NET")

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        active = [p.label for p in node.ports if is_active(p)]
        if setting.name == "NCCL_IB_DISABLE":
            value, notes = self.number(setting)
            yield from notes
            sockets = bool(value)
        else:
            sockets = setting.value.lower() == "socket"
            if setting.value.lower() == "ib" and not active:
                advice = "NCCL will fail to initialise: unset NCCL_NET or fix the ports"
                yield self.about(Severity.FAIL, setting, "but no RDMA port is ACTIVE", "an ACTIVE RDMA port", advice)
        if sockets and active:
            yield self.about(
                Severity.FAIL,
                setting,
                f"with {len(active)} ACTIVE RDMA ports",
                "NCCL using the RDMA ports",
                f"NCCL will send everything over TCP sockets: remove {setting.name} from {setting.source}",
            )


class NcclGdrLevel(_NcclCheck):
    id = "nccl.gdr_level"
    title = "NCCL_NET_GDR_LEVEL does not switch GPUDirect RDMA off (LOC), and is a level NCCL reads"
    reads = "NCCL_NET_GDR_LEVEL, NCCL_IB_GDR_LEVEL"
    variables = ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL")

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        level = _level(setting.value)
        numeric = is_digits(setting.value[:1])
        read_as = f" (NCCL reads {setting.value} as {level})" if numeric else ""
        levels = "one of " + ", ".join(GDR_LEVELS)
        if level == "LOC":
            yield self.about(
                Severity.WARN,
                setting,
                f"GPUDirect RDMA never used{read_as}",
                "unset (NCCL picks by distance), or PXB/PHB",
                f"remove {setting.name} from {setting.source} unless GPUDirect RDMA is known broken here",
            )
        elif level is None:
            yield self.about(
                Severity.WARN,
                setting,
                "not a level NCCL knows (names are case-sensitive): NCCL ignores it",
                levels,
                "use PIX, PXB, PHB or SYS in capitals (or unset it)",
            )
        elif numeric:
            advice = f"numeric levels change meaning between NCCL versions: write {level}"
            yield self.about(Severity.WARN, setting, f"a numeric level{read_as}", levels, advice)
        elif setting.name == "NCCL_IB_GDR_LEVEL":
            yield self.about(Severity.OK, setting)
        if setting.name == "NCCL_IB_GDR_LEVEL":
            yield self.about(Severity.INFO, setting, "the old name of NCCL_NET_GDR_LEVEL (renamed in 2.4)")


class NcclP2pShm(_NcclCheck):
    id = "nccl.p2p_shm"
    title = "Intra-node transports (P2P, SHM) are not disabled"
    reads = "NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE"
    variables = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_LEVEL")

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        if setting.name == "NCCL_P2P_LEVEL":
            disabled = _level(setting.value) == "LOC"
        else:
            value, notes = self.number(setting)
            yield from notes
            disabled = value == 1  # NCCL tests "== 1": other values leave the transport on
        if disabled:
            what = "GPU peer-to-peer (NVLink/PCIe)" if "P2P" in setting.name else "shared-memory transport"
            yield self.about(
                Severity.WARN,
                setting,
                f"{what} disabled",
                "unset",
                f"NCCL lists {setting.name} under debugging: intra-node traffic goes through host memory. "
                f"Remove it from {setting.source}",
            )


class NcclDebug(_NcclCheck):
    id = "nccl.debug"
    title = "NCCL_DEBUG is not left at INFO or TRACE"
    reads = "NCCL_DEBUG"
    variables = ("NCCL_DEBUG",)

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        if setting.value.upper() in ("INFO", "TRACE"):
            yield self.about(
                Severity.WARN,
                setting,
                expected="WARN (or unset)",
                advice=f"verbose NCCL logging slows start-up and floods logs on every rank: set NCCL_DEBUG=WARN "
                f"in {setting.source} once debugging is done",
            )


class NcclAlgoProto(_NcclCheck):
    id = "nccl.algo_proto"
    title = "NCCL_ALGO/NCCL_PROTO are not forced, and name real algorithms and protocols"
    reads = "NCCL_ALGO, NCCL_PROTO"
    variables = ("NCCL_ALGO", "NCCL_PROTO")

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        known = ALGORITHMS if setting.name == "NCCL_ALGO" else PROTOCOLS
        names = _list_names(setting.value)
        unknown = [n for n in names if n.lower() not in known]
        if unknown:
            yield self.about(
                Severity.FAIL,
                setting,
                f"unknown {', '.join(unknown)}",
                "names from " + ", ".join(known),
                "since NCCL 2.24 an invalid list fails the collective: correct the names or unset it",
            )
            return
        risk = " (LL128 forced where unsupported can corrupt data)" if "ll128" in [n.lower() for n in names] else ""
        yield self.about(
            Severity.WARN,
            setting,
            f"forced{risk}",
            "unset (NCCL's tuner picks per size)",
            f"NCCL's documentation discourages setting {setting.name} outside experiments: remove it from "
            f"{setting.source} unless a measurement shows it helps",
        )


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
    title = "NCCL_IB_GID_INDEX points at a routable RoCE v2 GID on every RoCE compute port"
    reads = "NCCL_IB_GID_INDEX; sys/class/infiniband/<dev>/ports/<n>/{gids,gid_attrs/types}/<index>"
    variables = ("NCCL_IB_GID_INDEX",)

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        index, notes = self.number(setting)
        yield from notes
        roce = [p for p in compute_ports(node, expect) if p.link_layer == "Ethernet"]  # GID indexes matter on RoCE
        if index is None or index < 0 or not roce:
            auto = index is None or index < 0
            yield self.about(Severity.OK, setting, "automatic selection" if auto else "no RoCE compute ports")
            return
        for port in roce:
            yield self._port(setting, port, index)

    def _port(self, setting: NcclSetting, port: RdmaPort, index: int) -> Finding:
        gid = next((g for g in port.gids if g.index == index), None)
        subject = f"{port.label} GID {index}"
        if gid is None and index in port.gids_unread:
            return self.finding(
                Severity.WARN,
                subject,
                f"{_where(setting)}: entry {index} could not be read",
                "a RoCE v2 GID",
                "probe.read says why; show_gids lists the port's GID table",
            )
        if gid is None:
            return self.finding(
                Severity.FAIL,
                subject,
                f"{_where(setting)}: entry {index} is empty",
                "a RoCE v2 GID",
                "NCCL cannot connect with an empty GID: pick an index from show_gids, or unset it",
            )
        if gid.type != "RoCE v2" or gid_is_link_local(gid.gid):
            kind = " link-local" if gid_is_link_local(gid.gid) else ""
            return self.finding(
                Severity.WARN,
                subject,
                f"{_where(setting)}: {gid.type or 'unknown type'}{kind} GID {gid.gid}",
                "a RoCE v2 GID with a routable (IPv4) address",
                "RoCE v1 and link-local GIDs do not cross routers and miss ECN/DSCP marking: use the index of "
                "the RoCE v2 IPv4 GID (show_gids), or unset it",
            )
        return self.finding(Severity.OK, subject, f"RoCE v2 GID {gid.gid}")


class NcclTopoFile(_NcclCheck):
    id = "nccl.topo_file"
    title = "NCCL_TOPO_FILE, when set, names a file that exists"
    reads = "NCCL_TOPO_FILE and that file"
    variables = ("NCCL_TOPO_FILE",)

    def judge(self, node: Node, expect: Expectations, setting: NcclSetting) -> Iterator[Finding]:
        if not node.topo_file_readable:
            advice = "NCCL fails to build its topology from a missing file: correct the path or unset it"
            yield self.about(Severity.FAIL, setting, "no such file", "a readable topology XML", advice)
