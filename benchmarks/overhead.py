"""Overhead of a recorded run (statistics only) against a plain forward + backward.

Prints, per model, the median time of each and their ratio, measured in one process with the
two interleaved (so load on a shared machine hits both alike). Also the backward-only re-run
(``Session.run()`` on the retained graph) against a plain backward with ``retain_graph=True``.

    python benchmarks/overhead.py [--repeats 15] [--device cpu] [--only mlp|gpt]
"""

from __future__ import annotations

import statistics

import cases
import torch
from timing import timed

import hookviz


def measure(name: str, model, args, loss_fn, repeats: int, device: str) -> None:
    model.to(device)
    args = tuple(a.to(device) for a in args)

    def plain():
        model.zero_grad(set_to_none=True)
        loss_fn(model(*args)).backward()

    session = hookviz.Session(model, args, loss_fn=loss_fn, input_grads=False, full_tensor_limit=0)

    def recorded():
        session.run(forward=True)

    retained = {"loss": loss_fn(model(*args))}

    def plain_backward():
        torch.autograd.grad(retained["loss"], list(model.parameters()), retain_graph=True)

    def recorded_backward():
        session.run()

    for function in (plain, recorded, plain_backward, recorded_backward):  # warm-up
        function()
    times = {f.__name__: [] for f in (plain, recorded, plain_backward, recorded_backward)}
    for _ in range(repeats):
        for function in (plain, recorded, plain_backward, recorded_backward):
            times[function.__name__].append(timed(function, device))
    median = {k: statistics.median(v) for k, v in times.items()}
    nodes = len(session.last_run.nodes)
    print(
        f"{name:<34} nodes={nodes:<6} plain fwd+bwd {median['plain'] * 1e3:8.2f} ms   recorded "
        f"{median['recorded'] * 1e3:8.2f} ms   ratio {median['recorded'] / median['plain']:.2f}x   |   "
        f"backward only: plain {median['plain_backward'] * 1e3:8.2f} ms  re-run "
        f"{median['recorded_backward'] * 1e3:8.2f} ms  ratio "
        f"{median['recorded_backward'] / median['plain_backward']:.2f}x"
    )


def main() -> None:
    options = cases.options(__doc__.splitlines()[0], repeats=15)
    print(f"medians of {options.repeats}")
    if options.only in (None, "mlp"):
        measure(*cases.mlp(), options.repeats, options.device)
    if options.only in (None, "gpt"):
        gpt = cases.tiny_gpt()
        # One short sequence (parameter gradients dominate), then a training-sized batch.
        for batch, length in ((1, 128), (4, 256)):
            tokens, loss_fn = cases.tokens_and_loss(batch, length)
            name = f"GPT-2-small-like, 12x768, {batch}x{length} tok"
            measure(name, gpt, (tokens,), loss_fn, max(3, options.repeats // 3), options.device)


if __name__ == "__main__":
    main()
