"""Watching: live NIC, RDMA, TCP and GPU counters, around a command, as a recording or a Prometheus exporter.

``fabricscope monitor`` on the command line; from Python see
:mod:`fabricscope.monitor.session`.  Samplers read sysfs and procfs through the
same :class:`~fabricscope.sysroot.SysRoot` as the doctor, so fixture trees
and captures drive them.  Nothing heavy is imported here.
"""

from __future__ import annotations

__all__: list[str] = []
