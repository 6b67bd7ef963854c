"""Predicting: the hardware catalog, cluster descriptions, and analytic models."""
