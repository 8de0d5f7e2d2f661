"""The Lightning and Hugging Face Trainer callbacks on real, tiny training runs (CPU, a few steps).

The reference is what each optimizer step used, read back from the update it made: the model is
trained with plain SGD (no momentum, no weight decay), so ``w_after = w_before - lr * grad`` and
``grad = (w_before - w_after) / lr``, in float64. A step pre-hook reading ``.grad`` would not do:
Lightning runs the forward, backward and clipping in a closure that the optimizer calls inside
``step()``, after its pre-hooks.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path

import lightning
import pytest
import torch
import torch.nn.functional as F
import transformers
from lightning.pytorch.utilities import grad_norm
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hookviz
from hookviz.integrations import lightning as hookviz_lightning
from hookviz.integrations import transformers as hookviz_transformers
from hookviz.integrations.trainer_watch import finding_text, in_notebook

LEARNING_RATE = 0.1
CLIP = 0.05  # well below the gradients' norm (about 0.5), so every step is clipped
STEPS, ACCUMULATE, BATCH = 4, 2, 8


def digits_like() -> tuple[torch.Tensor, torch.Tensor]:
    """Eight-feature inputs and three classes, float64, made from a fixed seed."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * ACCUMULATE * BATCH, 8, generator=generator, dtype=torch.float64)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def network() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).double()


def record_used_gradients(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[dict[str, float]]:
    """The reference: ``{name: norm of the gradient}`` each SGD step used, from the update it made."""
    names = {id(p): n for n, p in model.named_parameters()}
    used: list[dict[str, float]] = []
    before: dict[int, tuple[torch.Tensor, float]] = {}

    def pre(opt, args, kwargs):
        before.clear()
        before.update({id(p): (p.detach().clone(), g["lr"]) for g in opt.param_groups for p in g["params"]})

    def post(opt, args, kwargs):
        used.append(
            {
                names[id(p)]: torch.linalg.vector_norm(
                    (before[id(p)][0] - p.detach()) / before[id(p)][1]
                ).item()
                for g in opt.param_groups
                for p in g["params"]
            }
        )

    optimizer.register_step_pre_hook(pre)
    optimizer.register_step_post_hook(post)
    return used


def assert_steps_are_what_the_optimizer_used(watch, used: list[dict[str, float]]) -> int:
    """Each kept step's norms equal the reference's, name for name, and each step was clipped;
    returns how many norms were compared."""
    assert watch.steps == list(range(STEPS)) and len(used) == STEPS
    compared = 0
    for step, reference in enumerate(used):
        got = watch.norms(step, kind="parameter")
        assert set(got) == set(reference) and len(got) == 4
        for name, norm in reference.items():
            assert got[name] == pytest.approx(norm, rel=1e-9), (step, name)
            compared += 1
        # clip_grad_norm_ scales by CLIP / (norm + 1e-6): the clipped norm is a hair below CLIP
        assert math.sqrt(sum(n * n for n in got.values())) == pytest.approx(CLIP, rel=1e-4)
    return compared


# ---------------------------------------------------------------------------------------- Lightning


class Classifier(lightning.LightningModule):
    def __init__(self, poison_batch: int | None = None):
        super().__init__()
        self.net = network()
        self.poison_batch = poison_batch  # this micro-batch's loss is NaN
        self.batches = 0
        self.used: list[dict[str, float]] = []

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if batch_index == self.poison_batch:
            loss = loss * math.nan
        self.batches += 1
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)
        self.used = record_used_gradients(optimizer, self)
        return optimizer


def fit(module: Classifier, callback, tmp_path, **trainer_options) -> lightning.Trainer:
    options = dict(
        max_steps=STEPS,
        accumulate_grad_batches=ACCUMULATE,
        gradient_clip_val=CLIP,
        precision="64-true",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=tmp_path,
    )
    trainer = lightning.Trainer(callbacks=[callback], **{**options, **trainer_options})
    trainer.fit(module, DataLoader(TensorDataset(*digits_like()), batch_size=BATCH))
    return trainer


def test_lightning_keeps_one_step_per_optimizer_step_with_the_accumulated_clipped_gradients(tmp_path):
    module = Classifier()
    callback = hookviz_lightning.HookvizCallback(tmp_path / "fit.hookviz")
    trainer = fit(module, callback, tmp_path)
    assert trainer.global_step == STEPS and module.batches == STEPS * ACCUMULATE
    assert assert_steps_are_what_the_optimizer_used(callback.watch, module.used) == STEPS * 4
    assert callback.watch.closed and callback.watch.step_optimizer(0) == "SGD"
    assert callback.widget is None and not in_notebook()  # no Jupyter kernel here: nothing displayed
    assert callback.saved == tmp_path / "fit.hookviz"
    assert hookviz.load(callback.saved).steps == callback.watch.steps


def test_lightning_mixed_precision_steps_hold_the_unscaled_gradients(tmp_path):
    # Lightning refuses precision="16-mixed" on CPU by name; its plugin, given directly, scales the
    # loss by the GradScaler's 2**16 and unscales before clipping as on a GPU (autocast leaves this
    # float64 model's ops as they are, so the reference stays exact).
    from lightning.pytorch.plugins.precision import MixedPrecision

    module = Classifier()
    callback = hookviz_lightning.HookvizCallback()
    trainer = fit(module, callback, tmp_path, precision=None, plugins=[MixedPrecision("16-mixed", "cpu")])
    assert callback.watch.scaler is trainer.precision_plugin.scaler
    assert callback.watch.loss_scale(0) == trainer.precision_plugin.scaler.get_scale() > 1
    assert assert_steps_are_what_the_optimizer_used(callback.watch, module.used) == STEPS * 4


def test_lightning_reports_the_first_nan_step_to_the_logger_at_once(tmp_path):
    module = Classifier(poison_batch=2)  # the first micro-batch of optimizer step 1
    callback = hookviz_lightning.HookvizCallback()
    logged = []  # (level, message, the trainer's optimizer steps done when it was logged)

    class Note(logging.Handler):
        def emit(self, record):
            logged.append((record.levelno, record.getMessage(), module.trainer.global_step))

    handler = Note()
    hookviz_lightning.logger.addHandler(handler)
    try:
        fit(module, callback, tmp_path)
    finally:
        hookviz_lightning.logger.removeHandler(handler)
    warnings = [(message, step) for level, message, step in logged if level == logging.WARNING]
    assert [(f.kind, f.step) for f in callback.findings][0] == ("nan", 1)
    assert [message for message, _ in warnings] == [finding_text(f, 0) for f in callback.findings]
    assert warnings[0][0].startswith("hookviz: epoch 0, step 1: ") and "NaN" in warnings[0][0]
    assert warnings[0][1] == 2  # logged right after optimizer step 1, not at the end of the fit


def test_lightning_refuses_a_save_path_before_training(tmp_path):
    module = Classifier()
    callback = hookviz_lightning.HookvizCallback(tmp_path / "missing" / "fit.hookviz")
    with pytest.raises(hookviz.PathError, match="does not exist"):
        fit(module, callback, tmp_path)
    assert module.batches == 0


# ---------------------------------------------------------------------------------------- Trainer


class TrainerClassifier(nn.Module):
    def __init__(self, poison_step: int | None = None):
        super().__init__()
        self.net = network()
        self.poison_step = poison_step
        self.batches = 0

    def forward(self, x, labels):
        logits = self.net(x)
        loss = F.cross_entropy(logits, labels)
        if self.batches == self.poison_step:
            loss = loss * math.nan
        self.batches += 1
        return {"loss": loss, "logits": logits}


def train(model: TrainerClassifier, callback, tmp_path, **overrides) -> tuple[transformers.Trainer, list]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    used = record_used_gradients(optimizer, model)
    x, y = digits_like()
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        max_steps=STEPS,
        max_grad_norm=CLIP,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        **{
            "logging_steps": 2,
            "report_to": [],
            "save_strategy": "no",
            "use_cpu": True,
            "disable_tqdm": True,
            "remove_unused_columns": False,
            "dataloader_num_workers": 0,
            **overrides,
        },
    )
    trainer = transformers.Trainer(
        model=model,
        args=arguments,
        train_dataset=[{"x": x[i], "labels": y[i]} for i in range(len(x))],
        optimizers=(optimizer, None),
    )
    hookviz_transformers.attach(trainer, callback)
    trainer.train()
    return trainer, used


def test_transformers_keeps_one_step_per_optimizer_step_with_the_accumulated_clipped_gradients(tmp_path):
    model = TrainerClassifier()
    callback = hookviz_transformers.HookvizCallback(tmp_path / "train")
    trainer, used = train(model, callback, tmp_path)
    assert trainer.state.global_step == STEPS and model.batches == STEPS * ACCUMULATE
    assert assert_steps_are_what_the_optimizer_used(callback.watch, used) == STEPS * 4
    # The Trainer logs the norm before clipping; the watch shows what the optimizer stepped on.
    logged = [entry["grad_norm"] for entry in trainer.state.log_history if "grad_norm" in entry]
    assert len(logged) == 2 and min(logged) > 5 * CLIP
    assert callback.watch.closed and callback.saved == tmp_path / "train.hookviz"
    assert hookviz.load(callback.saved).steps == callback.watch.steps


def test_transformers_reports_findings_to_the_logger(tmp_path, caplog):
    model = TrainerClassifier(poison_step=2)
    callback = hookviz_transformers.HookvizCallback()
    with caplog.at_level(logging.INFO, logger=hookviz_transformers.logger.name):
        train(model, callback, tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [(f.kind, f.step) for f in callback.findings][0] == ("nan", 1)
    assert len(warnings) == len(callback.findings) > 0
    for warning, finding in zip(warnings, callback.findings):  # each with its step and the epoch
        assert warning.startswith("hookviz: epoch ") and f", step {finding.step}: " in warning
        assert warning.endswith(finding.message.split(": ", 1)[1])
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos[-1].startswith(f"hookviz: watched {STEPS} steps, kept {STEPS}")


def test_hookviz_and_its_integrations_package_import_no_framework():
    code = (
        "import sys, hookviz, hookviz.integrations, hookviz.integrations.trainer_watch\n"
        "print(sorted(m for m in ('lightning', 'transformers', 'accelerate') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[1]  # this checkout's hookviz, first on sys.path
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert found.stdout.strip() == "[]"


# ------------------------------------------------------------------- the callbacks never stop training


def has_no_hooks(model: nn.Module) -> bool:
    """No tensor hook on any parameter and no forward hook on any module (what a watch adds)."""
    return all(not p._backward_hooks for p in model.parameters()) and all(
        not m._forward_hooks for m in model.modules()
    )


def test_lightning_trains_unwatched_with_a_warning_when_the_model_is_already_watched(tmp_path):
    module = Classifier()
    other = hookviz.watch(module)  # the user's own watch on the same model: one watch per model
    callback = hookviz_lightning.HookvizCallback()
    try:
        with pytest.warns(RuntimeWarning, match="not watching Classifier in this run: .*already watched"):
            trainer = fit(module, callback, tmp_path)
    finally:
        other.close()
    assert trainer.global_step == STEPS and module.batches == STEPS * ACCUMULATE
    assert callback.watch is None and callback.findings == [] and other.step == STEPS * ACCUMULATE


def test_transformers_trains_unwatched_with_a_warning_when_the_optimizer_is_not_a_torch_optimizer(tmp_path):
    # What DeepSpeed hands the Trainer: an optimizer wrapper that is no torch.optim.Optimizer.
    class Foreign:
        def __init__(self, inner):
            self.param_groups, self.inner = inner.param_groups, inner

        def step(self, closure=None):
            return self.inner.step(closure)

        def zero_grad(self, set_to_none=True):
            self.inner.zero_grad(set_to_none)

    model = TrainerClassifier()
    callback = hookviz_transformers.HookvizCallback()
    with pytest.warns(RuntimeWarning, match="not watching TrainerClassifier.*Foreign is not a torch.optim"):
        foreign = Foreign(torch.optim.SGD(model.parameters(), 0.1))
        callback._trainer_watch.open(model, [foreign], None, main=False)
    assert callback.watch is None and has_no_hooks(model)


def test_the_callbacks_take_the_watch_options_and_refuse_an_unknown_one(tmp_path):
    for module in (hookviz_lightning, hookviz_transformers):
        with pytest.raises(hookviz.WatchError, match="option 'stats_evry'; did you mean 'stats_every'"):
            module.HookvizCallback(stats_evry=1)
        with pytest.raises(hookviz.WatchError, match="unknown option 'colour'"):
            module.HookvizCallback(show=True, colour="red")
    module = Classifier()
    callback = hookviz_lightning.HookvizCallback(stats_every=1, every=2, capacity=8, every_seconds=2)
    fit(module, callback, tmp_path)
    watch = callback.watch
    assert (watch.stats_every, watch.every, watch.capacity) == (1, 2, 8) and watch.steps == [0, 2]
    assert watch.history.full_steps == [0, 2] and watch.update_ratios(2)  # stats_every=1: every step read


def test_the_transformers_callback_takes_a_given_scaler(tmp_path):
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    callback = hookviz_transformers.HookvizCallback(scaler=scaler)
    trainer, _ = train(TrainerClassifier(), callback, tmp_path)
    assert callback.watch.scaler is scaler and trainer.state.global_step == STEPS


def test_transformers_removes_its_hooks_when_training_raises(tmp_path):
    model = TrainerClassifier()
    model.poison_step = None
    original = model.forward

    def forward(x, labels):
        if model.batches == 5:
            raise RuntimeError("the data loader hit a corrupt record")
        return original(x, labels)

    model.forward = forward
    callback = hookviz_transformers.HookvizCallback(tmp_path / "crashed")
    with pytest.raises(RuntimeError, match="corrupt record"):
        train(model, callback, tmp_path)
    assert callback.watch.closed and has_no_hooks(model) and callback.watch.steps == [0, 1]
    assert hookviz.load(tmp_path / "crashed.hookviz").steps == [0, 1]
    with hookviz.watch(model):  # the model is free for another watch
        pass


def test_lightning_removes_its_hooks_when_fitting_raises(tmp_path):
    class Crashing(Classifier):
        def training_step(self, batch, batch_index):
            if self.batches == 5:
                raise RuntimeError("the data loader hit a corrupt record")
            return super().training_step(batch, batch_index)

    module = Crashing()
    callback = hookviz_lightning.HookvizCallback()
    with pytest.raises(RuntimeError, match="corrupt record"):
        fit(module, callback, tmp_path)
    assert callback.watch.closed and has_no_hooks(module) and callback.watch.steps == [0, 1]


def test_wrapped_optimizers_are_followed_to_the_torch_optimizer():
    import accelerate
    from lightning.pytorch.core.optimizer import LightningOptimizer

    from hookviz.integrations.optimizers import unwrap

    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerated = accelerate.Accelerator(cpu=True).prepare_optimizer(optimizer)
    assert type(accelerated).__name__ == "AcceleratedOptimizer" and accelerated is not optimizer
    assert unwrap(accelerated) == (optimizer, accelerated.scaler)
    assert unwrap(LightningOptimizer(optimizer)) == (optimizer, None)
    assert unwrap(optimizer) == (optimizer, None)
    x, y = digits_like()
    with hookviz.watch(model, optimizer=accelerated) as w:  # the plain watch follows it too
        for _ in range(2):
            accelerated.zero_grad()
            F.cross_entropy(model(x), y).backward()
            accelerated.step()
    assert w.steps == [0, 1] and w.step_optimizer(1) == "SGD"


# ------------------------------------------------------------------- the trainer's own loggers


def assert_logged_as_the_watch(watch, logged: dict[int, dict[str, float]]) -> int:
    """Each logged row (``{hookviz/step: {scalar: value}}``) holds the watch's numbers at that step:
    per layer the gradient norm, the update ratio of its weight, the learning rate, NaN/Inf 0.
    Returns how many values were compared."""
    compared = 0
    assert logged and set(logged) <= set(watch.steps)
    for step, row in logged.items():
        norms, ratios = watch.layer_norms(step), watch.update_ratios(step)
        assert set(norms) == {"net.0", "net.2"} and ratios
        for layer, norm in norms.items():
            assert row[f"hookviz/grad_norm/{layer}"] == pytest.approx(norm, rel=1e-6)
            assert row[f"hookviz/update_ratio/{layer}"] == pytest.approx(ratios[f"{layer}.weight"], rel=1e-6)
            assert row[f"hookviz/nonfinite/{layer}"] == 0
            compared += 3
        assert row["hookviz/lr/SGD"] == pytest.approx(watch.learning_rates(step)[0]) == LEARNING_RATE
        assert row["hookviz/nonfinite"] == 0 and row["hookviz/nonfinite_steps"] == 0
    return compared


def test_lightning_logs_the_numbers_to_a_csv_logger(tmp_path):
    import csv

    from lightning.pytorch.loggers import CSVLogger

    module = Classifier()
    callback = hookviz_lightning.HookvizCallback(stats_every=1)
    logger = CSVLogger(tmp_path, name="csv")
    fit(module, callback, tmp_path, logger=logger, log_every_n_steps=2)
    with open(Path(logger.log_dir) / "metrics.csv") as file:
        rows = [row for row in csv.DictReader(file) if row.get("hookviz/step")]
    logged = {
        int(float(row["hookviz/step"])): {
            k: float(v) for k, v in row.items() if k.startswith("hookviz/") and v
        }
        for row in rows
    }
    assert sorted(logged) == [1, 3]  # every log_every_n_steps=2 optimizer steps, at Lightning's step
    assert [int(row["step"]) for row in rows] == [1, 3] and [row["epoch"] for row in rows] == ["0", "0"]
    assert assert_logged_as_the_watch(callback.watch, logged) == 2 * 2 * 3


def event_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of every scalar in the TensorBoard event files under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, dict[int, float]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events.parent))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            found.setdefault(tag, {}).update({e.step: e.value for e in accumulator.Scalars(tag)})
    return found


def test_lightning_logs_the_numbers_and_the_findings_to_tensorboard(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    module = Classifier(poison_batch=2)  # optimizer step 1 holds NaN, and every step after it
    callback = hookviz_lightning.HookvizCallback(stats_every=1)
    logger = TensorBoardLogger(tmp_path, name="tb")
    fit(module, callback, tmp_path, logger=logger, log_every_n_steps=1)
    scalars = event_scalars(Path(logger.log_dir))
    healthy = {0: {tag: values[0] for tag, values in scalars.items() if 0 in values}}
    assert assert_logged_as_the_watch(callback.watch, healthy) == 2 * 3
    assert scalars["hookviz/step"] == {0: 0, 1: 1, 2: 2, 3: 3}
    assert scalars["hookviz/nonfinite"][1] == sum(p.numel() for p in module.parameters())
    assert scalars["hookviz/nonfinite_steps"] == {0: 0, 1: 1, 2: 1, 3: 1}
    assert 0 not in scalars["hookviz/findings/nan"] and scalars["hookviz/findings/nan"][1] >= 1
    assert math.isnan(scalars["hookviz/grad_norm/net.0"][1])
    accumulator = EventAccumulator(logger.log_dir)
    accumulator.Reload()
    texts = [
        (event.step, event.tensor_proto.string_val[0].decode())
        for event in accumulator.Tensors("hookviz/findings/text_summary")
    ]
    nan = [f for f in callback.findings if f.kind == "nan"][0]
    assert (1, finding_text(nan, 0)) in texts and "epoch 0, step 1: " in finding_text(nan, 0)


def test_transformers_merges_the_numbers_into_log_history(tmp_path):
    callback = hookviz_transformers.HookvizCallback(stats_every=1)
    trainer, _ = train(TrainerClassifier(), callback, tmp_path)
    entries = [entry for entry in trainer.state.log_history if "hookviz/step" in entry]
    assert [entry["step"] for entry in entries] == [2, 4] and all("loss" in entry for entry in entries)
    logged = {int(entry["hookviz/step"]): entry for entry in entries}
    assert sorted(logged) == [1, 3]  # the last optimizer step before each log (logging_steps=2)
    assert assert_logged_as_the_watch(callback.watch, logged) == 2 * 2 * 3


def test_transformers_report_to_tensorboard_gets_the_numbers(tmp_path):
    callback = hookviz_transformers.HookvizCallback(stats_every=1)
    train(TrainerClassifier(), callback, tmp_path, report_to=["tensorboard"])
    # The Trainer's TensorBoard integration prefixes a training log's names with "train/".
    scalars = {tag.removeprefix("train/"): values for tag, values in event_scalars(tmp_path).items()}
    assert scalars["hookviz/step"] == {2: 1, 4: 3}  # at the Trainer's global step, beside its loss
    assert set(scalars["loss"]) == {2, 4}
    logged = {
        int(step): {tag: values[at] for tag, values in scalars.items() if at in values}
        for at, step in scalars["hookviz/step"].items()
    }
    assert assert_logged_as_the_watch(callback.watch, logged) == 2 * 2 * 3


def test_the_scalars_are_per_layer_unless_asked_per_parameter(tmp_path):
    callback = hookviz_transformers.HookvizCallback(per_parameter=True)
    trainer, _ = train(TrainerClassifier(), callback, tmp_path)
    entry = next(entry for entry in trainer.state.log_history if "hookviz/step" in entry)
    names = {key.removeprefix("hookviz/grad_norm/") for key in entry if key.startswith("hookviz/grad_norm/")}
    assert names == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    norms = callback.watch.norms(int(entry["hookviz/step"]), kind="parameter")
    assert all(entry[f"hookviz/grad_norm/{n}"] == pytest.approx(norms[n], rel=1e-12) for n in names)


def test_a_transformers_callback_given_without_attach_says_what_it_misses(tmp_path):
    model = TrainerClassifier()
    x, y = digits_like()
    callback = hookviz_transformers.HookvizCallback(stats_every=1)
    trainer = transformers.Trainer(
        model=model,
        args=transformers.TrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=BATCH,
            max_steps=2,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
            remove_unused_columns=False,
        ),
        train_dataset=[{"x": x[i], "labels": y[i]} for i in range(len(x))],
        callbacks=[callback],
    )
    with pytest.warns(RuntimeWarning, match="without hookviz.integrations.transformers.attach"):
        trainer.train()
    assert callback.watch.steps == [0, 1]  # it watched
    assert not [entry for entry in trainer.state.log_history if "hookviz/step" in entry]


# ------------------------------------------------------------ the norm before clipping, as trainers log it


class GradNormClassifier(Classifier):
    """Lightning's documented way to read gradient norms: its ``grad_norm`` utility in
    ``on_before_optimizer_step``, where the gradients are accumulated but not yet clipped."""

    def __init__(self):
        super().__init__()
        self.grad_norms: list[dict[str, float]] = []

    def on_before_optimizer_step(self, optimizer):
        norms = grad_norm(self, norm_type=2)
        self.grad_norms.append({name: float(value) for name, value in norms.items()})


def test_lightning_pre_clip_norms_equal_lightnings_grad_norm_utility(tmp_path):
    module = GradNormClassifier()
    callback = hookviz_lightning.HookvizCallback(stats_every=1)
    fit(module, callback, tmp_path)
    history = callback.watch.history
    assert len(module.grad_norms) == len(history.steps) == STEPS
    compared = 0
    for index, lightnings in enumerate(module.grad_norms):
        total = lightnings.pop("grad_2.0_norm_total")
        assert history.pre_clip_total[index] == pytest.approx(total, rel=1e-9)
        # clipped: the norm the optimizer stepped on, which the watch's norms hold, is CLIP
        assert total > 5 * CLIP
        assert history.norm[index, :4].square().sum().sqrt().item() == pytest.approx(CLIP, rel=1e-5)
        for key, value in lightnings.items():
            column = history.names.index(key.removeprefix("grad_2.0_norm/"))
            assert history.pre_clip_norm[index, column].item() == pytest.approx(value, rel=1e-9)
            compared += 1
    assert compared == STEPS * 4


def test_transformers_pre_clip_total_equals_the_trainers_logged_grad_norm(tmp_path):
    callback = hookviz_transformers.HookvizCallback(stats_every=1)
    trainer, _ = train(TrainerClassifier(), callback, tmp_path)
    history = callback.watch.history
    entries = [entry for entry in trainer.state.log_history if "grad_norm" in entry]
    assert len(entries) == 2
    for entry in entries:
        # logged at the Trainer's global step, after the optimizer step the watch numbers one less
        step = entry["step"] - 1
        assert entry["hookviz/step"] == step
        assert history.pre_clip_total[history.steps.index(step)] == pytest.approx(
            entry["grad_norm"], rel=1e-5
        )
        assert entry["hookviz/grad_norm_pre_clip_total/SGD"] == pytest.approx(entry["grad_norm"], rel=1e-5)
        assert entry["grad_norm"] > 5 * CLIP
