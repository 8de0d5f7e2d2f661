"""Timing helpers shared by the benchmarks: wall time of one call, synchronised on CUDA."""

from __future__ import annotations

import time

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously); nothing on CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(function, device: str) -> float:
    """Seconds one call of ``function()`` takes, with the device synchronised before and after."""
    sync(device)
    start = time.perf_counter()
    function()
    sync(device)
    return time.perf_counter() - start
