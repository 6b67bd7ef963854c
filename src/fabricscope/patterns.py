"""Input data whose collective result is exactly predictable.

As nccl-tests does, every rank fills its input from a formula of (element
index, rank, seed), so each rank can compute the exact expected output of a
collective for its own elements without seeing the others' data.  Values are
small integers that the datatype represents exactly, sized by the number of
ranks so that no partial sum of a reduction ever leaves the exact range; the
expected result of every reduction has a closed form (cost O(count), not
O(count * ranks)).

Reductions (``idx`` is the global element index, ``a = (idx + seed) % M``):

- sum / min / max: rank r holds ``(a + (r + idx) % n) % M``: over the ranks
  the offsets run through 0..n-1, so the sum has a closed form and the result
  of min / max is ``a`` / ``a+n-1`` unless the residues wrap.  The offset
  rotates with the element, so no single rank (a reduce's root, say) already
  holds the answer in every element.
- prod: 1 everywhere, except every third element has a 2 on one rank (product
  2) and the next element has a 2 on two ranks (product 4, where max is 2).
- avg: ``b + e`` with ``b = 1 + a`` and e = +1 on half the ranks and -1 on
  the other half (rotating with the element), so the sum is ``n*b`` and the
  average is ``b`` exactly, while no rank holds ``b`` everywhere.

Every function takes the ``torch`` module and works on the device of ``idx``.

Each pattern repeats along the index (for a fixed rank): :func:`reduce_period`
and :func:`plain_period` say after how many elements, so a large buffer is
filled and checked from one period's values (a copy and a compare per element
instead of a dozen integer divisions).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from fabricscope.dtypes import DType

__all__ = ["plain_period", "plain_value", "reduce_expected", "reduce_input", "reduce_modulus", "reduce_period"]

_CAP = 251
"""Largest modulus used: keeps patterns varied without approaching any limit."""


def reduce_modulus(dtype: DType, redop: str, nranks: int) -> int:
    """The modulus M of the reduction pattern for this type, op and rank count."""
    limit = dtype.exact_limit
    if redop == "sum":
        modulus = limit // max(nranks, 1)
    elif redop == "avg":
        modulus = (limit - 1) // max(nranks, 1) - 1
    else:
        modulus = limit
    return max(1, min(_CAP, modulus))


def reduce_period(dtype: DType, redop: str, nranks: int) -> int:
    """A period of :func:`reduce_input` (any rank) and :func:`reduce_expected` along the index: every
    term of either is a function of the index modulo M, the rank count or 3 (prod's kinds)."""
    return math.lcm(reduce_modulus(dtype, redop, nranks), max(nranks, 1), 3)


def reduce_input(torch: ModuleType, idx: Any, rank: int, nranks: int, redop: str, dtype: DType, seed: int) -> Any:
    """This rank's input values at global indices ``idx`` (an int64 tensor)."""
    modulus = reduce_modulus(dtype, redop, nranks)
    a = (idx + seed) % modulus
    if redop in ("sum", "min", "max"):
        values = (a + (rank + idx) % nranks) % modulus
    elif redop == "prod":
        owner = (idx + seed) % nranks
        kind = (idx + seed) % 3
        second = (owner + 1) % nranks
        twos = ((kind == 0) & (owner == rank)) | ((kind == 1) & ((owner == rank) | (second == rank)))
        values = torch.ones_like(idx) + twos.to(idx.dtype)
    elif redop == "avg":
        # With more ranks than the type can sum exactly (bf16 beyond ~125 ranks),
        # the base is 0: floats keep the +1/-1 pair, integers hold zeros.
        values = 1 + a if _avg_fits(dtype, nranks) else torch.zeros_like(a)
        if nranks > 1 and (_avg_fits(dtype, nranks) or dtype.is_float):
            # Half the ranks add 1 and half subtract 1 (the middle one of an odd
            # count adds 0), rotating with the element: the sum stays n*b.
            position = (rank + idx + seed) % nranks
            half = nranks // 2
            values = values + (position < half).to(idx.dtype) - (position >= nranks - half).to(idx.dtype)
    else:  # pragma: no cover - parse_redops guards this
        raise AssertionError(redop)
    return values.to(getattr(torch, dtype.torch_name))


def reduce_expected(torch: ModuleType, idx: Any, nranks: int, redop: str, dtype: DType, seed: int) -> Any:
    """The exact reduction over all ranks at global indices ``idx``."""
    modulus = reduce_modulus(dtype, redop, nranks)
    a = (idx + seed) % modulus
    if redop == "sum":
        full, rest = divmod(nranks, modulus)
        # rest terms a, a+1, ..., a+rest-1, each taken mod M (at most one wrap).
        wraps = torch.clamp(a + rest - modulus, min=0)
        values = full * (modulus * (modulus - 1) // 2) + rest * a + rest * (rest - 1) // 2 - modulus * wraps
    elif redop == "min":
        if nranks >= modulus:
            values = torch.zeros_like(a)
        else:
            values = torch.where(a + nranks - 1 >= modulus, torch.zeros_like(a), a)
    elif redop == "max":
        if nranks >= modulus:
            values = torch.full_like(a, modulus - 1)
        else:
            values = torch.where(a + nranks - 1 >= modulus, torch.full_like(a, modulus - 1), a + nranks - 1)
    elif redop == "prod":
        kind = (idx + seed) % 3
        double = 4 if nranks > 1 else 2
        values = torch.where(kind == 0, 2, torch.where(kind == 1, double, 1)).to(idx.dtype)
    elif redop == "avg":
        values = 1 + a if _avg_fits(dtype, nranks) else torch.zeros_like(a)
    else:  # pragma: no cover
        raise AssertionError(redop)
    return values.to(getattr(torch, dtype.torch_name))


def _avg_fits(dtype: DType, nranks: int) -> bool:
    """Whether sums of n values of up to M+1 (M >= 1) stay exact in this type."""
    return (dtype.exact_limit - 1) // max(nranks, 1) - 1 >= 1


def plain_period(dtype: DType) -> int:
    """The modulus of :func:`plain_value`: its period along the index for one rank (an int ``rank``)."""
    return min(256, dtype.exact_limit + 1)


def plain_value(torch: ModuleType, idx: Any, rank: Any, dtype: DType, seed: int) -> Any:
    """Values for ops that move data without reducing it: distinct per rank and index.

    ``rank`` may be an int or an int64 tensor shaped like ``idx``.
    """
    modulus = plain_period(dtype)
    return ((idx + seed + 7 * rank) % modulus).to(getattr(torch, dtype.torch_name))
