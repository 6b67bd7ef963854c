"""What the doctor reads: one module per area, mirroring ``checks/``.

A probe reads files under a :class:`~fabricscope.sysroot.SysRoot` through the
shared parsers of :mod:`fabricscope.kernel_text` and fills the
:class:`~fabricscope.doctor.inventory.Node` the checks look at; it never
judges.  :func:`probe_node` runs them all.
"""

from __future__ import annotations

from fabricscope.doctor.probes.node import NodeEnv, node_env, passwd_home, probe_node

__all__ = ["NodeEnv", "node_env", "passwd_home", "probe_node"]
