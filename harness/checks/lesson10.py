"""Checks of lesson 10 (the capstone): each piece of the capstone run, then the run itself.

They observe behaviour: the precision chosen for described devices, the optimizer's groups and the learning
rate every step gets, the batches each of two real gloo ranks (forked, `harness.launch.launch_forked`)
reads, the files and checkpoints a training run writes, the optimizer steps a resumed run takes, the
accuracy of the trained model on images the grader generates itself, and what the run report says.
"""

from __future__ import annotations

import contextlib
import math
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, TensorDataset

from harness.checks.core import fail, register
from harness.checks.lesson07 import warmup_cosine_reference
from harness.checks.param_groups import check_weight_decay, group_of_each_parameter
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, shapes
from harness.env import select_device, supported_precisions
from harness.launch import LaunchError, launch_forked
from harness.repro import capture_rng_state, restore_rng_state

PRECISIONS = ("fp32", "bf16", "fp16")
# The grader's held-out images: shapes drawn from seeds the lesson never uses for training or validation.
HELD_OUT = {False: (1000, 10_007), True: (1000, 20_011)}  # hidden -> (images, seed)
ACCURACY_THRESHOLD = 0.75  # chance is 0.2; a correct run clears 0.85 even at the grading budget


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Restore every global RNG state afterwards: the checks seed and scramble, the notebook's streams stay."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


# ----------------------------------------------------------------------------------------------------
# 10-precision
# ----------------------------------------------------------------------------------------------------
def reference_precision(device_type: str, precisions: dict[str, bool]) -> str:
    """bf16 where autocast supports it; fp16 (with a GradScaler) on CUDA GPUs without bf16; else fp32."""
    if precisions.get("bf16_autocast"):
        return "bf16"
    if device_type == "cuda" and precisions.get("fp16_autocast") and precisions.get("grad_scaler"):
        return "fp16"
    return "fp32"


def _support(bf16: bool, fp16: bool, scaler: bool) -> dict[str, bool]:
    return {"fp32": True, "bf16_autocast": bf16, "fp16_autocast": fp16, "grad_scaler": scaler}


_PRECISION_CASES = [
    ("cuda", _support(True, True, True), "an Ampere or newer GPU (A100, H100, RTX 30xx)"),
    ("cuda", _support(False, True, True), "a pre-Ampere GPU (V100, T4): fp16 tensor cores, no native bf16"),
    ("cpu", _support(True, True, True), "a CPU whose autocast runs bf16"),
    ("cpu", _support(False, True, True), "a CPU without bf16 autocast (fp16 there is emulated, and slow)"),
]
_HIDDEN_PRECISION_CASES = [
    ("mps", _support(True, True, True), "an Apple GPU with bf16"),
    ("mps", _support(False, True, True), "an Apple GPU without bf16 (fp16 is only for CUDA here)"),
    ("cuda", _support(False, True, False), "a GPU whose GradScaler is unavailable"),
    ("cuda", _support(False, False, False), "a GPU without autocast"),
    ("cpu", _support(False, False, False), "a CPU without autocast"),
]


def _precision_failure(got: Any, expected: str, device_type: str, precisions: dict[str, bool], what: str) -> NoReturn:
    seen = f"choose_precision({device_type!r}, {precisions}) returned {got!r} for {what}"
    if got not in PRECISIONS:
        fail("not-a-precision", observed=seen, expected=f"one of the strings {PRECISIONS} that fit(precision=...) takes",
             cause="returning a dtype (torch.bfloat16) or another name", where="the return values of choose_precision")
    if got == "bf16":
        fail("bf16-unsupported", observed=seen, expected=f"{expected!r}: bf16_autocast is False on this device",
             cause="bf16 chosen without asking the device; where it is not supported torch emulates it (slower than "
             "fp32) or refuses it", where="choose bf16 only when precisions['bf16_autocast'] is True")
    if got == "fp16" and expected == "bf16":
        fail("fp16-over-bf16", observed=seen, expected="'bf16': the device supports it",
             cause="fp16 preferred although bf16 works: fp16 needs a GradScaler and overflows above 65504, bf16 has "
             "float32's range and needs neither", where="test bf16 first")
    if got == "fp16" and device_type != "cuda":
        fail("fp16-off-cuda", observed=seen, expected=f"{expected!r}",
             cause="fp16 on a device other than a CUDA GPU: on a CPU it is emulated (slower than fp32)",
             where="fp16 only when device_type == 'cuda'")
    if got == "fp16":
        fail("fp16-without-scaler", observed=seen, expected=f"{expected!r}",
             cause="fp16 chosen where fp16 autocast or the GradScaler is unavailable: small gradients would "
             "underflow to zero without loss scaling", where="require precisions['fp16_autocast'] and "
             "precisions['grad_scaler'] for fp16")
    fail("no-amp", observed=seen, expected=f"{expected!r}",
         cause="mixed precision left off where the device supports it: bf16 where bf16 autocast works, else fp16 "
         "with a GradScaler on a CUDA GPU", where="the order of the tests in choose_precision")


@register(
    "10-precision",
    hints=(
        "Three outcomes, tested in order: bf16 if the device's autocast supports it; otherwise fp16, but only "
        "on a CUDA GPU where fp16 autocast and the GradScaler both work; otherwise fp32.",
        "if precisions['bf16_autocast']: return 'bf16'; if device_type == 'cuda' and precisions['fp16_autocast'] "
        "and precisions['grad_scaler']: return 'fp16'; return 'fp32'",
    ),
)
def check_precision(choose_precision: Callable[[str, dict[str, bool]], str], *, hidden: bool) -> str:
    """Described devices, then this machine's own device as supported_precisions reports it."""
    device = select_device()
    cases = _PRECISION_CASES + (_HIDDEN_PRECISION_CASES if hidden else [])
    cases = cases + [(device.type, supported_precisions(device), f"this machine's {device}")]
    for device_type, precisions, what in cases:
        got = choose_precision(device_type, dict(precisions))
        expected = reference_precision(device_type, precisions)
        if got != expected:
            _precision_failure(got, expected, device_type, precisions, what)
    return f"the right precision for {len(cases)} devices, this machine's {device} included"


# ----------------------------------------------------------------------------------------------------
# 10-optimizer
# ----------------------------------------------------------------------------------------------------
class _Buffered(nn.Module):
    """Holds a buffer and no parameter, as the capstone's normalisation layer does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.mean


def _optimizer_model(freeze_first: bool) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        _Buffered(), nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 5),
    )
    if freeze_first:
        model[1].requires_grad_(False)
    return model


def _check_groups(model: nn.Module, optimizer: torch.optim.Optimizer, lr: float, weight_decay: float) -> None:
    if not isinstance(optimizer, torch.optim.AdamW):
        fail("not-adamw", observed=f"a {type(optimizer).__name__}", expected="torch.optim.AdamW",
             cause="Adam's weight_decay adds an L2 term to the gradient, which Adam's per-weight scaling then "
             "weakens; AdamW decays the weights directly (decoupled), as intended",
             where="torch.optim.AdamW(groups, lr=lr)")
    for name, group in group_of_each_parameter(model, optimizer.param_groups).items():
        check_weight_decay(model, name, group, weight_decay)
        peak = group.get("initial_lr", group["lr"])
        if not math.isclose(peak, lr, rel_tol=1e-9):
            fail("wrong-lr", observed=f"{name}'s group has base lr {peak}", expected=f"{lr} in every group",
                 cause="the groups' lr is not the lr argument", where="AdamW(groups, lr=lr)")


def _check_schedule(optimizer: torch.optim.Optimizer, scheduler: Any, lr: float, warmup: int, total: int) -> None:
    if getattr(scheduler, "optimizer", None) is not optimizer:
        fail("scheduler-other-optimizer", observed="the scheduler was not built on the optimizer returned with it",
             expected="scheduler.optimizer is optimizer", cause="a scheduler built on another optimizer changes "
             "nothing that trains", where="build the scheduler from the optimizer you return")
    for step in range(total + 3):
        expected = lr * warmup_cosine_reference(step, warmup, total)
        used = [group["lr"] for group in optimizer.param_groups]
        if all(math.isclose(u, expected, rel_tol=1e-6, abs_tol=1e-12) for u in used):
            optimizer.step()  # no gradients: nothing moves, and PyTorch sees the usual step order
            scheduler.step()
            continue
        where = f"optimizer step {step} of a schedule with warmup_steps={warmup}, total_steps={total}, lr={lr}"
        observed = f"{where} used lr {used[0]:.6g}" if len(set(used)) == 1 else f"{where} used lrs {used}"
        if step < warmup:
            fail("warmup-wrong", observed=observed, expected=f"{expected:.6g} = lr * step / warmup_steps (0 at step 0)",
                 cause="no warm-up, or a ramp that is not step / warmup_steps", where="the warm-up branch of the factor")
        if step <= total:
            fail("cosine-wrong", observed=observed, expected=f"{expected:.6g} = lr * 0.5 * (1 + cos(pi * progress)), "
                 f"progress = (step - warmup_steps) / (total_steps - warmup_steps)",
                 cause="the cosine measured from step 0 instead of the end of warm-up, the wrong length, or a "
                 "scheduler stepped by something else", where="the cosine branch of the factor")
        fail("rises-after-total", observed=observed, expected="0: past total_steps the lr stays at the end of the cosine",
             cause="progress is not clamped at 1, so the cosine comes back up", where="min(1.0, progress)")


@register(
    "10-optimizer",
    hints=(
        "Two groups from model.named_parameters() (trainable ones only): matrices and kernels (p.ndim >= 2) with "
        "weight decay, biases and normalisation weights (ndim < 2) without. Then a LambdaLR whose factor is "
        "lesson 07's warm-up-then-cosine, stepped once per optimizer step.",
        "decay = [p for p in params if p.ndim >= 2]; no_decay = [...< 2]; optimizer = torch.optim.AdamW([{'params': "
        "decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}], lr=lr); factor(step) = "
        "step / warmup_steps if step < warmup_steps else 0.5 * (1 + math.cos(math.pi * min(1.0, (step - "
        "warmup_steps) / max(1, total_steps - warmup_steps)))); return optimizer, LambdaLR(optimizer, factor)",
    ),
)
def check_optimizer(make_optimizer: Callable[..., tuple[torch.optim.Optimizer, Any]], *, hidden: bool) -> str:
    """The groups of a small CNN with norms, biases and a buffer; the lr of every step of the schedule."""
    settings = [(1e-2, 0.05, 5, 40, False)]
    if hidden:  # no warm-up at all, no weight decay, a frozen layer
        settings = [(3e-3, 0.1, 0, 25, True), (2e-2, 0.0, 7, 60, False)]
    with _rng_kept():
        for lr, weight_decay, warmup, total, freeze_first in settings:
            model = _optimizer_model(freeze_first)
            result = make_optimizer(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup, total_steps=total)
            if not (isinstance(result, tuple) and len(result) == 2):
                fail("not-a-pair", observed=f"make_optimizer returned a {type(result).__name__}",
                     expected="(optimizer, scheduler)", cause="only one of the two returned",
                     where="return optimizer, scheduler")
            optimizer, scheduler = result
            _check_groups(model, optimizer, lr, weight_decay)
            _check_schedule(optimizer, scheduler, lr, warmup, total)
    return "AdamW with decay on weights only, and warm-up then cosine at every optimizer step"


# ----------------------------------------------------------------------------------------------------
# 10-train-loader
# ----------------------------------------------------------------------------------------------------
def _index_dataset(n: int) -> TensorDataset:
    """Inputs are the sample indices, so a batch says which samples it holds."""
    return TensorDataset(torch.arange(n), torch.zeros(n, dtype=torch.long))


def _epoch_batches(loader: DataLoader, epoch: int) -> list[list[int]]:
    set_epoch = getattr(loader.sampler, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    return [batch[0].tolist() for batch in loader]


def _loader_worker(train_loader: Callable[..., DataLoader], n: int, batch_size: int, seed: int) -> list[list[list[int]]]:
    loader = train_loader(_index_dataset(n), batch_size, seed=seed)
    return [_epoch_batches(loader, epoch) for epoch in range(2)]


def _on_two_ranks(worker: Callable[..., Any], *args: Any) -> list[Any]:
    """Run `worker` on 2 forked gloo ranks; a rank's exception becomes the student's exception."""
    for attempt in range(2):
        try:
            # the ranks only read CPU tensors: safe to fork even after the notebook used a GPU
            return launch_forked(worker, 2, args=args, timeout_s=30, cuda_initialized_ok=True).results
        except LaunchError as error:
            # a forked child of a threaded kernel can, rarely, deadlock at start: a second try tells it apart
            if "did not finish" not in str(error) or attempt:
                last = str(error).strip().splitlines()[-1]
                raise RuntimeError(f"on rank {error.rank}: {last}") from None
    raise AssertionError("unreachable")


def _check_batches(epochs: list[list[int]], batch_size: int, n: int, who: str) -> None:
    sizes = sorted({len(batch) for batches in epochs for batch in batches})
    if sizes and max(sizes) != batch_size:
        fail("wrong-batch-size", observed=f"{who} batches of {max(sizes)} samples", expected=f"{batch_size} per rank",
             cause="batch_size is the per-rank batch: keep it as given", where="DataLoader(..., batch_size=batch_size)")
    if len(sizes) > 1:
        fail("partial-last-batch", observed=f"{who} batch sizes {sizes} (n={n}, batch_size={batch_size})",
             expected=f"only full batches of {batch_size}",
             cause="the last, incomplete batch is kept: a batch of one sample makes BatchNorm fail in training "
             "mode, and small last batches give noisy steps", where="DataLoader(..., drop_last=True)")


def _check_sharded(results: list[list[list[list[int]]]], n: int, batch_size: int) -> None:
    for rank, epochs in enumerate(results):
        _check_batches(epochs, batch_size, n, f"rank {rank} read")
    shards = [set(sum(epochs[0], [])) for epochs in results]
    if shards[0] & shards[1] or len(shards[0] | shards[1]) < 2 * ((n // 2) // batch_size) * batch_size:
        fail("overlapping-shards", observed=f"under 2 ranks, rank 0 read {len(shards[0])} samples and rank 1 "
             f"{len(shards[1])}, {len(shards[0] & shards[1])} of them the same, from {n}",
             expected="disjoint halves: each rank its own shard",
             cause="every rank reads the whole dataset (shuffle=True or a generator instead of a DistributedSampler), "
             "so the ranks train on the same samples", where="DataLoader(dataset, batch_size, sampler="
             "DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), seed=seed), drop_last=True)")


def _check_single_process(train_loader: Callable[..., DataLoader], n: int, batch_size: int, seed: int) -> None:
    loader = train_loader(_index_dataset(n), batch_size, seed=seed)
    first = _epoch_batches(loader, 0)
    _check_batches([first], batch_size, n, "one process read")
    order = sum(first, [])
    if len(set(order)) != n // batch_size * batch_size:
        fail("wrong-coverage", observed=f"one epoch of one process read {len(set(order))} distinct samples of {n}",
             expected=f"{n // batch_size * batch_size}: the whole dataset but the dropped last partial batch",
             cause="a sampler that shards although there is no process group, or repeats samples",
             where="DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), seed=seed) with "
             "harness.distributed's helpers: a world of one without a process group")
    if order == sorted(order):
        fail("not-shuffled", observed=f"samples read in order {order[:6]}...", expected="a shuffled order",
             cause="shuffle=False", where="the sampler's shuffle (DistributedSampler shuffles by default)")
    if getattr(loader.sampler, "set_epoch", None) is None:
        fail("no-set-epoch", observed=f"the loader's sampler ({type(loader.sampler).__name__}) has no set_epoch",
             expected="a DistributedSampler: fit calls sampler.set_epoch(epoch) to reshuffle each epoch",
             cause="not a DistributedSampler", where="sampler=DistributedSampler(dataset, seed=seed)")
    if sum(_epoch_batches(loader, 1), []) == order:
        fail("same-order-every-epoch", observed="set_epoch(1) gives the order of epoch 0",
             expected="a new order every epoch", cause="the sampler ignores its epoch",
             where="torch.utils.data.DistributedSampler seeds its shuffle with seed + epoch")
    torch.default_generator.seed()  # a resumed run starts from some other global RNG state
    again = train_loader(_index_dataset(n), batch_size, seed=seed)
    if sum(_epoch_batches(again, 0), []) != order:
        fail("order-not-reproducible", observed="two loaders built with the same seed read epoch 0 in different orders",
             expected="the order a function of (seed, epoch) only",
             cause="the shuffle draws from the global RNG or an unsaved generator: a resumed run would read other "
             "batches than the run it continues", where="DistributedSampler(dataset, seed=seed): its order is "
             "fixed by seed and epoch, nothing to save in a checkpoint")
    other = train_loader(_index_dataset(n), batch_size, seed=seed + 1)
    if sum(_epoch_batches(other, 0), []) == order:
        fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give the same order", expected="the seed picks the order",
             cause="the seed argument is not passed on", where="DistributedSampler(dataset, seed=seed)")


@register(
    "10-train-loader",
    hints=(
        "One loader for one process and for N: a DistributedSampler given the rank and world size of the "
        "process group (harness.distributed: a world of one without a group) shuffles with seed + epoch, and "
        "needs no saved state. Drop the last, incomplete batch.",
        "sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, "
        "seed=seed); return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)",
    ),
)
def check_train_loader(train_loader: Callable[..., DataLoader], *, hidden: bool) -> str:
    """Read the loader on 2 forked gloo ranks, then in this process: shards, full batches, seeded order."""
    settings = [(100, 16, 0)] if not hidden else [(75, 8, 5), (130, 32, 11)]
    with _rng_kept():
        for n, batch_size, seed in settings:
            _check_sharded(_on_two_ranks(_loader_worker, train_loader, n, batch_size, seed), n, batch_size)
            _check_single_process(train_loader, n, batch_size, seed)
    return "disjoint shards on 2 ranks, one process reads everything, full batches, order set by seed and epoch"


# ----------------------------------------------------------------------------------------------------
# 10-train
# ----------------------------------------------------------------------------------------------------
class _Interrupted(Exception):
    """Raised from on_epoch_end: the machine goes away right after a checkpoint was written."""


class _StepCounter:
    """Counts optimizer.step() calls of every optimizer while it is active."""

    def __enter__(self) -> _StepCounter:
        self.count = 0
        self._handle = register_optimizer_step_post_hook(self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _count(self, *args: object) -> None:
        self.count += 1


def _constant_accuracy_val() -> LabeledTensorDataset:
    """Five copies of one image labelled 0 to 4: whatever the model predicts, accuracy is exactly 0.2, so it
    never improves after epoch 1. Early stopping and best.pt become predictable."""
    image = shapes(1, seed=99, size=16).tensors[0]
    return LabeledTensorDataset(image.repeat(5, 1, 1, 1), torch.arange(5), classes=SHAPE_CLASSES)


def _interrupt_after(epoch: int) -> Callable[[int, dict[str, Any]], None]:
    def on_epoch_end(done: int, row: dict[str, Any]) -> None:
        if done == epoch:
            raise _Interrupted(f"interrupted after epoch {done}")

    return on_epoch_end


def _train_config(hidden: bool) -> tuple[dict[str, Any], int, int]:
    """The config, the number of samples and the epoch after which the run is interrupted."""
    if hidden:
        return dict(epochs=3, batch_size=16, lr=5e-3, weight_decay=0.1, warmup_fraction=0.2, max_grad_norm=0.5,
                    patience=1, width=4, seed=11), 80, 1
    return dict(epochs=4, batch_size=16, lr=3e-3, weight_decay=0.05, warmup_fraction=0.25, max_grad_norm=1.0,
                patience=2, width=4, seed=3), 96, 2


def _weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu() for k, v in state.items() if v.is_floating_point()}


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    a, b = _weights(a), _weights(b)
    if a.keys() != b.keys():
        return math.inf
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _run(train_capstone: Callable[..., Any], data: tuple[Any, Any], out: Path, config: dict[str, Any],
         **options: Any) -> tuple[Any, int]:
    """Call the student's function from a scrambled global RNG state; return its result and its steps."""
    torch.default_generator.seed()  # the notebook's global RNG state is anyone's: the run must seed itself
    with _StepCounter() as steps:
        result = train_capstone(data[0], data[1], out, dict(config), device="cpu", **options)
    return result, steps.count


def _check_result(result: Any, out: Path) -> dict[str, Any]:
    if not (isinstance(result, dict) and isinstance(result.get("model"), nn.Module)
            and isinstance(result.get("history"), pd.DataFrame) and result.get("precision") in PRECISIONS):
        fail("not-a-run", observed=f"train_capstone returned {type(result).__name__}"
             + (f" with keys {sorted(result)}" if isinstance(result, dict) else ""),
             expected="a dict with 'model' (the trained nn.Module), 'history' (fit's DataFrame), 'precision'",
             cause="a different return value", where="the return statement of train_capstone")
    missing = [name for name in ("last.pt", "best.pt", "history.csv", "config.json") if not (out / name).is_file()]
    if missing:
        fail("missing-checkpoints", observed=f"{out.name}/ lacks {missing}", expected="last.pt, best.pt, history.csv, "
             "config.json written into out_dir", cause="fit was not given checkpoint_dir=out_dir",
             where="fit(..., checkpoint_dir=out_dir)")
    return torch.load(out / "last.pt", map_location="cpu", weights_only=True)


def _check_settings(last: dict[str, Any], config: dict[str, Any]) -> None:
    """What fit recorded about the run in last.pt: precision, clipping, schedule, early stopping."""
    saved = last.get("config", {})
    expected_precision = reference_precision("cpu", supported_precisions(torch.device("cpu")))
    if saved.get("precision") != expected_precision:
        fail("wrong-precision", observed=f"the run trained in {saved.get('precision')!r} on the CPU",
             expected=f"{expected_precision!r}, what choose_precision picks for this device",
             cause="precision not passed to fit", where="fit(..., precision=choose_precision(device.type, "
             "supported_precisions(device)))")
    if saved.get("max_grad_norm") != config["max_grad_norm"]:
        fail("no-clipping", observed=f"max_grad_norm={saved.get('max_grad_norm')!r}",
             expected=f"{config['max_grad_norm']} (config['max_grad_norm'])", cause="clipping not passed to fit",
             where="fit(..., max_grad_norm=config['max_grad_norm'])")
    if saved.get("scheduler") is None:
        fail("no-scheduler", observed="the run had no learning-rate scheduler", expected="the warm-up-cosine "
             "scheduler of make_optimizer", cause="scheduler not passed to fit", where="fit(..., scheduler=scheduler)")
    scheduler_steps = (last.get("scheduler") or {}).get("last_epoch")
    if saved.get("scheduler_interval") != "step" or scheduler_steps != last.get("global_step"):
        fail("schedule-per-epoch", observed=f"the scheduler was stepped {scheduler_steps} times in "
             f"{last.get('global_step')} optimizer steps (scheduler_interval={saved.get('scheduler_interval')!r})",
             expected="once per optimizer step", cause="a schedule sized in optimizer steps stepped per epoch",
             where="fit(..., scheduler_interval='step')")
    wanted = ("val_accuracy", "max", config["patience"])
    got = (saved.get("monitor"), saved.get("monitor_mode"), saved.get("early_stopping_patience"))
    if got != wanted:
        fail("wrong-early-stopping", observed=f"monitor, mode, patience = {got}", expected=f"{wanted}",
             cause="early stopping missing or watching another metric: best.pt must be the most accurate epoch",
             where="fit(..., metrics={'accuracy': accuracy}, early_stopping=EarlyStopping('val_accuracy', "
             "mode='max', patience=config['patience']))")
    if saved.get("epochs") != config["epochs"]:
        fail("wrong-epochs", observed=f"fit ran with epochs={saved.get('epochs')!r}", expected=f"{config['epochs']}",
             cause="epochs not taken from config", where="fit(..., epochs=config['epochs'])")


def _check_steps(counted: int, config: dict[str, Any], n: int, what: str) -> None:
    expected = (config["patience"] + 1) * (n // config["batch_size"])
    if counted != expected:
        fail("wrong-step-count", observed=f"{counted} optimizer steps in {what}",
             expected=f"{expected}: {n // config['batch_size']} batches of config['batch_size']={config['batch_size']} "
             f"per epoch, and early stopping after epoch {config['patience'] + 1} (the validation accuracy of this "
             "check never improves after epoch 1)",
             cause="another batch size, or early stopping that does not stop",
             where="train_loader(train_set, config['batch_size'], seed=...) and the early stopping given to fit")


def _check_resume(train_capstone: Callable[..., Any], data: tuple[Any, Any], root: Path, config: dict[str, Any],
                  n: int, stop_at: int, straight_last: dict[str, Any]) -> None:
    per_epoch = n // config["batch_size"]
    try:
        _run(train_capstone, data, root / "resumed", config, on_epoch_end=_interrupt_after(stop_at))
    except _Interrupted:
        pass
    else:
        fail("callback-ignored", observed=f"the run went on after on_epoch_end raised at epoch {stop_at}",
             expected="the exception to stop training, as a killed process would",
             cause="on_epoch_end is not passed to fit", where="fit(..., on_epoch_end=on_epoch_end)")
    _, steps = _run(train_capstone, data, root / "resumed", config, resume=True)
    remaining = (config["patience"] + 1 - stop_at) * per_epoch
    if steps != remaining:
        fail("resume-ignored", observed=f"after an interruption at epoch {stop_at}, the resumed call took {steps} "
             "optimizer steps", expected=f"{remaining}: only the epochs left", cause="the run restarted from scratch: "
             "resume is not passed to fit, or out_dir is not the checkpoint folder",
             where="fit(..., checkpoint_dir=out_dir, resume=resume)")
    resumed_last = torch.load(root / "resumed" / "last.pt", map_location="cpu", weights_only=True)
    difference = _max_difference(resumed_last["model"], straight_last["model"])
    if difference == 0:
        return
    _run(train_capstone, data, root / "again", config)
    again_last = torch.load(root / "again" / "last.pt", map_location="cpu", weights_only=True)
    if _max_difference(again_last["model"], straight_last["model"]) > 0:
        fail("not-seeded", observed="two fresh runs with the same config end with different weights",
             expected="identical runs: everything random is seeded from config['seed'] inside train_capstone",
             cause="no seed_everything(config['seed']) before the model is built, so its initial weights come from "
             "whatever state the global RNG was in", where="the first lines of train_capstone")
    fail("resume-not-exact", observed=f"interrupted after epoch {stop_at} and resumed, the final weights differ from "
         f"the uninterrupted run by up to {difference:.3g}", expected="identical weights",
         cause="the resumed run is built differently (another schedule length, data order or model) from the one "
         "it continues", where="build everything from config alone, the same way whether resuming or not")


@register(
    "10-train",
    hints=(
        "Compose, do not rewrite: seed, build the model (Standardize then capstone_cnn) on its device, "
        "make_optimizer with total_steps = epochs * len(train loader), the loaders, choose_precision, then one "
        "call to fit with every option, and load best.pt's weights before returning.",
        "seed_everything(config['seed']); model = nn.Sequential(Standardize(*normalization_stats(train_set.tensors[0])), "
        "capstone_cnn(len(train_set.classes), config['width'])).to(device); loader = train_loader(train_set, "
        "config['batch_size'], seed=config['seed']); fit(model, loader, val_loader, loss_fn=nn.CrossEntropyLoss(), "
        "optimizer=..., epochs=config['epochs'], precision=..., max_grad_norm=config['max_grad_norm'], "
        "scheduler=scheduler, scheduler_interval='step', metrics={'accuracy': accuracy}, early_stopping="
        "EarlyStopping('val_accuracy', mode='max', patience=config['patience']), checkpoint_dir=out_dir, "
        "resume=resume, on_epoch_end=on_epoch_end, progress=progress)",
    ),
)
def check_train(train_capstone: Callable[..., dict[str, Any]], *, hidden: bool) -> str:
    """A run straight through, then one interrupted and resumed: settings, files, best weights, exact resume."""
    config, n, stop_at = _train_config(hidden)
    data = (shapes(n, seed=config["seed"] + 40, size=16), _constant_accuracy_val())
    with tempfile.TemporaryDirectory(prefix="check-10-train-") as tmp, _rng_kept():
        root = Path(tmp)
        result, steps = _run(train_capstone, data, root / "straight", config)
        last = _check_result(result, root / "straight")
        _check_settings(last, config)
        _check_steps(steps, config, n, "the run")
        best = torch.load(root / "straight" / "best.pt", map_location="cpu", weights_only=True)
        if _max_difference(result["model"].state_dict(), best["model"]) > 0:
            fail("not-best-weights", observed=f"the returned model does not hold best.pt's weights (epoch "
                 f"{best.get('epoch')}); the run ended at epoch {last.get('epoch')}",
                 expected="the best epoch's weights: the model to evaluate and deploy",
                 cause="the model is returned as the last epoch left it",
                 where="load_checkpoint(Path(out_dir) / 'best.pt', model=model) before returning")
        _check_resume(train_capstone, data, root, config, n, stop_at, last)
    return (f"precision, clipping, per-step schedule and early stopping as configured; best weights returned; "
            f"interrupted after epoch {stop_at} and resumed: identical to the run that never stopped")


# ----------------------------------------------------------------------------------------------------
# 10-held-out
# ----------------------------------------------------------------------------------------------------
def _accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = 0
    try:
        with torch.inference_mode():
            for start in range(0, len(images), 250):
                outputs = model(images[start : start + 250].to(device))
                if outputs.shape != (len(images[start : start + 250]), len(SHAPE_CLASSES)):
                    fail("wrong-output-shape", observed=f"the model maps {tuple(images[:250].shape)} images to "
                         f"{tuple(outputs.shape)}", expected=f"(N, {len(SHAPE_CLASSES)}) logits",
                         cause="the model was built for another number of classes",
                         where="capstone_cnn(len(train_set.classes), ...)")
                correct += int((outputs.argmax(1).cpu() == labels[start : start + 250]).sum())
    finally:
        model.train(was_training)
    return correct / len(images)


@register(
    "10-held-out",
    hints=(
        "The grader draws its own shapes, never seen in training or validation: only a model that learned the "
        "shapes passes. Look at your curves: did validation accuracy still climb at the end (train longer, or a "
        "larger lr), or jump around (a smaller lr, more warm-up)?",
        "AdamW with lr about 1e-2, a tenth of the steps as warm-up, width 8 to 16 and every epoch the budget "
        "allows reach well above the threshold; the model must take raw images in [0, 1] (Standardize inside it).",
    ),
)
def check_held_out(run: dict[str, Any], *, hidden: bool) -> str:
    """Accuracy of run['model'] on shapes the grader generates from its own seed."""
    model = run.get("model") if isinstance(run, dict) else None
    if not isinstance(model, nn.Module):
        fail("not-a-run", observed=f"check received {type(run).__name__}", expected="the dict train_capstone returns, "
             "with the trained 'model'", cause="another object passed", where="check('10-held-out', run)")
    count, seed = HELD_OUT[hidden]
    test = shapes(count, seed=seed, size=32)
    accuracy = _accuracy(model, *test.tensors)
    if accuracy < ACCURACY_THRESHOLD:
        history = run.get("history")
        validated = float(history["val_accuracy"].max()) if isinstance(history, pd.DataFrame) and "val_accuracy" in history else None
        mismatch = validated is not None and validated >= ACCURACY_THRESHOLD
        fail("below-threshold", observed=f"accuracy {accuracy:.3f} on {count} held-out images"
             + (f", while the best validation accuracy was {validated:.3f}" if validated is not None else ""),
             expected=f"at least {ACCURACY_THRESHOLD} (chance is {1 / len(SHAPE_CLASSES):.2f})",
             cause="the returned model does not behave like the validated one: it must take raw images in [0, 1] "
             "(normalisation inside the model) and hold best.pt's weights" if mismatch else
             "the run did not learn enough: too few steps, a learning rate too small or too large, or a model "
             "too narrow", where="train_capstone's model" if mismatch else "CONFIG, then the curves of your run")
    return f"accuracy {accuracy:.3f} on {count} held-out images the grader generated (threshold {ACCURACY_THRESHOLD})"


# ----------------------------------------------------------------------------------------------------
# 10-report
# ----------------------------------------------------------------------------------------------------
def _report_run(root: Path, hidden: bool) -> tuple[dict[str, Any], LabeledTensorDataset, dict[str, float]]:
    """A small real run made with fit (best weights loaded), its test set, and the test metrics it must report."""
    from harness.checkpoint import load_checkpoint
    from harness.metrics import accuracy
    from harness.models import capstone_cnn
    from harness.train import EarlyStopping, evaluate, fit

    seed, epochs = (21, 3) if hidden else (7, 2)
    precision = reference_precision("cpu", supported_precisions(torch.device("cpu")))
    torch.manual_seed(seed)
    train, val, test = (shapes(n, seed=seed + k, size=16) for k, n in ((0, 96), (1, 48), (2, 60 if hidden else 40)))
    model = capstone_cnn(len(SHAPE_CLASSES), width=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = fit(model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=48),
                  loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs, precision=precision,
                  max_grad_norm=1.0, metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping("val_accuracy", mode="max", patience=epochs),
                  checkpoint_dir=root / "checkpoints", progress=False)
    load_checkpoint(root / "checkpoints" / "best.pt", model=model)
    scores = evaluate(model, DataLoader(test, batch_size=100), loss_fn=nn.CrossEntropyLoss(),
                      metrics={"accuracy": accuracy}, precision=precision)
    run = {"model": model, "history": history, "precision": precision, "checkpoint_dir": root / "checkpoints"}
    return run, test, scores


def _missing(code: str, what: str, how: str) -> NoReturn:
    fail(code, observed=f"the report has no {what}", expected=f"a complete run report, {what} included",
         cause=f"{how} not given to write_run_report", where=f"write_run_report(..., {how})")


def _reported_number(text: str, name: str) -> float | None:
    """The value after `name` on the report's held-out test line, or None."""
    line = next((line for line in text.splitlines() if "test" in line.lower() and name in line), "")
    found = re.search(rf"{name}\W+(-?[0-9.]+(?:e-?[0-9]+)?)", line)
    return float(found.group(1)) if found else None


def _check_report_text(text: str, folder: Path, run: dict[str, Any], scores: dict[str, float], test_size: int) -> None:
    device = run["history"].attrs["config"]["device"]
    if torch.__version__ not in text or device not in text:
        _missing("missing-environment", f"environment (the device {device!r} and torch {torch.__version__})",
                 "environment=environment_report(device)")
    if "max_grad_norm" not in text or "scheduler" not in text:
        _missing("missing-config", "configuration (max_grad_norm, scheduler, ... of the run)", "the history from fit")
    if "train_loss" not in text or text.count("\n|") < len(run["history"]) + 2:
        _missing("missing-history", "history table (one row per epoch)", "the history from fit")
    images = [folder / link for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)]
    if not any(p.is_file() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in images):
        _missing("missing-curves", "curves: no ![...](file.png) link to a PNG that exists next to it",
                 "curves=plot_history(...)'s saved PNG")
    reported = {name: _reported_number(text, name) for name in ("accuracy", "loss")}
    if reported["accuracy"] is None or "not evaluated" in text:
        _missing("missing-test-metrics", "held-out test metrics", "test_metrics=evaluate(model, test_loader, ...)")
    accuracy_ok = abs(reported["accuracy"] - scores["accuracy"]) <= 2 / test_size + 1e-3
    loss_ok = reported["loss"] is None or math.isclose(reported["loss"], scores["loss"], rel_tol=0.03, abs_tol=1e-3)
    if not (accuracy_ok and loss_ok):
        fail("wrong-test-metrics", observed=f"the report gives test accuracy {reported['accuracy']}, loss {reported['loss']}",
             expected=f"accuracy {scores['accuracy']:.4g}, loss {scores['loss']:.4g}: the model evaluated on the whole "
             "test set given, in the run's precision", cause="metrics of another data set, of part of the test set, "
             "or of another model", where="evaluate(run['model'], DataLoader(test_set, ...), ..., "
             "precision=run['precision'])")
    if "## Precision" not in text or "fp32:" not in text:
        _missing("missing-precision", "precision section (which operations ran in fp32 under autocast)",
                 "op_dtypes=observe_op_dtypes(model, images, precision=..., targets=..., loss_fn=...)")
    if "best.pt" not in text:
        _missing("missing-best-checkpoint", "path of the best checkpoint", "best_checkpoint=checkpoint_dir / 'best.pt'")


@register(
    "10-report",
    hints=(
        "harness.report.write_run_report writes every section it is given: give it the held-out test metrics, "
        "the saved curves, the operations autocast ran in fp32, the environment and best.pt.",
        "scores = evaluate(model, DataLoader(test_set, batch_size=256), loss_fn=nn.CrossEntropyLoss(), metrics="
        "{'accuracy': accuracy}, precision=run['precision']); curves = plot_history(history, out_dir / 'curves.png') "
        "(save it); op_dtypes = observe_op_dtypes(model, x, precision=..., targets=y, loss_fn=...); return "
        "write_run_report(out_dir / 'report.md', history, test_metrics=scores, best_checkpoint=..., op_dtypes=..., "
        "environment=environment_report(device), curves=out_dir / 'curves.png')",
    ),
)
def check_report(write_capstone_report: Callable[..., Any], *, hidden: bool) -> str:
    """Give the student's function a real run and its test set; read every section of the report written."""
    with tempfile.TemporaryDirectory(prefix="check-10-report-") as tmp, _rng_kept():
        root = Path(tmp)
        run, test, scores = _report_run(root / "run", hidden)
        path = write_capstone_report(run, test, root / "report")
        if path is None or not Path(path).is_file():
            fail("no-report", observed=f"write_capstone_report returned {path!r}", expected="the path of the report written",
                 cause="the report is not written, or its path not returned", where="return write_run_report(...)")
        path = Path(path)
        _check_report_text(path.read_text(), path.parent, run, scores, len(test))
    return "environment, configuration, history, curves, held-out test metrics, precision and best checkpoint reported"
