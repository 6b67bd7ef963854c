"""Point-to-point tests between every pair of ranks or nodes: find the slow link.

- :mod:`fabricscope.pairs.schedule`: the round-robin schedule (disjoint pairs per round).
- :mod:`fabricscope.pairs.analysis`: outliers against the median (robust scores), the
  slowest link, the node most often involved.
- :mod:`fabricscope.pairs.exchange`: what two ranks do to measure their link (torch).
- :mod:`fabricscope.pairs.report`: the matrices and findings, printed with rich.
- :mod:`fabricscope.pairs.worker`: one rank's life; :mod:`fabricscope.pairs.cli`: the command.
"""

__all__: list[str] = []
