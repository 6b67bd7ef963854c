"""What every multi-process command shares: the world it runs in, starting local ranks, heartbeats.

- :mod:`fabricscope.launch.world`: which launcher started us (torchrun, mpirun,
  srun) or none, and the rendezvous every rank agrees on.
- :mod:`fabricscope.launch.spawn`: start ``nproc`` local ranks and supervise them.
- :mod:`fabricscope.launch.heartbeat`: each rank's heartbeat through the
  rendezvous store, so survivors name a dead or frozen peer.
- :mod:`fabricscope.launch.config`: the typed launch settings every such command embeds.
- :mod:`fabricscope.launch.lifecycle`: one rank's life (join, fit to memory, stop,
  classify a failure), ending by the one exit policy of :mod:`fabricscope.launch.outcome`.
"""

from __future__ import annotations

from fabricscope.launch.spawn import spawn
from fabricscope.launch.world import World, check_master_reachable, detect, expand_hostlist, free_port

__all__ = ["World", "check_master_reachable", "detect", "expand_hostlist", "free_port", "spawn"]
