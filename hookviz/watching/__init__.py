"""Watching training: gradient statistics per step, their history, and the gather across ranks."""
