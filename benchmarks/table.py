"""The whole overhead table of issue 11, hookviz beside its peers, measured side by side in one process.

Rows, each the median over back-to-back pairs of its time over a plain step's (``zero_grad``,
forward, loss, ``backward``), the two interleaved so that load on a shared machine hits both alike:

- hookviz fresh run (``Session.run(forward=True)``, default settings: lazy details) and
  backward-only re-run (``Session.run()`` on the retained graph); each again with its records
  read (``run.nodes``: a run makes its NodeRecords and ModuleCalls on first read); the fresh run
  with every detail read (``fill_details()``: one full re-run) and with ``details="eager"``;
- ``hookviz.watch`` on a training step;
- ``wandb.watch(model, log="gradients", log_freq=1)`` in offline mode;
- torchlens ``trace(model, inputs)`` (forward only, saves every layer, its default);
- torchviz ``make_dot`` of the loss plus the backward (no layout, no Graphviz);
- the floor: a plain step plus one ``torch._foreach_norm`` over the parameter gradients;
- the floor of any recorder that reads each gradient once, as hookviz does (one 2-norm per
  gradient a Node passes on, taken in a do-nothing-else Node post-hook, then one host transfer):
  on a retained graph, as a re-run (``autograd.grad(..., retain_graph=True)``), and fresh (forward,
  walk the graph, hook every Node, backward).

Then peak memory over a plain step's: on CPU each is measured in a fresh process (this script run
with ``--peak``), as its peak resident set during one step above the resident set before it
(``VmHWM`` against ``VmRSS``), with glibc's mmap threshold fixed at 64 KiB
(``MALLOC_MMAP_THRESHOLD_``) so that freed tensors leave the resident set; on CUDA
``torch.cuda.max_memory_allocated``. A peer that is not installed is skipped with a note
(``pip install -e ".[bench]"`` installs them).

    python benchmarks/table.py [--repeats 9] [--device cpu] [--only mlp|gpt]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from timing import timed

import hookviz
from hookviz.examples import sigmoid_mlp


def _peak_bytes(model_name: str, variant: str, device: str) -> int:
    """Peak memory of one step of ``variant`` ("plain" or "hookviz") above what was in use before."""
    if device.startswith("cuda"):
        plain_step, session = _build(model_name, device)
        step = plain_step if variant == "plain" else (lambda: session.run(forward=True))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    found = subprocess.run(
        [sys.executable, __file__, "--peak", model_name, variant],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(found.stdout.split()[-1])


def _peak_here(model_name: str, variant: str) -> int:
    plain_step, session = _build(model_name, "cpu")
    step = plain_step if variant == "plain" else (lambda: session.run(forward=True))
    before = _status("VmRSS")
    step()
    return _status("VmHWM") - before


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _peers(model, args, loss_fn, device):
    """name -> (setup() -> step callable, or None with the reason it is skipped)."""
    rows = {}

    def plain_step():
        model.zero_grad(set_to_none=True)
        loss_fn(model(*args)).backward()

    session = hookviz.Session(model, args, loss_fn=loss_fn)
    rows["hookviz fresh run"] = lambda: session.run(forward=True)
    rows["hookviz backward-only re-run"] = session.run
    # A run makes its records on first read: what reading them (any of run.nodes, calls, ...) adds.
    rows["hookviz fresh run + records read"] = lambda: session.run(forward=True).nodes
    rows["hookviz re-run + records read"] = lambda: session.run().nodes
    # What reading a lazy run's details costs: the run, then every detail (one full re-run).
    rows["hookviz fresh run + every detail read"] = lambda: session.run(forward=True).fill_details()
    eager = hookviz.Session(model, args, loss_fn=loss_fn, details="eager")
    rows["hookviz fresh run, details='eager'"] = lambda: eager.run(forward=True)

    # A watch (hookviz's or wandb's) hooks its model: it watches a twin, so the plain step stays plain.
    twin = copy.deepcopy(model)

    def twin_step():
        twin.zero_grad(set_to_none=True)
        loss_fn(twin(*args)).backward()

    def watched():
        watch = hookviz.watch(twin)
        return twin_step, watch.close

    rows["hookviz.watch per training step"] = watched
    try:
        import wandb
    except ImportError:
        rows["wandb.watch gradients, offline"] = "wandb is not installed"
    else:

        def wandb_watch():
            directory = tempfile.mkdtemp()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                run = wandb.init(mode="offline", dir=directory, project="hookviz-bench")
                run.watch(twin, log="gradients", log_freq=1)

            def step():
                twin_step()
                run.log({})

            def close():
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    run.unwatch(twin)
                    run.finish()

            return step, close

        rows["wandb.watch gradients, offline"] = wandb_watch
    try:
        import torchlens
    except ImportError:
        rows["torchlens trace (forward, saves all)"] = "torchlens is not installed"
    else:
        # unwrap_when_done: torchlens wraps torch's functions, which would slow every later row
        options = torchlens.options.CaptureOptions(unwrap_when_done=True)

        def trace():
            with contextlib.redirect_stdout(io.StringIO()):
                torchlens.trace(model, list(args), capture=options)  # saves every layer by default

        rows["torchlens trace (forward, saves all)"] = trace
    try:
        import torchviz
    except ImportError:
        rows["torchviz make_dot + backward"] = "torchviz is not installed"
    else:
        parameters = dict(model.named_parameters())

        def dot_step():
            model.zero_grad(set_to_none=True)
            loss = loss_fn(model(*args))
            torchviz.make_dot(loss, params=parameters)
            loss.backward()

        rows["torchviz make_dot + backward"] = dot_step

    def floor():
        plain_step()
        torch.stack(torch._foreach_norm([p.grad for p in model.parameters() if p.grad is not None])).tolist()

    rows["floor: plain step + one _foreach_norm"] = floor
    trainable = [p for p in model.parameters() if p.requires_grad]
    retained = loss_fn(model(*args))
    norms = _norm_every_gradient(retained)

    def norms_rerun():
        norms.clear()
        torch.autograd.grad(retained, trainable, retain_graph=True)
        torch.stack(norms).tolist()

    rows["floor: re-run, a norm per gradient"] = norms_rerun

    def norms_fresh():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(*args))
        found = _norm_every_gradient(loss)
        loss.backward()
        torch.stack(found).tolist()

    rows["floor: fresh, a norm per gradient"] = norms_fresh
    return plain_step, session, rows


def _norm_every_gradient(loss: torch.Tensor) -> list[torch.Tensor]:
    """Hang a Node post-hook on every Node of ``loss``'s graph that queues the 2-norm of each
    gradient the Node passes on (no host sync); returns the list they fill."""
    norms: list[torch.Tensor] = []

    def hook(grad_inputs, grad_outputs):
        norms.extend(torch.linalg.vector_norm(g) for g in grad_inputs if g is not None)

    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        node.register_hook(hook)
        stack.extend(child for child, _ in node.next_functions)
    return norms


def _model(model_name: str, device: str):
    """(title, model, args, loss_fn) of one of the two benchmark models, built from seed 0."""
    torch.manual_seed(0)
    if model_name == "mlp":
        mlp = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10).to(device)
        data, labels = torch.randn(64, 64, device=device), torch.randint(0, 10, (64,), device=device)
        return (
            "20-layer sigmoid MLP, width 256, batch 64",
            mlp,
            (data,),
            lambda out: F.cross_entropy(out, labels),
        )
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=384, n_head=6, attn_implementation="eager")).to(device)
    tokens = torch.randint(0, 50257, (4, 128), device=device)

    def next_token(out):
        logits = out.logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

    return "Hugging Face GPT-2 6x384, 4x128 tokens", gpt, (tokens,), next_token


def _build(model_name: str, device: str):
    _, model, args, loss_fn = _model(model_name, device)

    def plain_step():
        model.zero_grad(set_to_none=True)
        loss_fn(model(*args)).backward()

    return plain_step, hookviz.Session(model, args, loss_fn=loss_fn)


def measure(model_name: str, repeats: int, device: str) -> None:
    name, model, args, loss_fn = _model(model_name, device)
    plain_step, session, rows = _peers(model, args, loss_fn, device)
    print(f"\n{name}")
    for label, row in rows.items():
        if isinstance(row, str):
            print(f"  {label:<40} skipped: {row}")
            continue
        step, close = row, None
        if label in ("hookviz.watch per training step", "wandb.watch gradients, offline"):
            step, close = row()
        try:
            for _ in range(2):  # warm-up
                plain_step(), step()
            plain, measured = [], []
            for i in range(repeats):
                pair = (plain_step, step) if i % 2 else (step, plain_step)
                times = [timed(f, device) for f in pair]
                (plain if i % 2 else measured).append(times[0])
                (measured if i % 2 else plain).append(times[1])
        finally:
            if close is not None:
                close()
        # Each pair ran back to back: the median of their ratios follows load that drifts during
        # the table (on a shared 2-core host a plain step here took 4.9 to 8.9 ms in one run).
        ratio = statistics.median(m / p for m, p in zip(measured, plain))
        print(
            f"  {label:<40} {ratio:6.2f}x   ({statistics.median(measured) * 1e3:9.1f} ms vs plain step "
            f"{statistics.median(plain) * 1e3:8.1f} ms)"
        )
    plain_peak = statistics.median(_peak_bytes(model_name, "plain", device) for _ in range(3))
    recorded_peak = statistics.median(_peak_bytes(model_name, "hookviz", device) for _ in range(3))
    print(
        f"  {'peak memory, hookviz fresh run':<40} {recorded_peak / plain_peak:6.2f}x   "
        f"({recorded_peak / 2**20:9.1f} MiB vs plain step {plain_peak / 2**20:8.1f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", choices=["mlp", "gpt"])
    parser.add_argument("--peak", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.peak:  # the child process of _peak_bytes
        print(_peak_here(*options.peak))
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    print(
        f"torch {torch.__version__}, device {options.device}, threads {torch.get_num_threads()}, "
        f"medians of {options.repeats} (GPT: of {max(3, options.repeats // 2)}); "
        "ratio = median over back-to-back pairs of a row's time over a plain step's"
    )
    for model_name in ("mlp", "gpt"):
        if options.only in (None, model_name):
            measure(
                model_name,
                options.repeats if model_name == "mlp" else max(3, options.repeats // 2),
                options.device,
            )


if __name__ == "__main__":
    main()
