"""Gradient statistics: tensors reduced to norms, extremes and counts."""
