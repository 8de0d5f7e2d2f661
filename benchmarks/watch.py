"""Cost of ``hookviz.watch`` on a training step: median step time with a watch over one without.

Two identical copies of each model (same weights, same data, each with its own SGD-with-momentum
optimizer) are trained side by side in one process, one watched (``every=1``, parameters and
module outputs) and one not, with their steps interleaved so that load on a shared machine hits
both alike. A step is ``zero_grad``, forward, loss, ``backward``, ``optimizer.step()``. Also prints
where the watch's time goes: the hooks during forward + backward, and the end-of-backward reduction.

    python benchmarks/watch.py [--repeats 30] [--device cpu] [--only mlp|gpt] [--gpt-layers 12]
"""

from __future__ import annotations

import copy
import statistics
import time

import cases
import torch
from timing import sync

import hookviz.watching.reduce as reduce_module
from hookviz.watching.watch import watch


def measure(name: str, model, args, loss_fn, repeats: int, device: str) -> None:
    plain_model = model.to(device)
    watched_model = copy.deepcopy(plain_model)
    args = tuple(a.to(device) for a in args)
    optimizers = {
        id(m): torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9) for m in (plain_model, watched_model)
    }

    def step(m) -> float:
        sync(device)
        start = time.perf_counter()
        optimizer = optimizers[id(m)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(m(*args)).backward()
        optimizer.step()
        sync(device)
        return time.perf_counter() - start

    # Time spent reducing gradients, measured by wrapping the reducer (a side channel): its add(),
    # which reduces a dense float CPU gradient at once (and on CPU a full batch), plus its
    # end-of-backward finish(), summed per step.
    reduce_times: list[float] = []
    step_total = [0.0]
    original_add, original_finish = reduce_module.StepReducer.add, reduce_module.StepReducer.finish

    def timed_add(*a):
        start = time.perf_counter()
        try:
            return original_add(*a)
        finally:
            step_total[0] += time.perf_counter() - start

    def timed_finish(*a):
        start = time.perf_counter()
        try:
            return original_finish(*a)
        finally:
            reduce_times.append(step_total[0] + time.perf_counter() - start)
            step_total[0] = 0.0

    reduce_module.StepReducer.add, reduce_module.StepReducer.finish = timed_add, timed_finish
    try:
        with watch(watched_model) as w:
            for _ in range(2):  # warm-up
                step(plain_model), step(watched_model)
            reduce_times.clear()
            plain, watched = [], []
            for i in range(repeats):
                # alternate which goes first, so neither always runs on a warmer cache
                if i % 2:
                    plain.append(step(plain_model))
                    watched.append(step(watched_model))
                else:
                    watched.append(step(watched_model))
                    plain.append(step(plain_model))
    finally:
        reduce_module.StepReducer.add, reduce_module.StepReducer.finish = original_add, original_finish
    plain_median, watched_median = statistics.median(plain), statistics.median(watched)
    reduce_median = statistics.median(reduce_times)
    hooks = watched_median - plain_median - reduce_median
    print(
        f"{name:<36} names={len(w.names):<4} plain step {plain_median * 1e3:9.2f} ms   watched "
        f"{watched_median * 1e3:9.2f} ms   ratio {watched_median / plain_median:.3f}x   "
        f"(reduction {reduce_median * 1e3:.2f} ms/step, hooks and the rest {hooks * 1e3:.2f} ms/step; "
        f"steps kept {len(w.steps)})"
    )


def main() -> None:
    options = cases.options(__doc__.splitlines()[0], 30, ("--gpt-layers", {"type": int, "default": 12}))
    print(f"medians of {options.repeats} (GPT: of {max(5, options.repeats // 4)})")
    if options.only in (None, "mlp"):
        measure(*cases.mlp(), options.repeats, options.device)
    if options.only in (None, "gpt"):
        layers = options.gpt_layers
        tokens, loss_fn = cases.tokens_and_loss(1, 128)
        name = f"GPT-2-small-like, {layers}x768, 128 tok"
        measure(
            name, cases.tiny_gpt(layers), (tokens,), loss_fn, max(5, options.repeats // 4), options.device
        )


if __name__ == "__main__":
    main()
