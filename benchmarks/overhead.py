"""Overhead of a recorded run (statistics only) against a plain forward + backward.

Prints, per model, the median time of each and their ratio, measured in one process with the
two interleaved (so load on a shared machine hits both alike). Also the backward-only re-run
(``Session.run()`` on the retained graph) against a plain backward with ``retain_graph=True``.

    python benchmarks/overhead.py [--repeats 15] [--device cpu] [--only mlp|gpt]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from timing import timed

import hookviz
from hookviz.examples import TinyGPT, next_token_loss, sigmoid_mlp


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=["mlp", "gpt"])
    options = parser.parse_args()
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, device {options.device}, threads {torch.get_num_threads()}, "
        f"medians of {options.repeats}"
    )
    if options.only in (None, "mlp"):
        mlp = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10)
        data, labels = torch.randn(128, 64), torch.randint(0, 10, (128,))
        measure(
            "20-layer sigmoid MLP, width 256",
            mlp,
            (data,),
            lambda out: F.cross_entropy(out, labels.to(out.device)),
            options.repeats,
            options.device,
        )
    if options.only in (None, "gpt"):
        gpt = TinyGPT(vocab=50257, context=1024, layers=12, width=768, heads=12, dropout=0.0)
        # One short sequence (parameter gradients dominate), then a training-sized batch.
        for batch, length in ((1, 128), (4, 256)):
            tokens = torch.randint(0, 50257, (batch, length))
            measure(
                f"GPT-2-small-like, 12x768, {batch}x{length} tok",
                gpt,
                (tokens,),
                lambda out, tokens=tokens: next_token_loss(out, tokens.to(out.device)),
                max(3, options.repeats // 3),
                options.device,
            )


if __name__ == "__main__":
    main()
