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
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hookviz
from hookviz.integrations import lightning as hookviz_lightning
from hookviz.integrations import transformers as hookviz_transformers
from hookviz.integrations.trainer_watch import in_notebook

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
    assert [message for message, _ in warnings] == [f"hookviz: {f.message}" for f in callback.findings]
    assert "step 1:" in warnings[0][0] and "NaN" in warnings[0][0]
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


def train(model: TrainerClassifier, callback, tmp_path) -> tuple[transformers.Trainer, list]:
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
        logging_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(
        model=model,
        args=arguments,
        train_dataset=[{"x": x[i], "labels": y[i]} for i in range(len(x))],
        callbacks=[callback],
        optimizers=(optimizer, None),
    )
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
    assert warnings == [f"hookviz: {f.message}" for f in callback.findings]
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
