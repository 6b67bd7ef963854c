"""``fabricscope dataload``: how fast storage feeds training, and whether it starves the GPUs.

:func:`~fabricscope.dataload.dataset.scan` finds the files,
:func:`~fabricscope.dataload.reader.read_dataset` reads and times them,
:func:`~fabricscope.dataload.verdict.judge` compares the rate with a need, and
:mod:`~fabricscope.dataload.report` says what the numbers mean (page cache,
O_DIRECT) and builds the Result.
"""

from __future__ import annotations

__all__: list[str] = []
