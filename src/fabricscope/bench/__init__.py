"""Measuring: collective sweeps over torch.distributed, nccl-tests compatible.

``config`` (the typed run configuration), ``runner`` (one rank's sweep),
``worker`` (one rank's part, over the shared life of a rank in
:mod:`fabricscope.launch.lifecycle`) and ``output`` (rank 0's table and files).
The op registry, datatypes and the nccl-tests table are in the shared layer
(:mod:`fabricscope.ops`, :mod:`fabricscope.dtypes`, :mod:`fabricscope.table`)
because the model uses them too; torch is imported only by the ranks.
"""

__all__: list[str] = []
