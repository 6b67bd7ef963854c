"""Remember: the history of Results (SQLite), baselines, comparisons and importers.

``history`` keeps every saved Result; ``runs`` turns a RUN argument (a result
file or a history id) into a Result; ``baselines`` names runs; ``compare``
judges a run against a baseline, another run or a prediction;
``nccl_tests`` reads the C nccl-tests' output into a Result.
"""

__all__: list[str] = []
