"""Measuring: collective benchmarks over torch.distributed (nccl-tests compatible).

``collectives`` (the op registry), ``dtypes`` (datatypes and reductions) and
``table`` (the nccl-tests text table) import no torch, so the model can share
them; ``runner`` and ``worker`` import torch when they run.
"""
