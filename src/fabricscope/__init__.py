"""fabricscope: is the network what holds distributed training back, and what would fix it?

The public API is listed in ``__all__``; everything the CLI does is reachable
from these modules.  Heavy dependencies (torch) are imported only by the
functions that measure.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
