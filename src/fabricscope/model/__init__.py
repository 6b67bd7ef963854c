"""Predicting: the hardware catalog, cluster descriptions, and analytic models."""

__all__: list[str] = []
