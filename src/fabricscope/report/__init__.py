"""Show: plots of runs, baselines and predictions, and the self-contained HTML report."""

__all__: list[str] = []
