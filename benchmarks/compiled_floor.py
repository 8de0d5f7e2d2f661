"""What a fresh recorded run could cost if its per-Node work were compiled: the evidence for a decision.

A fresh run of hookviz on the 20-layer MLP costs about 2.2x a plain step, against the 1.5x that
issue 11 asks. Its mechanism alone (module hooks, a graph walk, a post-hook on every Node and a norm
per gradient) costs a fraction of that; the rest is Python bookkeeping spread over every Node and
module call. This script measures, side by side in one process, interleaved, medians:

- a plain step (``zero_grad``, forward, loss, ``backward``);
- the Python floor: module forward pre/post hooks that note each call's sequence-number range, a
  graph walk, a Node post-hook on every Node queueing a 2-norm per gradient, ``autograd.grad``,
  the norms fetched;
- the compiled floor: the same, with the walk and the Node post-hooks in C++
  (``benchmarks/compiled_floor.cpp``, built here against the installed torch), with and without the
  Python module hooks;
- hookviz's fresh run, default settings.

The compiled variants need torch's C++ headers, a C++ compiler and ninja; without them they are
skipped with a note. The build takes about 40 s the first time (cached by torch afterwards).

    python benchmarks/compiled_floor.py [--repeats 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import hookviz
from hookviz.examples import sigmoid_mlp


def _forward(model, data, loss_fn, modules, brackets: bool) -> torch.Tensor:
    """The loss of one forward on a copy of ``data``; with ``brackets``, under module forward pre-
    and post-hooks that note each call's sequence-number range (what hookviz needs to tell each
    Node's module), removed after."""
    sequence_nr = torch._C._autograd._get_sequence_nr
    calls, handles = [], []
    if brackets:
        for module in modules:
            handles.append(module.register_forward_pre_hook(lambda m, a: calls.append((m, sequence_nr()))))
            handles.append(module.register_forward_hook(lambda m, a, o: calls.append((m, sequence_nr()))))
    try:
        return loss_fn(model(data.clone()))
    finally:
        for handle in handles:
            handle.remove()


def _python_floor(model, data, loss_fn, parameters, modules, kept):
    loss = _forward(model, data, loss_fn, modules, brackets=True)
    norms = []

    def hook(grad_inputs, grad_outputs):
        norms.extend(torch.linalg.vector_norm(g) for g in grad_inputs if g is not None)

    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ != "AccumulateGrad":
            node.register_hook(hook)
        stack.extend(child for child, _ in node.next_functions)
    # Held until the next call, as hookviz holds a run's gradients: freeing them at once would
    # hand their pages back to the system and fault them in again next step.
    kept[:] = [torch.autograd.grad(loss, parameters, retain_graph=True), loss]
    torch.stack(norms).tolist()


def _compiled_floor(extension, model, data, loss_fn, parameters, modules, kept, brackets):
    loss = _forward(model, data, loss_fn, modules, brackets)
    recording = extension.hook_every_node(loss)
    kept[:] = [torch.autograd.grad(loss, parameters, retain_graph=True), loss, recording]
    norms, *graph = recording.collect()
    norms.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    options = parser.parse_args()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10)
    data, labels = torch.randn(64, 64), torch.randint(0, 10, (64,))

    def loss_fn(out):
        return F.cross_entropy(out, labels)

    parameters, modules = list(model.parameters()), list(model.modules())
    session = hookviz.Session(model, (data,), loss_fn=loss_fn)
    kept: list = []

    def plain():
        model.zero_grad(set_to_none=True)
        loss_fn(model(data)).backward()

    rows = {
        "plain step": plain,
        "Python floor: module hooks, walk, Node hooks, norms": lambda: _python_floor(
            model, data, loss_fn, parameters, modules, kept
        ),
    }
    try:
        from torch.utils.cpp_extension import load

        source = Path(__file__).with_name("compiled_floor.cpp")
        extension = load(name="hookviz_compiled_floor", sources=[str(source)], extra_cflags=["-O2"])
    except Exception as error:  # no compiler, no ninja, no headers: the compiled rows are skipped
        print(f"compiled rows skipped: {type(error).__name__}: {str(error)[:200]}")
    else:
        rows["compiled walk + Node hooks, Python module hooks"] = lambda: _compiled_floor(
            extension, model, data, loss_fn, parameters, modules, kept, brackets=True
        )
        rows["compiled walk + Node hooks, no module hooks"] = lambda: _compiled_floor(
            extension, model, data, loss_fn, parameters, modules, kept, brackets=False
        )
    rows["hookviz fresh run"] = lambda: session.run(forward=True)
    times: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(3):  # warm-up
        for step in rows.values():
            step()
    for i in range(options.repeats):
        order = list(rows.items()) if i % 2 else list(reversed(rows.items()))
        for label, step in order:
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    plain_median = statistics.median(times["plain step"])
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, 20-layer sigmoid MLP, width 256, "
        f"batch 64; medians of {options.repeats}, interleaved"
    )
    for label, measured in times.items():
        median = statistics.median(measured)
        print(f"  {label:<52} {median / plain_median:5.2f}x   ({median * 1e3:6.2f} ms)")


if __name__ == "__main__":
    main()
