"""DDP and FSDP2 on two real processes over gloo: every number checked against plain PyTorch.

Each test starts 2 CPU processes (``spawn``: forked from a fork server) that join a process group on a
free local port; the checks run inside the workers (a failing assert fails the test with the
worker's traceback). Each rank trains on its own batch, so local and reduced gradients differ.
CUDA/NCCL variants run the same workers on 2 GPUs and are skipped without them.
"""

from __future__ import annotations

import copy
import gc
import math
import os
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from conftest import assert_same_state, model_state
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hookviz
from hookviz import text
from hookviz.record import torch_compat
from hookviz.widget.payload import json_float

pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
    pytest.mark.e2e,
    pytest.mark.distributed,
]
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker, *args, backend: str = "gloo") -> None:
    """Run ``worker(rank, backend, port, *args)`` on WORLD processes; raises if any worker raised.

    The processes are forked from a fork server that imported this module (and so torch and
    hookviz) once for the session, not started and made to import them anew for every test; the
    server itself never ran torch, so a fork of it starts clean (no threads, no CUDA)."""
    mp.set_forkserver_preload([__name__])
    mp.start_processes(
        _run, args=(worker, backend, free_port(), args), nprocs=WORLD, join=True, start_method="forkserver"
    )


def _run(rank: int, worker, backend: str, port: int, args: tuple) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        worker(rank, device, *args)
        gc.collect()
        dist.barrier()
    except BaseException as error:
        # A failing worker's frames hold its DDP / FSDP2 model (and its watches): drop their locals
        # (the traceback's text stays) so that they are freed below, before the process group.
        traceback.clear_frames(error.__traceback__)
        raise
    finally:
        # Every DDP / FSDP2 model goes before the process group: a DDP Reducer freed after
        # destroy_process_group() can hang for good in ProcessGroupGloo's destructor.
        gc.collect()
        dist.destroy_process_group()


def mlp() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(rank: int, step: int = 0, device="cpu", scale: float = 1.0):
    generator = torch.Generator().manual_seed(100 * step + rank)  # each rank its own batch
    x = torch.randn(8, 6, generator=generator) * scale
    y = torch.randint(0, 3, (8,), generator=generator)
    return x.to(device), y.to(device)


def local_grads(model: nn.Module, x, y) -> dict[str, torch.Tensor]:
    """This rank's own gradients: a plain backward through an undistributed copy of ``model``."""
    model = copy.deepcopy(model)
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------- DDP


def _ddp_exact(rank, device):
    model = mlp().to(device)
    ddp = DDP(model)
    x, y = batch(rank, device=device)
    mine = local_grads(model, x, y)
    before = model_state(ddp)
    run = hookviz.Session(ddp, (x,), loss_fn=lambda out: F.cross_entropy(out, y), input_grads=True).run()
    assert_same_state(before, model_state(ddp))  # hooks, .grad (None), flags, mode as they were
    assert ddp.require_backward_grad_sync and ddp.require_forward_param_sync
    F.cross_entropy(ddp(x), y).backward()  # plain DDP: .grad is the mean over ranks
    names = [n for n, _ in ddp.named_parameters()]
    assert set(run.leaf_names) == {"input", *names}  # the user's names: module.0.weight
    for name, parameter in ddp.named_parameters():
        inner = name.removeprefix("module.")
        assert name.startswith("module.")
        # 2 ranks: multiplying by 1/2 and summing two numbers is exact, so bit for bit
        assert torch.equal(run.leaf_grad(name), parameter.grad), name
        assert torch.equal(run.leaf_grad(inner), parameter.grad), inner
        torch.testing.assert_close(run.leaf_grad(name, local=True), mine[inner], rtol=1e-6, atol=1e-7)
        assert not torch.allclose(run.leaf_grad(name, local=True), parameter.grad), "batches differ per rank"
    # the graph's leaf nodes record what hooks see there: the local gradient
    record = run.node("module.4.bias").grad_outputs[0]
    assert torch.equal(record.value, run.leaf_grad("module.4.bias", local=True))
    with pytest.raises(hookviz.TargetError, match="unknown leaf"):
        run.leaf_grad("5.weight")
    assert run.notes == []
    # a communication hook (fp16 compression) is not replayed: the run says so, and stays close
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    compressed = DDP(copy.deepcopy(model))
    compressed.register_comm_hook(None, fp16_compress_hook)
    noted = hookviz.Session(compressed, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    assert any("fp16_compress_hook" in note for note in noted.notes), noted.notes
    F.cross_entropy(compressed(x), y).backward()
    for name, parameter in compressed.named_parameters():
        torch.testing.assert_close(noted.leaf_grad(name), parameter.grad, rtol=2e-3, atol=1e-4)
    # inside no_sync() a plain backward keeps the local gradient; so does the run
    with ddp.no_sync():
        quiet = hookviz.Session(ddp, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    assert torch.equal(quiet.leaf_grad("0.weight"), quiet.leaf_grad("0.weight", local=True))


def test_ddp_run_equals_plain_backward_and_keeps_local_gradients():
    spawn(_ddp_exact)


def _ddp_reducer_ready(rank, device, options):
    def make():  # with find_unused_parameters, rank 1 leaves a layer unused (see Branchy)
        return Branchy(rank) if options.get("find_unused_parameters") else mlp()

    reference = DDP(make().to(device), **options)
    recorded = DDP(make().to(device), **options)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (reference, recorded)]
    for step in range(3):
        x, y = batch(rank, step, device)
        if step == 1:  # a recorded run (and an edited re-run) between two training steps
            session = hookviz.Session(recorded, (x,), loss_fn=lambda out, y=y: F.cross_entropy(out, y))
            session.run()
            bias = "module.body.4.bias" if options.get("find_unused_parameters") else "module.4.bias"
            session.edit(bias, "grad", "grad * 0")
            edited = session.run()
            assert torch.equal(edited.leaf_grad(bias.removeprefix("module.")), torch.zeros(3, device=device))
            nodes = {data["op"] for _, data in edited.graph.nodes(data=True)}
            assert "_DDPSinkBackward" not in nodes  # DDP's own pass-through node is looked through
        for model, optimizer in zip((reference, recorded), optimizers):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()  # raises if the reducer still waits
            optimizer.step()
    for (name, a), b in zip(reference.named_parameters(), recorded.parameters()):
        assert torch.equal(a, b), name  # the same training, bit for bit


@pytest.mark.parametrize(
    "options",
    [{}, {"find_unused_parameters": True, "bucket_cap_mb": 1e-4}, {"static_graph": True}],
    ids=["default", "find_unused_parameters_small_buckets", "static_graph"],
)
def test_ddp_reducer_is_ready_for_training_after_a_run(options):
    spawn(_ddp_reducer_ready, options)


# ---------------------------------------------------------------------------- FSDP2


def _fsdp(rank, device):
    fully_shard = torch_compat.fsdp2().fully_shard

    plain = mlp().to(device)
    model = copy.deepcopy(plain)
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    x, y = batch(rank, device=device)
    mine = local_grads(plain, x, y)
    names = [n for n, _ in model.named_parameters()]
    assert names == [n for n, _ in plain.named_parameters()]
    before = model_state(model)
    session = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y), input_grads=True)
    run = session.run()
    assert_same_state(before, model_state(model))
    assert set(run.leaf_names) == {"input", *names}  # not leaf_0 ...
    again = session.run()  # backward only, on the retained graph: FSDP2 all-gathers again
    assert again.forward_reused and all(torch.equal(run.leaf_grad(n), again.leaf_grad(n)) for n in names)
    session.edit("4.bias", "grad", "grad * 0")
    edited = session.run()
    assert torch.equal(edited.leaf_grad("4.bias"), torch.zeros(3, device=device))
    assert torch.equal(edited.leaf_grad("0.weight"), run.leaf_grad("0.weight"))
    ops = {data["op"] for _, data in run.graph.nodes(data=True)}
    assert "RegisterPostBackwardFunctionBackward" not in ops
    assert not any("FSDP" in call.name for call in run.hook_calls), run.hook_calls
    assert all(not call.user_hooks for call in run.calls)
    F.cross_entropy(model(x), y).backward()
    for name, parameter in model.named_parameters():
        full = parameter.grad.full_tensor()
        assert run.leaf_grad(name).shape == full.shape == mine[name].shape
        assert torch.equal(run.leaf_grad(name), full), name
        torch.testing.assert_close(run.leaf_grad(name, local=True), mine[name], rtol=1e-6, atol=1e-7)

    # a mixed-precision policy: FSDP2 computes in bfloat16, reduces in float32 into float32 .grad
    policy = torch_compat.fsdp2().MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mixed = copy.deepcopy(plain)
    fully_shard(mixed[0], mp_policy=policy)
    fully_shard(mixed, mp_policy=policy)
    mixed_run = hookviz.Session(mixed, (x,), loss_fn=lambda out: F.cross_entropy(out.float(), y)).run()
    F.cross_entropy(mixed(x).float(), y).backward()
    for name, parameter in mixed.named_parameters():
        assert mixed_run.leaf_grad(name, local=True).dtype == torch.bfloat16
        assert torch.equal(mixed_run.leaf_grad(name), parameter.grad.full_tensor()), name


# torch 2.4 and 2.5 keep FSDP2 in torch.distributed._composable.fsdp, where it makes CUDA streams at its
# first forward (FSDPCommContext.lazy_init: "FSDP requires CUDA for streams"); these tests shard on CPU.
cpu_fsdp2 = pytest.mark.skipif(
    torch.__version__ < (2, 6), reason=f"FSDP2 runs on CPU from torch 2.6 (this is {torch.__version__})"
)


@cpu_fsdp2
def test_fsdp2_run_names_leaves_and_gives_full_reduced_gradients():
    spawn(_fsdp)


# ---------------------------------------------------------------------------- watch across ranks


def _distributed_copy(plain: nn.Module, use_fsdp: bool) -> nn.Module:
    """A copy of ``plain`` sharded by FSDP2 (its first layer and the whole) or wrapped in DDP."""
    model = copy.deepcopy(plain)
    if not use_fsdp:
        return DDP(model)
    fully_shard = torch_compat.fsdp2().fully_shard
    fully_shard(model[0])
    fully_shard(model)
    return model


def _watch_gather(rank, device, directory, use_fsdp, by_optimizer=False):
    plain = mlp().to(device)
    wrapped = _distributed_copy(plain, use_fsdp)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.2)
    expected_local, expected_reduced = [], []
    # by_optimizer: a step is opt.step(), whose pre-hook reads the sharded (DTensor) .grad on FSDP2
    options = {"optimizer": optimizer, "stats_every": 1} if by_optimizer else {}
    with hookviz.watch(wrapped, outputs=True, **options) as w:
        for step in range(3):
            x, y = batch(rank, step, device)
            mine = local_grads(plain, x, y)
            expected_local.append({n: torch.linalg.vector_norm(g).item() for n, g in mine.items()})
            optimizer.zero_grad()
            F.cross_entropy(wrapped(x), y).backward()
            grads = {
                n.removeprefix("module."): p.grad.full_tensor() if use_fsdp else p.grad
                for n, p in wrapped.named_parameters()
            }
            expected_reduced.append({n: torch.linalg.vector_norm(g).item() for n, g in grads.items()})
            optimizer.step()
            with torch.no_grad():  # keep the plain copy in step with the trained one
                for p, q in zip(plain.parameters(), wrapped.parameters()):
                    p.copy_(q.full_tensor() if use_fsdp else q)
    if use_fsdp:  # closing the watch removed the hooks it put on FSDP2's unsharded parameters too
        from hookviz.record.distributed import fsdp_parameters

        assert all(not p._unsharded_param._post_accumulate_grad_hooks for _, p in fsdp_parameters(wrapped))
    assert not any(m._forward_hooks for m in wrapped.modules() if not use_fsdp)
    assert not by_optimizer or all(w.update_ratios(s) for s in w.steps)
    # every rank's expected local norms, to check rank 0's gathered view of the others
    names = list(expected_local[0])
    table = torch.tensor([[e[n] for n in names] for e in expected_local], dtype=torch.float64)
    tables = [torch.empty_like(table) for _ in range(WORLD)]
    dist.all_gather(tables, table)
    gathered = w.gather(dst=0)
    if rank != 0:
        assert gathered is None
        return
    prefix = "" if use_fsdp else "module."
    assert gathered.ranks == [0, 1] and gathered.steps == [0, 1, 2], (gathered.steps, w.step)
    assert gathered.strategy == ("fsdp" if use_fsdp else "ddp")
    for step in range(3):
        for r in range(WORLD):
            local = gathered.norms(step, rank=r, kind="parameter")
            for j, n in enumerate(names):
                assert local[prefix + n] == pytest.approx(tables[r][step, j].item(), rel=1e-5), (step, r, n)
        reduced = gathered.norms(step)
        assert set(reduced) == {prefix + n for n in names}
        for n in names:
            assert reduced[prefix + n] == pytest.approx(expected_reduced[step][n], rel=1e-5), (step, n)
        assert set(gathered.norms(step, rank=1, kind="output")) == {n for n, _ in wrapped.named_modules()}
    assert gathered.diagnose() == []
    loaded = hookviz.load(hookviz.save(w, os.path.join(directory, "gathered")))
    for field in ("local", "reduced", "order"):
        a, b = getattr(loaded, field), getattr(gathered, field)
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()), field
    assert loaded.ranks == gathered.ranks and loaded.norms(1, rank=1) == gathered.norms(1, rank=1)


@pytest.mark.parametrize(
    ("use_fsdp", "by_optimizer"),
    [(False, False), pytest.param(True, False, marks=cpu_fsdp2), pytest.param(True, True, marks=cpu_fsdp2)],
    ids=["ddp", "fsdp2", "fsdp2-optimizer"],
)
def test_watch_gathers_local_and_reduced_norms_of_every_rank(tmp_path, use_fsdp, by_optimizer):
    spawn(_watch_gather, str(tmp_path), use_fsdp, by_optimizer)


def _watch_thinned(rank, device):
    model = DDP(mlp().to(device))
    with hookviz.watch(model, every=2, capacity=3) as w:
        for step in range(13):
            x, y = batch(rank, step, device)
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
    gathered = w.gather(dst=0)
    if rank == 0:
        # what gather moves is bounded by every and capacity: only the kept steps, on every rank
        assert gathered.steps == w.steps and len(w.steps) <= 3 and all(s % 2 == 0 for s in w.steps)
        assert w.steps == [0, 8]  # 0, 2, 4 fill 3 rows; thinned to 0, 4; 8 fills; thinned to 0, 8
        assert gathered.local.shape == (2, 2, len(w.names), 4)
        assert not gathered.reduced[:, :, 0].isnan().all(-1).any()  # each kept step has its reduced row


def test_watch_gather_keeps_only_the_steps_every_and_capacity_keep():
    spawn(_watch_thinned)


def _pre_clip(rank, device, use_fsdp):
    plain = mlp().to(device)
    model = _distributed_copy(plain, use_fsdp)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    expected_local, totals = [], []
    with hookviz.watch(model, optimizer=optimizer) as w:
        for step in range(3):
            x, y = batch(rank, step, device, scale=4.0)
            mine = local_grads(plain, x, y)  # this rank's gradients, before the all-reduce
            expected_local.append({n: torch.linalg.vector_norm(g).item() for n, g in mine.items()})
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)
            totals.append((total.full_tensor() if use_fsdp else total).item())
            optimizer.step()
            with torch.no_grad():
                for p, q in zip(plain.parameters(), model.parameters()):
                    p.copy_(q.full_tensor() if use_fsdp else q)
    history = w.history
    assert history.steps == [0, 1, 2] and history.pre_clip_norm is not None
    compared = 0
    for step in range(3):
        for column, name in enumerate(w.parameter_names):
            expected = expected_local[step][name.removeprefix("module.")]
            assert history.pre_clip_norm[step, column].item() == pytest.approx(expected, rel=1e-5)
            compared += 1
    assert compared == 3 * len(w.parameter_names)
    gathered = w.gather(dst=0)
    # the loop clipped: what the steps read is below the norms before clipping, whose total is the
    # all-reduced gradients' (DDP: on each rank; FSDP2: the shards' combined by gather)
    assert all(t > 0.01 for t in totals)
    if use_fsdp:  # a rank holds shards of the reduced gradients: only gather knows their total
        assert all(math.isnan(t) for t in history.pre_clip_total)
    else:
        assert history.pre_clip_total == pytest.approx(totals, rel=1e-5)
    if rank == 0:
        assert gathered.pre_clip_total == pytest.approx(totals, rel=1e-5)


@pytest.mark.parametrize("use_fsdp", [False, pytest.param(True, marks=cpu_fsdp2)], ids=["ddp", "fsdp2"])
def test_pre_clip_norms_are_each_ranks_and_their_total_is_what_clip_grad_norm_returns(use_fsdp):
    spawn(_pre_clip, use_fsdp)


class Branchy(nn.Module):
    """An MLP whose ``extra`` layer only rank 0 uses (the find_unused_parameters trap)."""

    def __init__(self, rank: int):
        super().__init__()
        self.body = mlp()
        self.extra = nn.Linear(3, 3)
        self.rank = rank

    def forward(self, x):
        out = self.body(x)
        return self.extra(out) if self.rank == 0 else out


def _findings(rank, device, directory):
    model = DDP(Branchy(rank).to(device), find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with hookviz.watch(model) as w:
        for step in range(5):
            # step 2: rank 1's batch weighs 1e4 times more (its gradient explodes); step 3: it holds NaN
            weight = 1e4 if (rank, step) == (1, 2) else 1.0
            x, y = batch(rank, step, device, math.nan if (rank, step) == (1, 3) else 1.0)
            optimizer.zero_grad()
            (weight * F.cross_entropy(model(x), y)).backward()
            optimizer.step()
    gathered = w.gather(dst=0)
    if rank != 0:
        return
    findings = gathered.diagnose()
    kinds = [f.kind for f in findings]
    nan = findings[kinds.index("nan")]
    assert (nan.rank, nan.step) == (1, 3), nan
    assert "rank 1 is the first to produce NaN/Inf: at step 3" in nan.message and "ranks [0]" in nan.message
    # rank 0's local gradient at step 3 was finite; the all-reduce made .grad NaN on both
    assert gathered.local[0, 3, :, 2].nansum() == 0 and gathered.reduced[3, :, 2].nansum() > 0
    diverging = [f for f in findings if f.kind == "diverging"]
    assert [(f.rank, f.step) for f in diverging] == [(1, 2)], findings
    unused = [f for f in findings if f.kind == "unused"]
    assert {f.node for f in unused} == {"module.extra.weight", "module.extra.bias"}
    assert all(f.rank == 1 and f.step == 0 and "find_unused_parameters=True" in f.message for f in unused)
    assert gathered.diagnose(diverge=1e9) == [f for f in findings if f.kind != "diverging"]
    with pytest.raises(hookviz.WatchError, match="diverge=0.5"):
        gathered.diagnose(diverge=0.5)
    hookviz.save(w, os.path.join(directory, "findings"))


def _run_of_last_batch(rank, device, directory):
    """Every rank records a run (a collective); rank 0 saves its own for the widget test."""
    model = DDP(Branchy(rank).to(device), find_unused_parameters=True)
    x, y = batch(rank, 0, device)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    if rank == 0:
        hookviz.save(run, os.path.join(directory, "run"))


def findings_and_run(rank, device, directory):
    """``_findings`` then ``_run_of_last_batch`` in one process group (one spawn of the ranks for
    both files: the session's ``gathered_files``, tests/conftest.py)."""
    _findings(rank, device, directory)
    _run_of_last_batch(rank, device, directory)


@pytest.fixture(scope="module")
def gathered(gathered_files):
    """A gathered history of 2 gloo ranks and rank 0's run, saved by the ranks and opened here (one
    process, no process group): ``(history, run, directory)``."""
    directory = gathered_files
    return hookviz.load(directory / "findings.hookviz"), hookviz.load(directory / "run.hookviz"), directory


def test_cross_rank_diagnosis_names_the_rank_and_step(gathered):
    # the saved history, opened here (one process, no process group), over the saved run's graph
    history, run, tmp_path = gathered
    assert [f.kind for f in history.diagnose()][:2] == ["nan", "diverging"]
    widget = hookviz.show(history, on=run)
    assert widget.read_only.startswith("read-only") and widget.watch_ranks == [0, 1]
    last = history.steps[-1]
    assert widget.watch_view["step"] == last and widget.watch_view["model"] == "reduced"
    assert widget.watch_view["norms"] == {n: json_float(v) for n, v in history.norms(last).items()}
    assert widget.watch_view["rank"] is None
    # the page's rank selector sends this message
    assert widget.handle_message({"type": "watch_rank", "rank": 1})["ok"]
    assert widget.watch_view["model"] == "rank 1" and widget.watch_view["rank"] == 1
    assert widget.watch_view["norms"] == {n: json_float(v) for n, v in history.norms(last, rank=1).items()}
    assert widget.watch_step(2) and [f["kind"] for f in widget.diagnosis["findings"]] == [
        "exploding",
        "diverging",
    ]
    # every part says what it shows, and the chart follows the picker: rank 1's local norms at step 2
    assert "rank 1's local gradient norms" in widget.watch_view["parts"][0]
    assert "step 2" in widget.watch_view["parts"][0]
    assert "Leaf table: rank 1's local gradient norms" in widget.watch_view["parts"][2]
    # the leaf table follows the picker too: rank 1's local statistics at step 2, every parameter
    table = widget.watch_view["leaves"]
    assert "rank 1's local" in table["title"] and table["title"].endswith("step 2")
    rows = {row["name"]: row["values"] for row in table["rows"]}
    parameters = [n for n, k in zip(history.names, history.kinds) if k == "parameter"]
    assert list(rows) == parameters
    got = history.norms(2, rank=1, kind="parameter")
    assert {n for n, v in rows.items() if v["norm"] is not None} == set(got)
    assert all(rows[n]["norm"] == pytest.approx(v) for n, v in got.items())
    assert "rank 1" in widget.chart["figure"]["layout"]["title"]["text"]
    local = history.norms(2, rank=1, kind="parameter")
    shown = dict(zip(widget.chart["modules"], widget.chart["current"]))
    layer = [n for n in local if n.startswith("module.body.4.") or n.startswith("body.4.")]
    assert layer and abs(
        shown[layer[0].rsplit(".", 1)[0]] - sum(local[n] ** 2 for n in layer) ** 0.5
    ) < 1e-6 * (1 + shown[layer[0].rsplit(".", 1)[0]])
    assert not widget.watch_rank(5) and "rank 5 is not in this history" in widget.errors["watch"]
    assert not widget.rerun() and "read-only" in widget.errors["rerun"]
    assert widget.apply_edit("module.body.4.bias", "grad", "grad * 0") is None
    assert "opened from a file" in widget.errors["edit"]
    with pytest.raises(hookviz.WatchError, match="not a graph.*hookviz.show\\(history"):
        hookviz.show(history)
    # saved together (hookviz.save(watch, path, run=run)), one file opens in the watch view
    together = hookviz.load(hookviz.save(history, tmp_path / "together", run=run))
    assert all(torch.equal(together.run.leaf_grad(n), run.leaf_grad(n)) for n in run.leaf_names)
    assert hookviz.show(together).watch_ranks == [0, 1]


def test_gather_without_a_process_group_is_a_clear_error():
    model = mlp()
    with hookviz.watch(model) as w:
        F.cross_entropy(model(torch.randn(2, 6)), torch.zeros(2, dtype=torch.long)).backward()
    with pytest.raises(hookviz.WatchError, match="init_process_group"):
        w.gather()


# ---------------------------------------------------------------------------- CUDA / NCCL


two_gpus = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.device_count() >= WORLD and dist.is_nccl_available()),
    reason="needs 2 CUDA devices and NCCL",
)


@pytest.mark.cuda
@two_gpus
def test_ddp_on_nccl():
    spawn(_ddp_exact, backend="nccl")


@pytest.mark.cuda
@two_gpus
def test_fsdp2_on_nccl():
    spawn(_fsdp, backend="nccl")


@pytest.mark.cuda
@two_gpus
def test_watch_gather_on_nccl(tmp_path):
    spawn(_watch_gather, str(tmp_path), False, backend="nccl")


def test_the_inspector_says_whose_values_it_shows_and_follows_the_rank_picker(gathered):
    history, run, _ = gathered
    widget = hookviz.show(history, on=run)
    weight = next(n for n in run.leaf_names if n.endswith("body.4.weight"))
    assert widget.select(weight)
    assert widget.watch_rank(1) and widget.watch_step(2)
    note = widget.inspector["watch"]
    # the watch's own number for the picked rank and step, as plain torch gathered it
    local = history.norms(2, rank=1, kind="parameter")[weight]
    assert note["state"] == "norm" and note["text"].startswith("Watch step 2, rank 1 (local): ‖grad‖ ")
    assert note["text"].split("‖grad‖ ")[1].split(" ")[0] == text.norm(local)
    # the tensors below it are the recorded run's: the inspector says so, and labels the run's norms
    assert "The values below are the recorded run's, not the watch's norms of rank 1 (local)." in note["text"]
    assert note["run_label"] == "run"
    assert widget.watch_rank(0)
    other = widget.inspector["watch"]["text"]
    assert other.startswith("Watch step 2, rank 0 (local): ") and "norms of rank 0 (local)" in other
    assert history.norms(2, rank=0, kind="parameter")[weight] != local
    assert text.norm(history.norms(2, rank=0, kind="parameter")[weight]) in other
    assert widget.watch_rank(None)
    assert widget.inspector["watch"]["text"].startswith("Watch step 2, all ranks (reduced): ")
