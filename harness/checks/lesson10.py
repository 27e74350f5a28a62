"""Checks of lesson 10 (the capstone): each piece of the capstone run, then the run itself.

The probes run the student's pieces and record what they did as data: the precision chosen for described
devices, the optimizer's groups and the learning rate every step gets, the batches each of two real gloo ranks
(forked, `harness.launch.launch_forked`) reads, what the training runs wrote into their checkpoints and the
optimizer steps they took, where a run called with a made-up device (`meta`) put its model, the trained model's
outputs on images generated from the case, and the report's text. The judges rebuild the inputs and decide:
they recompute the reference precision, schedule and groups, compare the runs' weights, score the model's
outputs against labels only they hold, and evaluate the weights of the report's run on its test set themselves.
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

from harness import env
from harness.checks.lesson07 import warmup_cosine_reference
from harness.checks.param_groups import check_weight_decay, describe_groups, group_lr, group_of_each_parameter
from harness.contract.case import Case
from harness.contract.failure import CheckFailed, Hints, Requirement, fail
from harness.contract.registry import judges, register
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, shapes
from harness.env import select_device, supported_precisions
from harness.launch import LaunchError, launch_forked
from harness.repro import capture_rng_state, restore_rng_state
from harness.train import OffDeviceError

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
    ("cuda", _support(False, True, False), "a GPU whose GradScaler is unavailable"),
    ("cpu", _support(True, True, True), "a CPU whose autocast runs bf16"),
    ("cpu", _support(False, True, True), "a CPU without bf16 autocast (fp16 there is emulated, and slow)"),
    ("mps", _support(False, True, True), "an Apple GPU without bf16 (fp16 is only for CUDA here)"),
]
_HIDDEN_PRECISION_CASES = [
    ("mps", _support(True, True, True), "an Apple GPU with bf16"),
    ("cuda", _support(False, False, True), "a GPU whose fp16 autocast is unavailable"),
    ("cuda", _support(False, False, False), "a GPU without autocast"),
    ("cpu", _support(False, False, False), "a CPU without autocast"),
]


def _precision_failure(got: Any, expected: str, device_type: str, precisions: dict[str, bool], what: str) -> NoReturn:
    seen = f"choose_precision({device_type!r}, {precisions}) returned {got!r} for {what}"
    if got not in PRECISIONS:
        fail("not-a-precision", observed=seen,
             expected=f"one of the strings {PRECISIONS} that fit(precision=...) takes",
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
        missing = " and ".join(f"precisions[{k!r}]" for k in ("fp16_autocast", "grad_scaler") if not precisions[k])
        fail("fp16-without-scaler", observed=seen, expected=f"{expected!r}: {missing} is False",
             cause=f"fp16 chosen although {missing} is False: fp16 needs both autocast and a GradScaler (without "
             "loss scaling, small gradients underflow to zero)", where="require precisions['fp16_autocast'] and "
             "precisions['grad_scaler'] for fp16")
    fail("no-amp", observed=seen, expected=f"{expected!r}",
         cause="mixed precision left off where the device supports it: bf16 where bf16 autocast works, else fp16 "
         "with a GradScaler on a CUDA GPU", where="the order of the tests in choose_precision")


@register(
    "10-precision",
    hints=Hints(
        nudge="Three outcomes, tested in order: bf16 if the device's autocast supports it; otherwise fp16, but only "
        "on a CUDA GPU where fp16 autocast and the GradScaler both work; otherwise fp32.",
        concept="bf16 has float32's range and needs no scaler: first choice wherever autocast runs it. fp16 needs a "
        "GradScaler and is only worth it on CUDA tensor cores; fp16 on a CPU is emulated, slower than fp32.",
        solution="if precisions['bf16_autocast']: return 'bf16'; if device_type == 'cuda' and "
        "precisions['fp16_autocast'] and precisions['grad_scaler']: return 'fp16'; return 'fp32'",
        section="2. Precision: ask the device"),
    requires={
        "not-a-precision": Requirement(
            "returns one of the strings 'bf16', 'fp16', 'fp32' (the names fit(precision=...) takes)",
            hint="fit(precision=...) takes a name, not a dtype: which three strings does the exercise list?"),
        "bf16-unsupported": Requirement(
            "bf16 only where precisions['bf16_autocast'] is True",
            hint="A T4 is a CUDA GPU without native bf16: which entry of precisions tells you bf16 works?"),
        "fp16-over-bf16": Requirement(
            "bf16 before fp16 wherever bf16 autocast works",
            hint="When both work, which one needs no GradScaler and cannot overflow? Test that one first."),
        "fp16-off-cuda": Requirement(
            "fp16 only on a CUDA GPU (device_type == 'cuda')",
            hint="On a CPU or an Apple GPU fp16 is no training option here: which device type may get fp16?"),
        "fp16-without-scaler": Requirement(
            "fp16 only where both fp16 autocast and the GradScaler work",
            hint="fp16 without loss scaling loses small gradients: which two entries must both be True?"),
        "no-amp": Requirement(
            "mixed precision wherever the device supports it (bf16, else fp16 on CUDA), fp32 otherwise",
            hint="fp32 is the last resort: which devices of the check support bf16 or fp16 with a scaler?"),
    },
)
def probe_precision(choose_precision: Callable[[str, dict[str, bool]], str], *, case: Case) -> dict:
    """Ask for the precision of each described device, then of this machine's device (recorded with its support)."""
    answers = [choose_precision(device_type, dict(precisions)) for device_type, precisions, _ in _precision_cases(case)]
    device = select_device()
    precisions = supported_precisions(device)
    return {"answers": answers, "machine": {"device": str(device), "device_type": device.type,
                                            "precisions": dict(precisions),
                                            "answer": choose_precision(device.type, dict(precisions))}}


def _precision_cases(case: Case) -> list[tuple[str, dict[str, bool], str]]:
    return _PRECISION_CASES + (_HIDDEN_PRECISION_CASES if case.hidden else [])


def _support_of(value: Any) -> dict[str, bool]:
    """A recorded support dict, validated: the keys supported_precisions returns, with bool values."""
    if not (isinstance(value, dict) and set(value) == {"fp32", "bf16_autocast", "fp16_autocast", "grad_scaler"}
            and all(isinstance(v, bool) for v in value.values())):
        raise ValueError("the recorded precision support is not supported_precisions' dict")
    return value


@judges("10-precision")
def judge_precision(seen: dict, *, case: Case) -> str:
    """Described devices, then this machine's own device as supported_precisions reports it."""
    machine = seen["machine"]
    if not (isinstance(machine["device"], str) and machine["device_type"] in ("cpu", "cuda", "mps", "xpu")):
        raise ValueError("the recorded device is not a device")
    own = (machine["device_type"], _support_of(machine["precisions"]), f"this machine's {machine['device']}")
    cases = _precision_cases(case) + [own]
    for (device_type, precisions, what), got in zip(cases, [*seen["answers"], machine["answer"]], strict=True):
        expected = reference_precision(device_type, precisions)
        if got != expected:
            _precision_failure(got, expected, device_type, precisions, what)
    return f"the right precision for {len(cases)} devices, this machine's {machine['device']} included"


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


def _optimizer_model(case: Case, freeze_first: bool) -> nn.Module:
    """A small CNN with a buffer, a bias-free conv, norms and biases (its first conv frozen if asked)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seeded(0))
        model = nn.Sequential(
            _Buffered(), nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 5),
        )
    if freeze_first:
        model[1].requires_grad_(False)
    return model


def _optimizer_settings(case: Case) -> list[tuple[float, float, int, int, bool]]:
    """(lr, weight_decay, warmup_steps, total_steps, freeze the first conv)."""
    visible = [(1e-2, 0.05, 5, 40, False), (3e-3, 0.1, 0, 25, True)]  # the second: no warm-up, a frozen layer
    if case.hidden:  # other lengths, no weight decay at all
        return [*visible, (2e-2, 0.0, 7, 60, False), (5e-3, 0.02, 3, 30, True)]
    return visible


def _record_optimizer(model: nn.Module, result: Any, total: int) -> dict[str, Any]:
    """What make_optimizer returned, as data: the optimizer's kind and groups, whether the scheduler drives it,
    and the lr of every group at each of total + 3 optimizer steps (no gradients: nothing moves)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return {"returned": type(result).__name__}
    optimizer, scheduler = result
    record: dict[str, Any] = {"returned": "pair", "optimizer": type(optimizer).__name__,
                              "adamw": isinstance(optimizer, torch.optim.AdamW)}
    if not isinstance(optimizer, torch.optim.Optimizer):
        return record
    record["groups"] = describe_groups(model, optimizer.param_groups)
    record["drives_optimizer"] = getattr(scheduler, "optimizer", None) is optimizer
    if record["drives_optimizer"]:
        record["lrs"] = []
        for _ in range(total + 3):
            record["lrs"].append([group["lr"] for group in optimizer.param_groups])
            optimizer.step()
            scheduler.step()
    return record


def _check_groups(model: nn.Module, record: dict[str, Any], lr: float, weight_decay: float) -> None:
    if record["adamw"] is not True:
        fail("not-adamw", observed=f"a {record['optimizer']}", expected="torch.optim.AdamW",
             cause="Adam's weight_decay adds an L2 term to the gradient, which Adam's per-weight scaling then "
             "weakens; AdamW decays the weights directly (decoupled), as intended",
             where="torch.optim.AdamW(groups, lr=lr)")
    for name, group in group_of_each_parameter(model, record["groups"]).items():
        check_weight_decay(model, name, group, weight_decay, default=0.01, default_is="AdamW's default")
        peak = group_lr(group, name, initial=True)
        if not math.isclose(peak, lr, rel_tol=1e-9):
            fail("wrong-lr", observed=f"{name}'s group has base lr {peak}", expected=f"{lr} in every group",
                 cause="the groups' lr is not the lr argument", where="AdamW(groups, lr=lr)")


def _check_schedule(record: dict[str, Any], lr: float, warmup: int, total: int) -> None:
    if record["drives_optimizer"] is not True:
        fail("scheduler-other-optimizer", observed="the scheduler was not built on the optimizer returned with it",
             expected="scheduler.optimizer is optimizer", cause="a scheduler built on another optimizer changes "
             "nothing that trains", where="build the scheduler from the optimizer you return")
    for step, used in zip(range(total + 3), record["lrs"], strict=True):
        expected = lr * warmup_cosine_reference(step, warmup, total)
        numbers = isinstance(used, list) and all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in used)
        if not (numbers and used):
            raise ValueError(f"the lrs of step {step} are not a list of numbers")
        if all(math.isclose(u, expected, rel_tol=1e-6, abs_tol=1e-12) for u in used):
            continue
        where = f"optimizer step {step} of a schedule with warmup_steps={warmup}, total_steps={total}, lr={lr}"
        observed = f"{where} used lr {used[0]:.6g}" if len(set(used)) == 1 else f"{where} used lrs {used}"
        if step < warmup:
            from_zero = step == 0 and all(abs(u) < 1e-12 for u in used)
            fail("warmup-wrong", observed=observed,
                 expected=f"{expected:.6g} = lr * (step + 1) / warmup_steps (lr / warmup_steps at step 0: the first "
                 "step already trains)",
                 cause="the ramp starts at 0: the first step trains with lr 0 (step / warmup_steps where lesson 07's "
                 "factor is (step + 1) / warmup_steps)" if from_zero
                 else "no warm-up, or a ramp that is not (step + 1) / warmup_steps",
                 where="the warm-up branch of the factor")
        if step <= total:
            fail("cosine-wrong", observed=observed, expected=f"{expected:.6g} = lr * 0.5 * (1 + cos(pi * progress)), "
                 f"progress = (step - warmup_steps) / (total_steps - warmup_steps)",
                 cause="the cosine measured from step 0 instead of the end of warm-up, the wrong length, or a "
                 "scheduler stepped by something else", where="the cosine branch of the factor")
        fail("rises-after-total", observed=observed,
             expected="0: past total_steps the lr stays at the end of the cosine",
             cause="progress is not clamped at 1, so the cosine comes back up", where="min(1.0, progress)")


@register(
    "10-optimizer",
    hints=Hints(
        nudge="Two groups of the trainable parameters: matrices and kernels (p.ndim >= 2) with weight decay, biases "
        "and normalisation weights (ndim < 2) without. Then a LambdaLR whose factor is lesson 07's "
        "warm-up-then-cosine.",
        concept="AdamW decays the weights directly (decoupled); decay belongs on matrices and kernels only. The "
        "schedule counts optimizer steps: (step + 1) / warmup_steps during the warm-up, then 0.5 * (1 + cos(pi * "
        "progress)) with progress measured from the end of the warm-up and clamped at 1.",
        solution="decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]; no_decay = [... "
        "p.ndim < 2]; optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': weight_decay}, {'params': "
        "no_decay, 'weight_decay': 0.0}], lr=lr); factor(step) = (step + 1) / warmup_steps if step < warmup_steps "
        "else 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))); "
        "return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)",
        section="3. The optimizer: parameter groups, warm-up, cosine"),
    requires={
        "not-a-pair": Requirement("returns (optimizer, scheduler)",
                                  hint="fit needs both objects: does your return statement give two?"),
        "not-adamw": Requirement("the optimizer is torch.optim.AdamW",
                                 hint="Adam and AdamW differ in how weight_decay acts: which one decouples it?"),
        "frozen-params-included": Requirement(
            "only trainable parameters (requires_grad) in the groups",
            hint="The check freezes a layer: what tells you a parameter will never get a gradient?"),
        "missing-params": Requirement(
            "every trainable parameter is in a group",
            hint="List model.named_parameters(): which kind of parameter did none of your groups take?"),
        "decay-on-bias-or-norm": Requirement(
            "no weight decay on biases and normalisation weights (ndim < 2)",
            hint="A BatchNorm's scale is not called 'bias', but it is 1-D: what property sorts it with the biases?"),
        "no-decay-on-weights": Requirement(
            "weight_decay on every matrix and kernel (ndim >= 2)",
            hint="Print each group's weight_decay: is the decay group's value the weight_decay argument?"),
        "wrong-lr": Requirement("every group at learning rate lr",
                                hint="Does any group set its own 'lr'? Every group trains at the lr argument."),
        "scheduler-other-optimizer": Requirement(
            "the scheduler drives the optimizer returned with it",
            hint="Which optimizer did you give LambdaLR? It must be the very object you return."),
        "warmup-wrong": Requirement(
            "warm-up: lr * (step + 1) / warmup_steps for step < warmup_steps (the first step already trains)",
            hint="Print the factor at steps 0, 1 and warmup_steps - 1: what should step 0 give, and which step "
            "reaches the peak?"),
        "cosine-wrong": Requirement(
            "then lr * 0.5 * (1 + cos(pi * progress)), progress from the end of the warm-up to total_steps",
            hint="At step warmup_steps the factor is 1 and at total_steps it is 0: does your progress start and "
            "end there?"),
        "rises-after-total": Requirement(
            "the lr stays at 0 after total_steps",
            hint="Print the factor at total_steps + 2: the cosine must not come back up."),
    },
)
def probe_optimizer(make_optimizer: Callable[..., tuple[torch.optim.Optimizer, Any]], *, case: Case) -> dict:
    """Call make_optimizer on a small CNN with norms, biases and a buffer; record its groups and every step's lr."""
    records = []
    with _rng_kept():
        for lr, weight_decay, warmup, total, freeze_first in _optimizer_settings(case):
            model = _optimizer_model(case, freeze_first)
            result = make_optimizer(model, lr=lr, weight_decay=weight_decay, warmup_steps=warmup, total_steps=total)
            records.append(_record_optimizer(model, result, total))
            if records[-1]["returned"] != "pair":
                break
    return {"settings": records}


@judges("10-optimizer")
def judge_optimizer(seen: dict, *, case: Case) -> str:
    """The groups of a small CNN with norms, biases and a buffer; the lr of every step of the schedule."""
    for (lr, weight_decay, warmup, total, freeze_first), record in zip(_optimizer_settings(case), seen["settings"],
                                                                       strict=True):
        if record["returned"] != "pair":
            fail("not-a-pair", observed=f"make_optimizer returned a {record['returned']}",
                 expected="(optimizer, scheduler)", cause="only one of the two returned, or another object",
                 where="return optimizer, scheduler")
        _check_groups(_optimizer_model(case, freeze_first), record, lr, weight_decay)
        _check_schedule(record, lr, warmup, total)
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


def _loader_worker(train_loader: Callable[..., DataLoader], n: int, batch_size: int,
                   seed: int) -> list[list[list[int]]]:
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


def _batches(value: Any) -> list[list[int]]:
    """Recorded batches of sample indices, validated."""
    if not (isinstance(value, list) and all(isinstance(batch, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in batch) for batch in value)):
        raise ValueError("the recorded batches are not lists of sample indices")
    return value


def _check_batches(epochs: list[list[int]], batch_size: int, n: int, who: str) -> None:
    sizes = sorted({len(batch) for batches in epochs for batch in _batches(batches)})
    if sizes and max(sizes) != batch_size:
        fail("wrong-batch-size", observed=f"{who} batches of {max(sizes)} samples", expected=f"{batch_size} per rank",
             cause="batch_size is the per-rank batch: keep it as given", where="DataLoader(..., batch_size=batch_size)")
    if len(sizes) > 1:
        fail("partial-last-batch", observed=f"{who} batch sizes {sizes} (n={n}, batch_size={batch_size})",
             expected=f"only full batches of {batch_size}",
             cause="the last, incomplete batch is kept: a batch of one sample makes BatchNorm fail in training "
             "mode, and small last batches give noisy steps", where="DataLoader(..., drop_last=True)")


def _check_sharded(results: list[list[list[list[int]]]], n: int, batch_size: int) -> None:
    if not (isinstance(results, list) and len(results) == 2 and all(isinstance(r, list) and r for r in results)):
        raise ValueError("the recorded ranks are not two lists of epochs")
    for rank, epochs in enumerate(results):
        _check_batches(epochs, batch_size, n, f"rank {rank} read")
    shards = [set(sum(epochs[0], [])) for epochs in results]
    if shards[0] & shards[1] or len(shards[0] | shards[1]) < 2 * ((n // 2) // batch_size) * batch_size:
        fail("overlapping-shards", observed=f"under 2 ranks, rank 0 read {len(shards[0])} samples and rank 1 "
             f"{len(shards[1])}, {len(shards[0] & shards[1])} of them the same, from {n}",
             expected="disjoint halves: each rank its own shard",
             cause="every rank reads the whole dataset (a shuffled DataLoader, or a sampler that ignores the rank), "
             "or the ranks shuffle with different seeds (seed + rank) so their shards overlap",
             where="DataLoader(dataset, batch_size, sampler="
             "DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), seed=seed), drop_last=True)")


def _record_single_process(train_loader: Callable[..., DataLoader], n: int, batch_size: int, seed: int) -> dict:
    """The batches one process reads: epochs 0 and 1 of a loader, epoch 0 of a second loader built with the same
    seed from another global RNG state, and of a third built with seed + 1; and the loader's sampler."""
    loader = train_loader(_index_dataset(n), batch_size, seed=seed)
    record: dict[str, Any] = {"first": _epoch_batches(loader, 0), "sampler": type(loader.sampler).__name__,
                              "has_set_epoch": getattr(loader.sampler, "set_epoch", None) is not None,
                              "workers": loader.num_workers}
    record["second"] = _epoch_batches(loader, 1)
    torch.default_generator.seed()  # a resumed run starts from some other global RNG state
    record["again"] = _epoch_batches(train_loader(_index_dataset(n), batch_size, seed=seed), 0)
    record["other"] = _epoch_batches(train_loader(_index_dataset(n), batch_size, seed=seed + 1), 0)
    return record


def _check_single_process(record: dict[str, Any], n: int, batch_size: int, seed: int) -> None:
    workers = record["workers"]
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise ValueError("the recorded number of workers is not an int")
    if workers != 0:
        fail("uses-workers", observed=f"the loader starts num_workers={workers} worker processes",
             expected="num_workers=0: batches made in the training process",
             cause="num_workers set on the DataLoader: every rank (and every resumed run) would fork worker "
             "processes for in-memory tensors, which costs more than it saves",
             where="DataLoader(..., num_workers=0), the default")
    first = _batches(record["first"])
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
             cause="shuffle=False given to the sampler, or a sequential sampler",
             where="the sampler's shuffle (DistributedSampler shuffles by default)")
    if record["has_set_epoch"] is not True:
        fail("no-set-epoch", observed=f"the loader's sampler ({record['sampler']}) has no set_epoch",
             expected="a DistributedSampler: fit calls sampler.set_epoch(epoch) to reshuffle each epoch",
             cause=f"a {record['sampler']} instead of a DistributedSampler",
             where="sampler=DistributedSampler(dataset, seed=seed)")
    if sum(_batches(record["second"]), []) == order:
        fail("same-order-every-epoch", observed="set_epoch(1) gives the order of epoch 0",
             expected="a new order every epoch", cause="the sampler ignores its epoch",
             where="torch.utils.data.DistributedSampler seeds its shuffle with seed + epoch")
    if sum(_batches(record["again"]), []) != order:
        fail("order-not-reproducible", observed="two loaders built with the same seed read epoch 0 in different orders",
             expected="the order a function of (seed, epoch) only",
             cause="the shuffle draws from the global RNG or an unsaved generator: a resumed run would read other "
             "batches than the run it continues", where="DistributedSampler(dataset, seed=seed): its order is "
             "fixed by seed and epoch, nothing to save in a checkpoint")
    if sum(_batches(record["other"]), []) == order:
        fail("seed-ignored", observed=f"seeds {seed} and {seed + 1} give the same order",
             expected="the seed picks the order",
             cause="the seed argument is not passed on", where="DistributedSampler(dataset, seed=seed)")


def _loader_settings(case: Case) -> list[tuple[int, int, int]]:
    """(samples, batch_size, seed)."""
    settings = [(100, 16, 0)] if not case.hidden else [(75, 8, 5), (130, 32, 11)]
    return [(n, batch_size, case.seeded(seed)) for n, batch_size, seed in settings]


@register(
    "10-train-loader",
    hints=Hints(
        nudge="One loader for one process and for N: a DistributedSampler given the rank and world size of the "
        "process group (harness.distributed: a world of one without a group), seeded with seed; drop the last, "
        "incomplete batch.",
        concept="A DistributedSampler shards by rank and shuffles with seed + epoch (fit calls set_epoch), so the "
        "order is a function of (seed, epoch) and nothing needs saving; drop_last keeps every batch full.",
        solution="sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), "
        "shuffle=True, seed=seed); return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)",
        section="4. One training loader for one process and for many"),
    requires={
        "overlapping-shards": Requirement(
            "under N ranks, each rank reads its own disjoint shard",
            hint="On 2 ranks, what makes rank 0 and rank 1 read different samples? shuffle=True alone does not."),
        "wrong-batch-size": Requirement("batch_size samples per batch on each rank",
                                        hint="batch_size is already per rank: is it changed anywhere?"),
        "partial-last-batch": Requirement("the last incomplete batch dropped",
                                          hint="Which DataLoader option drops the last, smaller batch?"),
        "uses-workers": Requirement("no worker processes",
                                    hint="Which DataLoader option starts worker processes? Leave it at its default."),
        "wrong-coverage": Requirement(
            "a single process reads the whole dataset (a world of one)",
            hint="Without a process group, how many replicas are there? Ask harness.distributed, do not assume."),
        "not-shuffled": Requirement("shuffled", hint="Does your sampler shuffle? Print the first batch."),
        "no-set-epoch": Requirement(
            "the sampler is a DistributedSampler (fit calls its set_epoch every epoch)",
            hint="fit reshuffles through loader.sampler.set_epoch(epoch): which sampler has that method?"),
        "same-order-every-epoch": Requirement(
            "a new order every epoch",
            hint="Read two epochs, calling set_epoch(0) then set_epoch(1): is the order the same?"),
        "order-not-reproducible": Requirement(
            "the order depends on seed and epoch only, not on the global random state",
            hint="Build the loader twice after torch.seed(): if the order changes, what is it drawing from?"),
        "seed-ignored": Requirement("the seed argument picks the order",
                                    hint="Where does the seed argument go? Seeds 0 and 1 give the same order."),
    },
)
def probe_train_loader(train_loader: Callable[..., DataLoader], *, case: Case) -> dict:
    """Read the loader on 2 forked gloo ranks, then in this process; record the batches every reader got."""
    records = []
    with _rng_kept():
        for n, batch_size, seed in _loader_settings(case):
            records.append({"ranks": _on_two_ranks(_loader_worker, train_loader, n, batch_size, seed),
                            "single": _record_single_process(train_loader, n, batch_size, seed)})
    return {"settings": records}


@judges("10-train-loader")
def judge_train_loader(seen: dict, *, case: Case) -> str:
    """Disjoint shards on 2 ranks, one process reads everything, full batches, order set by seed and epoch."""
    for (n, batch_size, seed), record in zip(_loader_settings(case), seen["settings"], strict=True):
        _check_sharded(record["ranks"], n, batch_size)
        _check_single_process(record["single"], n, batch_size, seed)
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


def _train_config(case: Case) -> tuple[dict[str, Any], int, int]:
    """The config, the number of samples and the epoch after which the run is interrupted."""
    if case.hidden:
        return dict(epochs=3, batch_size=16, lr=5e-3, weight_decay=0.1, warmup_fraction=0.2, max_grad_norm=0.5,
                    patience=1, width=4, seed=case.seeded(11)), 80, 1
    return dict(epochs=4, batch_size=16, lr=3e-3, weight_decay=0.05, warmup_fraction=0.25, max_grad_norm=1.0,
                patience=2, width=4, seed=case.seeded(3)), 96, 2


def _weights(state: Any) -> dict[str, torch.Tensor]:
    """The floating-point tensors of a recorded state_dict, validated."""
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise ValueError("a recorded state_dict is not a dict of tensors")
    return {k: v.detach().float() for k, v in state.items() if v.is_floating_point()}


def _max_difference(a: Any, b: Any) -> float:
    a, b = _weights(a), _weights(b)
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return math.inf
    return max((float((a[k] - b[k]).abs().max()) for k in a if a[k].numel()), default=0.0)


def _state(state: Any) -> dict[str, torch.Tensor] | None:
    """A state_dict as data (its tensors, on the CPU), or None if it is not a dict of tensors."""
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        return None
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def _run(train_capstone: Callable[..., Any], data: tuple[Any, Any], out: Path, config: dict[str, Any],
         **options: Any) -> tuple[Any, int]:
    """Call the student's function from a scrambled global RNG state; return its result and its steps."""
    torch.default_generator.seed()  # the notebook's global RNG state is anyone's: the run must seed itself
    with _StepCounter() as steps:
        result = train_capstone(data[0], data[1], out, dict(config), device="cpu", **options)
    return result, steps.count


def _checkpoint(path: Path) -> dict[str, Any]:
    """What the checks read from a checkpoint fit wrote: its epoch, step, config, scheduler steps and weights."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    scheduler = saved.get("scheduler")
    return {"epoch": saved.get("epoch"), "global_step": saved.get("global_step"), "config": saved.get("config"),
            "scheduler_steps": scheduler.get("last_epoch") if isinstance(scheduler, dict) else None,
            "model": _state(saved.get("model"))}


class _FirstForward(Exception):
    """Raised from the first forward of a run on the made-up device: where the model is is all the check needs."""


@contextlib.contextmanager
def _meta_selectable() -> Iterator[None]:
    """Let select_device accept "meta" for a while: a device no machine trains on, so a run that ignores its
    `device` argument shows it on any machine, GPU or not."""
    known = env.KNOWN_DEVICE_TYPES
    env.KNOWN_DEVICE_TYPES = (*known, "meta")
    try:
        yield
    finally:
        env.KNOWN_DEVICE_TYPES = known


def _record_device(train_capstone: Callable[..., Any], data: tuple[Any, Any], out: Path,
                   config: dict[str, Any]) -> dict[str, Any]:
    """Call train_capstone with device="meta" and stop it at the model's first forward: record the devices of
    the model's parameters there, or what the call raised before (fit refuses a model partly off its device)."""
    record: dict[str, Any] = {}

    def first_forward(module: nn.Module, inputs: tuple[Any, ...]) -> None:
        record["params"] = sorted({str(p.device) for p in module.parameters()})
        raise _FirstForward

    handle = nn.modules.module.register_module_forward_pre_hook(first_forward)
    try:
        with _meta_selectable():
            train_capstone(data[0], data[1], out, dict(config), device="meta")
    except _FirstForward:
        pass
    except OffDeviceError as error:  # fit refused the model: part of it is off the device
        record["off_device"] = [error.name, str(error.found)]
    except Exception:  # anything else raised on the made-up device is no evidence about the student's run
        record["raised"] = True
    finally:
        handle.remove()
    return record


def _check_device(record: Any) -> None:
    """The model trains on the device given: every parameter, and every buffer (fit refuses it otherwise)."""
    if not isinstance(record, dict):
        raise ValueError("the recorded devices are not a dict")
    off = record.get("off_device")
    if off is not None:
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(part, str) for part in off)):
            raise ValueError("the recorded off-device tensor is not [name, device]")
        name, found = off
        fail("ignores-device", observed=f"called with device='meta', fit refused the model: {name} is on {found}",
             expected="the whole model on the device given, Standardize's mean and std included",
             cause=f"only part of the model moved to the device ({name} stayed behind), for example "
             "capstone_cnn(...).to(device) inside the Sequential instead of the Sequential moved",
             where="move the whole nn.Sequential: nn.Sequential(Standardize(...), capstone_cnn(...)).to(device)")
    if record.get("raised"):
        return  # no evidence: the call raised something else on the made-up device
    params = record.get("params")
    if params is None:
        return  # no forward reached: nothing observed
    if not (isinstance(params, list) and all(isinstance(d, str) for d in params)):
        raise ValueError("the recorded devices are not a list of names")
    if params and params != ["meta"]:
        fail("ignores-device", observed=f"called with device='meta', train_capstone trained a model whose parameters "
             f"are on {', '.join(params)}", expected="every parameter on the device given",
             cause="the device argument is not used: select_device() called without it, another device chosen, or "
             "the model never moved with .to(device)",
             where="device = select_device(device), then nn.Sequential(...).to(device) before make_optimizer")


def _record_straight(result: Any, out: Path, steps: int) -> dict[str, Any]:
    """What the uninterrupted run returned and wrote."""
    is_dict = isinstance(result, dict)
    model = result.get("model") if is_dict else None
    record: dict[str, Any] = {
        "returned": type(result).__name__, "keys": sorted(map(str, result)) if is_dict else None,
        "is_run": is_dict and isinstance(model, nn.Module) and isinstance(result.get("history"), pd.DataFrame)
        and result.get("precision") in PRECISIONS,
        "files": sorted(p.name for p in out.iterdir() if p.is_file()) if out.is_dir() else [], "steps": steps,
    }
    if record["is_run"] and {"last.pt", "best.pt"} <= set(record["files"]):
        record.update(model=_state(model.state_dict()), last=_checkpoint(out / "last.pt"),
                      best=_checkpoint(out / "best.pt"))
    return record


def _record_resume(train_capstone: Callable[..., Any], data: tuple[Any, Any], root: Path, config: dict[str, Any],
                   stop_at: int, straight: dict[str, Any]) -> dict[str, Any]:
    """Interrupt a run after epoch `stop_at`, resume it, and (if its weights differ from the uninterrupted run's)
    make a second fresh run: record whether the interruption stopped it, the resumed call's steps and weights."""
    record: dict[str, Any] = {}
    try:
        _run(train_capstone, data, root / "resumed", config, on_epoch_end=_interrupt_after(stop_at))
    except _Interrupted:
        record["interrupted"] = True
    else:
        record["interrupted"] = False
        return record
    try:
        _, record["steps"] = _run(train_capstone, data, root / "resumed", config, resume=True)
    except FileExistsError as error:  # fit refuses to start a new run over the interrupted one
        record["refused"] = str(error)[:300]
        return record
    record["resumed"] = _checkpoint(root / "resumed" / "last.pt")["model"]
    if not _same(record["resumed"], straight["last"]["model"]):
        _run(train_capstone, data, root / "again", config)
        record["again"] = _checkpoint(root / "again" / "last.pt")["model"]
    return record


def _same(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor] | None) -> bool:
    """Whether two state_dicts hold equal tensors (the probe's cue for a second fresh run; the judge compares)."""
    return a is not None and b is not None and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _check_result(record: dict[str, Any], out: str) -> dict[str, Any]:
    if record["is_run"] is not True:
        fail("not-a-run", observed=f"train_capstone returned {record['returned']}"
             + (f" with keys {record['keys']}" if record["keys"] is not None else ""),
             expected="a dict with 'model' (the trained nn.Module), 'history' (fit's DataFrame), 'precision'",
             cause="a different return value", where="the return statement of train_capstone")
    missing = [name for name in ("last.pt", "best.pt", "history.csv", "config.json") if name not in record["files"]]
    if missing:
        fail("missing-checkpoints", observed=f"{out}/ lacks {missing}", expected="last.pt, best.pt, history.csv, "
             "config.json written into out_dir",
             cause="fit was not given checkpoint_dir=out_dir (no checkpoints, or written to another folder)",
             where="fit(..., checkpoint_dir=out_dir)")
    return record["last"]


def _check_settings(last: dict[str, Any], config: dict[str, Any], precisions: dict[str, bool]) -> None:
    """What fit recorded about the run in last.pt: precision, clipping, schedule, early stopping."""
    saved = last["config"]
    if not isinstance(saved, dict):
        raise ValueError("last.pt's config is not a dict")
    expected_precision = reference_precision("cpu", precisions)
    if saved.get("precision") != expected_precision:
        fail("wrong-precision", observed=f"the run trained in {saved.get('precision')!r} on the CPU",
             expected=f"{expected_precision!r}, what choose_precision picks for this device",
             cause="the precision is not passed to fit (its default is fp32), or it is not "
             "choose_precision(device.type, supported_precisions(device))",
             where="fit(..., precision=choose_precision(device.type, supported_precisions(device)))")
    if saved.get("max_grad_norm") != config["max_grad_norm"]:
        fail("no-clipping", observed=f"fit ran with max_grad_norm={saved.get('max_grad_norm')!r}",
             expected=f"{config['max_grad_norm']} (config['max_grad_norm'])",
             cause="max_grad_norm not passed to fit" if saved.get("max_grad_norm") is None
             else "a max_grad_norm other than config['max_grad_norm']",
             where="fit(..., max_grad_norm=config['max_grad_norm'])")
    if saved.get("scheduler") is None:
        fail("no-scheduler", observed="the run had no learning-rate scheduler", expected="the warm-up-cosine "
             "scheduler of make_optimizer", cause="scheduler not passed to fit", where="fit(..., scheduler=scheduler)")
    scheduler_steps = last["scheduler_steps"]
    if saved.get("scheduler_interval") != "step" or scheduler_steps != last["global_step"] or scheduler_steps is None:
        fail("schedule-per-epoch", observed=f"the scheduler was stepped {scheduler_steps} times in "
             f"{last['global_step']} optimizer steps (scheduler_interval={saved.get('scheduler_interval')!r})",
             expected="once per optimizer step",
             cause="a schedule sized in optimizer steps stepped per epoch (scheduler_interval not 'step')",
             where="fit(..., scheduler_interval='step')")
    wanted = ("val_accuracy", "max", config["patience"])
    got = (saved.get("monitor"), saved.get("monitor_mode"), saved.get("early_stopping_patience"))
    if got != wanted:
        fail("wrong-early-stopping", observed=f"monitor, mode, patience = {got}", expected=f"{wanted}",
             cause="no early stopping given to fit" if got == (None, None, None) else "early stopping watching "
             "another metric, in another mode or with another patience: best.pt must be the most accurate epoch",
             where="fit(..., metrics={'accuracy': accuracy}, early_stopping=EarlyStopping('val_accuracy', "
             "mode='max', patience=config['patience']))")
    if saved.get("epochs") != config["epochs"]:
        fail("wrong-epochs", observed=f"fit ran with epochs={saved.get('epochs')!r}", expected=f"{config['epochs']}",
             cause="epochs not taken from config", where="fit(..., epochs=config['epochs'])")


def _check_steps(counted: Any, config: dict[str, Any], n: int, what: str) -> None:
    expected = (config["patience"] + 1) * (n // config["batch_size"])
    if counted != expected:
        fail("wrong-step-count", observed=f"{counted} optimizer steps in {what}",
             expected=f"{expected}: {n // config['batch_size']} batches of config['batch_size']={config['batch_size']} "
             f"per epoch, and early stopping after epoch {config['patience'] + 1} (the validation accuracy of this "
             "check never improves after epoch 1)",
             cause="another batch size, or early stopping that does not stop",
             where="train_loader(train_set, config['batch_size'], seed=...) and the early stopping given to fit")


def _check_resume(record: dict[str, Any], config: dict[str, Any], n: int, stop_at: int,
                  straight_last: dict[str, Any]) -> None:
    if record.get("raised") is not None:
        fail("raised", observed=f"your code raised {record['raised']} in an interrupted or resumed run",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside train_capstone", where="train_capstone with "
             "on_epoch_end=... or resume=True")
    if record["interrupted"] is not True:
        fail("callback-ignored", observed=f"the run went on after on_epoch_end raised at epoch {stop_at}",
             expected="the exception to stop training, as a killed process would",
             cause="on_epoch_end is not passed to fit", where="fit(..., on_epoch_end=on_epoch_end)")
    if record.get("refused") is not None:
        fail("resume-ignored", observed=f"after an interruption at epoch {stop_at}, the resumed call started a new run "
             f"in out_dir, which fit refused: {record['refused']}", expected="the run to continue from last.pt",
             cause="resume is not passed to fit", where="fit(..., checkpoint_dir=out_dir, resume=resume)")
    remaining = (config["patience"] + 1 - stop_at) * (n // config["batch_size"])
    if record["steps"] != remaining:
        fail("resume-ignored", observed=f"after an interruption at epoch {stop_at}, the resumed call took "
             f"{record['steps']} optimizer steps", expected=f"{remaining}: only the epochs left", cause="the run "
             "restarted from scratch: resume is not passed to fit, or out_dir is not the checkpoint folder",
             where="fit(..., checkpoint_dir=out_dir, resume=resume)")
    difference = _max_difference(record["resumed"], straight_last["model"])
    if difference == 0:
        return
    if _max_difference(record["again"], straight_last["model"]) > 0:
        fail("not-seeded", observed="two fresh runs with the same config end with different weights",
             expected="identical runs: everything random is seeded from config['seed'] inside train_capstone",
             cause="the run is not seeded from config['seed'] before the model is built (no seed_everything, or "
             "another seed), so its initial weights and data order come from whatever state the global RNG was in",
             where="the first lines of train_capstone")
    fail("resume-not-exact", observed=f"interrupted after epoch {stop_at} and resumed, the final weights differ from "
         f"the uninterrupted run by up to {difference:.3g}", expected="identical weights",
         cause="the resumed run is built differently (another schedule length, data order or model) from the one "
         "it continues", where="build everything from config alone, the same way whether resuming or not")


@register(
    "10-train",
    hints=Hints(
        nudge="Compose, do not rewrite: seed, build the model (Standardize then capstone_cnn) on its device, "
        "make_optimizer with total_steps = epochs * len(train loader), the loaders, choose_precision, then one "
        "call to fit with every option, and load best.pt's weights before returning.",
        concept="fit does the loop; your function decides what it is given. A run resumes exactly only if it is "
        "rebuilt identically from config alone (seeded first) and fit gets checkpoint_dir and resume; the "
        "schedule counts optimizer steps, and best.pt (the most accurate epoch) is the model to return.",
        solution="seed_everything(config['seed']); model = nn.Sequential(Standardize(*normalization_stats("
        "train_set.tensors[0])), capstone_cnn(len(train_set.classes), config['width'])).to(device); loader = "
        "train_loader(train_set, config['batch_size'], seed=config['seed']); fit(model, loader, val_loader, "
        "loss_fn=nn.CrossEntropyLoss(), optimizer=..., epochs=config['epochs'], precision=..., "
        "max_grad_norm=config['max_grad_norm'], scheduler=scheduler, scheduler_interval='step', "
        "metrics={'accuracy': accuracy}, early_stopping=EarlyStopping('val_accuracy', mode='max', "
        "patience=config['patience']), checkpoint_dir=out_dir, resume=resume, on_epoch_end=on_epoch_end, "
        "progress=progress)",
        section="5. The training function"),
    requires={
        "not-a-run": Requirement(
            "returns {'model', 'history', 'precision', 'checkpoint_dir'}",
            hint="Step 7 of the exercise lists the dict to return: does yours hold the model, fit's history and "
            "the precision?"),
        "missing-checkpoints": Requirement(
            "checkpoints (last.pt, best.pt) and the history written into out_dir",
            hint="fit writes every file itself when it is told where: which of its arguments names the folder?"),
        "wrong-precision": Requirement(
            "trains in choose_precision(device.type, supported_precisions(device))",
            hint="Which precision did fit receive? Without the argument it trains in fp32."),
        "no-clipping": Requirement("gradients clipped at config['max_grad_norm']",
                                   hint="Which fit argument clips gradients, and where is its value in config?"),
        "no-scheduler": Requirement("the make_optimizer scheduler given to fit",
                                    hint="make_optimizer returned two objects: did fit get both?"),
        "schedule-per-epoch": Requirement(
            "the scheduler stepped once per optimizer step",
            hint="total_steps counts optimizer steps: how often must fit step the scheduler, then?"),
        "wrong-early-stopping": Requirement(
            "early stopping on val_accuracy, mode='max', patience=config['patience']",
            hint="best.pt is the most accurate epoch: which metric, and which direction, must EarlyStopping watch?"),
        "wrong-epochs": Requirement("config['epochs'] epochs", hint="Where does fit's epochs come from?"),
        "wrong-step-count": Requirement(
            "config['batch_size'] per batch, and training stops when early stopping says so",
            hint="Count the optimizer steps: batches per epoch times epochs run. Which of the two is off?"),
        "not-best-weights": Requirement(
            "the returned model holds best.pt's weights",
            hint="After fit, the model holds the last epoch's weights: which checkpoint must you load before "
            "returning?"),
        "callback-ignored": Requirement(
            "on_epoch_end passed through to fit",
            hint="The check interrupts a run from on_epoch_end: does your function hand it on?"),
        "resume-ignored": Requirement(
            "resume=True continues from out_dir's last.pt",
            hint="After an interruption, the resumed call trained every epoch again: which fit argument continues?"),
        "not-seeded": Requirement(
            "the run seeds itself from config['seed'] before building the model",
            hint="Two fresh runs of the same config end apart: what fixes the initial weights before the model is "
            "built?"),
        "resume-not-exact": Requirement(
            "an interrupted and resumed run ends with the weights of the uninterrupted one",
            hint="Is anything built differently when resume=True (loss, schedule, loader, model)? Build from config "
            "alone."),
        "ignores-device": Requirement(
            "the whole model (Standardize's buffers included) on `device`",
            hint="The check passed a device no machine has: where does your function use its device argument?"),
    },
)
def probe_train(train_capstone: Callable[..., dict[str, Any]], *, case: Case) -> dict:
    """A run straight through, then one interrupted and resumed: record what each returned, wrote and stepped."""
    config, n, stop_at = _train_config(case)
    data = (shapes(n, seed=config["seed"] + 40, size=16), _constant_accuracy_val())
    with tempfile.TemporaryDirectory(prefix="check-10-train-") as tmp, _rng_kept():
        root = Path(tmp)
        seen: dict[str, Any] = {"precisions": supported_precisions(torch.device("cpu"))}
        result, steps = _run(train_capstone, data, root / "straight", config)
        seen["straight"] = _record_straight(result, root / "straight", steps)
        seen["device"] = _record_device(train_capstone, data, root / "device", config)
        if "last" not in seen["straight"]:
            return seen  # the judge reports what is missing; a resumed run would only fail for the same reason
        resume: dict[str, Any] = {}
        try:
            resume.update(_record_resume(train_capstone, data, root, config, stop_at, seen["straight"]))
        except CheckFailed:
            raise
        except Exception as error:  # reported after what the uninterrupted run already shows
            resume["raised"] = f"{type(error).__name__}: {error}"[:2000]
        seen["resume"] = resume
    return seen


@judges("10-train")
def judge_train(seen: dict, *, case: Case) -> str:
    """Settings, files, best weights, exact resume: from the checkpoints, weights and step counts recorded."""
    config, n, stop_at = _train_config(case)
    straight = seen["straight"]
    last = _check_result(straight, "straight")
    _check_settings(last, config, _support_of(seen["precisions"]))
    _check_steps(straight["steps"], config, n, "the run")
    best = straight["best"]
    if _max_difference(straight["model"], best["model"]) > 0:
        fail("not-best-weights", observed=f"the returned model does not hold best.pt's weights (epoch "
             f"{best['epoch']}); the run ended at epoch {last['epoch']}",
             expected="the best epoch's weights: the model to evaluate and deploy",
             cause="the model is returned as the last epoch left it" if _max_difference(straight["model"],
             last["model"]) == 0 else "best.pt's weights are not loaded into the returned model",
             where="load_checkpoint(Path(out_dir) / 'best.pt', model=model) before returning")
    _check_resume(seen["resume"], config, n, stop_at, last)
    _check_device(seen["device"])
    return (f"precision, clipping, per-step schedule and early stopping as configured; best weights returned; "
            f"interrupted after epoch {stop_at} and resumed: identical to the run that never stopped; trains on "
            "the device it is given")


# ----------------------------------------------------------------------------------------------------
# 10-held-out
# ----------------------------------------------------------------------------------------------------
_CHUNK = 250  # held-out images per forward pass


def _held_out(case: Case) -> LabeledTensorDataset:
    """The grader's held-out images: shapes drawn from seeds the lesson never uses for training or validation."""
    count, seed = HELD_OUT[case.hidden]
    return shapes(count, seed=case.seeded(seed), size=32)


def _outputs(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """The model's outputs on `images`, chunk by chunk, in eval mode (its mode restored afterwards)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return [model(images[start : start + _CHUNK].to(device)).cpu() for start in range(0, len(images), _CHUNK)]
    finally:
        model.train(was_training)


@register(
    "10-held-out",
    hints=Hints(
        nudge="The grader draws its own shapes, never seen in training or validation: only a model that learned the "
        "shapes passes. Look at your curves: did validation accuracy still climb at the end (train longer, or a "
        "larger lr), or jump around (a smaller lr, more warm-up)?",
        concept="Held-out accuracy follows validation accuracy when the model takes raw images (Standardize inside "
        "it) and holds the best epoch's weights; it rises with enough optimizer steps at a good learning rate.",
        solution="CONFIG = dict(epochs=budget(full=8, grading=6), batch_size=32, lr=1e-2, weight_decay=0.05, "
        "warmup_fraction=0.1, max_grad_norm=1.0, patience=3, width=budget(full=16, grading=8), seed=0)",
        section="7. The real run"),
    requires={
        "not-a-run": Requirement("check receives the dict train_capstone returns",
                                 hint="check('10-held-out', run) takes the whole run dict, not the model alone."),
        "wrong-output-shape": Requirement(
            "the model maps N images to (N, 5) logits",
            hint="How many classes does the shapes data set have, and how many outputs does your model give?"),
        "below-threshold": Requirement(
            "at least 0.75 accuracy on the grader's held-out shapes",
            hint="Compare your run's best validation accuracy with the threshold: too low means train more or "
            "better; high means the returned model is not the validated one."),
    },
)
def probe_held_out(run: dict[str, Any], *, case: Case) -> dict:
    """Record run['model']'s outputs on the case's held-out images (their labels stay with the judge), and the
    validation accuracies of the run's history."""
    model = run.get("model") if isinstance(run, dict) else None
    if not isinstance(model, nn.Module):
        return {"received": type(run).__name__, "model": False}
    history = run.get("history")
    has_column = isinstance(history, pd.DataFrame) and "val_accuracy" in history
    validated = history["val_accuracy"].tolist() if has_column else None
    return {"received": type(run).__name__, "model": True, "outputs": _outputs(model, _held_out(case).tensors[0]),
            "val_accuracy": validated}


@judges("10-held-out")
def judge_held_out(seen: dict, *, case: Case) -> str:
    """Accuracy of run['model'] on shapes the grader generates from its own seed."""
    if seen["model"] is not True:
        fail("not-a-run", observed=f"check received {seen['received']}", expected="the dict train_capstone returns, "
             "with the trained 'model'", cause="another object passed", where="check('10-held-out', run)")
    images, labels = _held_out(case).tensors
    chunks = range(0, len(labels), _CHUNK)
    correct = 0
    for start, outputs in zip(chunks, seen["outputs"], strict=True):
        outputs = outputs.detach() if isinstance(outputs, torch.Tensor) else outputs
        expected_shape = (len(labels[start : start + _CHUNK]), len(SHAPE_CLASSES))
        if not isinstance(outputs, torch.Tensor) or tuple(outputs.shape) != expected_shape:
            shape = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
            fail("wrong-output-shape", observed=f"the model maps {tuple(images[:_CHUNK].shape)} images to {shape}",
                 expected=f"(N, {len(SHAPE_CLASSES)}) logits",
                 cause="the model was built for another number of classes, or returns something other than one row of "
             "logits per image",
                 where="capstone_cnn(len(train_set.classes), ...)")
        correct += int((outputs.float().argmax(1) == labels[start : start + _CHUNK]).sum())
    accuracy = correct / len(labels)
    if accuracy < ACCURACY_THRESHOLD:
        history = seen["val_accuracy"]
        numbers = isinstance(history, list) and history and all(isinstance(v, (int, float)) for v in history)
        validated = float(max(history)) if numbers else None
        mismatch = validated is not None and validated >= ACCURACY_THRESHOLD
        fail("below-threshold", observed=f"accuracy {accuracy:.3f} on {len(labels)} held-out images"
             + (f", while the best validation accuracy was {validated:.3f}" if validated is not None else ""),
             expected=f"at least {ACCURACY_THRESHOLD} (chance is {1 / len(SHAPE_CLASSES):.2f})",
             cause="the returned model does not behave like the validated one: it expects normalised images "
             "(normalisation done on the data, not inside the model), or it does not hold best.pt's weights"
             if mismatch else
             "the run did not learn enough: too few steps, a learning rate too small or too large, or a model "
             "too narrow", where="train_capstone's model" if mismatch else "CONFIG, then the curves of your run")
    return (f"accuracy {accuracy:.3f} on {len(labels)} held-out images the grader generated "
            f"(threshold {ACCURACY_THRESHOLD})")


# ----------------------------------------------------------------------------------------------------
# 10-report
# ----------------------------------------------------------------------------------------------------
def _report_sets(case: Case) -> tuple[int, int, list[LabeledTensorDataset]]:
    """The report run's seed, epochs, and its train, validation and test sets."""
    seed, epochs = (case.seeded(21), 3) if case.hidden else (case.seeded(7), 2)
    sizes = ((0, 96), (1, 48), (2, 60 if case.hidden else 40))
    return seed, epochs, [shapes(n, seed=seed + k, size=16) for k, n in sizes]


def _report_model() -> nn.Module:
    from harness.models import capstone_cnn

    return capstone_cnn(len(SHAPE_CLASSES), width=4)


def _report_run(root: Path, case: Case, precision: str) -> tuple[dict[str, Any], LabeledTensorDataset]:
    """A small real run made with fit (best weights loaded), and its test set."""
    from harness.checkpoint import load_checkpoint
    from harness.metrics import accuracy
    from harness.train import EarlyStopping, fit

    seed, epochs, (train, val, test) = _report_sets(case)
    torch.manual_seed(seed)
    model = _report_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = fit(model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=48),
                  loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs, precision=precision,
                  max_grad_norm=1.0, metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping("val_accuracy", mode="max", patience=epochs),
                  checkpoint_dir=root / "checkpoints", progress=False)
    load_checkpoint(root / "checkpoints" / "best.pt", model=model)
    run = {"model": model, "history": history, "precision": precision, "checkpoint_dir": root / "checkpoints"}
    return run, test


def _test_scores(case: Case, weights: Any, precision: str) -> dict[str, float]:
    """The test metrics the report must give: the recorded weights evaluated on the case's test set."""
    from harness.metrics import accuracy
    from harness.train import evaluate

    if not (isinstance(weights, dict) and all(isinstance(v, torch.Tensor) for v in weights.values())):
        raise ValueError("the run's weights are not a dict of tensors")
    with torch.random.fork_rng(devices=[]):  # its initial weights are replaced: only the RNG must stay as it was
        model = _report_model()
    model.load_state_dict(weights)
    test = _report_sets(case)[2][2]
    return evaluate(model, DataLoader(test, batch_size=100), loss_fn=nn.CrossEntropyLoss(),
                    metrics={"accuracy": accuracy}, precision=precision)


def _missing(code: str, what: str, how: str) -> NoReturn:
    fail(code, observed=f"the report has no {what}", expected=f"a complete run report, {what} included",
         cause=f"{how} not given to write_run_report, or the section removed from its text",
         where=f"write_run_report(..., {how})")


def _reported_number(text: str, name: str) -> float | None:
    """The value after `name` on the report's held-out test line, or None."""
    line = next((line for line in text.splitlines() if "test" in line.lower() and name in line), "")
    found = re.search(rf"{name}\W+(-?[0-9.]+(?:e-?[0-9]+)?)", line)
    return float(found.group(1)) if found else None


_LINK = r"!\[[^\]]*\]\(([^)\s]+)\)"  # a Markdown image link; group 1 is the file
_PNG = b"\x89PNG\r\n\x1a\n"


def _check_report_text(seen: dict[str, Any], case: Case, epochs: int, test_size: int) -> None:
    text, device, version = seen["text"], "cpu", seen["torch_version"]
    if not (isinstance(text, str) and isinstance(version, str) and isinstance(seen["files"], dict)):
        raise ValueError("the recorded report is not text")
    if version not in text or device not in text:
        _missing("missing-environment", f"environment (the device {device!r} and torch {version})",
                 "environment=environment_report(device)")
    if "max_grad_norm" not in text or "scheduler" not in text:
        _missing("missing-config", "configuration (max_grad_norm, scheduler, ... of the run)", "the history from fit")
    if "train_loss" not in text or text.count("\n|") < epochs + 2:
        _missing("missing-history", "history table (one row per epoch)", "the history from fit")
    heads = [seen["files"].get(link) for link in re.findall(_LINK, text)]
    if not any(isinstance(head, list) and bytes(head) == _PNG for head in heads):
        _missing("missing-curves", "curves: no ![...](file.png) link to a PNG that exists next to it",
                 "curves=plot_history(...)'s saved PNG")
    reported = {name: _reported_number(text, name) for name in ("accuracy", "loss")}
    if reported["accuracy"] is None or "not evaluated" in text:
        _missing("missing-test-metrics", "held-out test metrics", "test_metrics=evaluate(model, test_loader, ...)")
    precision = reference_precision("cpu", _support_of(seen["precisions"]))
    scores = _test_scores(case, seen["weights"], precision)
    accuracy_ok = abs(reported["accuracy"] - scores["accuracy"]) <= 2 / test_size + 1e-3
    loss_ok = reported["loss"] is None or math.isclose(reported["loss"], scores["loss"], rel_tol=0.03, abs_tol=1e-3)
    if not (accuracy_ok and loss_ok):
        fail("wrong-test-metrics",
             observed=f"the report gives test accuracy {reported['accuracy']}, loss {reported['loss']}",
             expected=f"accuracy {scores['accuracy']:.4g}, loss {scores['loss']:.4g}: the model evaluated on the whole "
             "test set given, in the run's precision", cause="metrics of another data set, of part of the test set, "
             "or of another model", where="evaluate(run['model'], DataLoader(test_set, ...), ..., "
             "precision=run['precision'])")
    if "## Precision" not in text or "fp32:" not in text:
        _missing("missing-precision", "precision section (which operations ran in fp32 under autocast)",
                 "op_dtypes=observe_op_dtypes(model, images, precision=..., targets=..., loss_fn=...)")
    if "best.pt" not in text:
        _missing("missing-best-checkpoint", "path of the best checkpoint", "best_checkpoint=checkpoint_dir / 'best.pt'")


def _file_heads(text: str, folder: Path) -> dict[str, list[int] | None]:
    """The first 8 bytes of each file the report's image links name (None where there is no such file)."""
    heads: dict[str, list[int] | None] = {}
    for link in re.findall(_LINK, text)[:20]:
        path = folder / link
        heads[link] = list(path.read_bytes()[:8]) if path.is_file() else None
    return heads


@register(
    "10-report",
    hints=Hints(
        nudge="harness.report.write_run_report writes every section it is given: give it the held-out test metrics, "
        "the saved curves, the operations autocast ran in fp32, the environment and best.pt.",
        concept="A report says what ran (configuration), where (environment), how it went (history, curves), how "
        "good it is on data never used to train or choose (the test set, evaluated whole, in the run's "
        "precision), and what mixed precision did (observe_op_dtypes).",
        solution="scores = evaluate(model, DataLoader(test_set, batch_size=256), loss_fn=nn.CrossEntropyLoss(), "
        "metrics={'accuracy': accuracy}, precision=run['precision']); plot_history(history, out_dir / "
        "'curves.png'); op_dtypes = observe_op_dtypes(model, x, precision=..., targets=y, loss_fn=...); return "
        "write_run_report(out_dir / 'report.md', history, test_metrics=scores, best_checkpoint=..., "
        "op_dtypes=..., environment=environment_report(device), curves=out_dir / 'curves.png')",
        section="8. The run report"),
    requires={
        "no-report": Requirement("returns the path of the report written",
                                 hint="write_run_report returns the path: does your function return it?"),
        "missing-environment": Requirement(
            "an environment section (device, torch version)",
            hint="Which argument of write_run_report takes environment_report(device)?"),
        "missing-config": Requirement(
            "the configuration of the run",
            hint="write_run_report reads the configuration from fit's history: is the history given as it is?"),
        "missing-history": Requirement("the history table, one row per epoch",
                                       hint="Is fit's history given to write_run_report whole?"),
        "missing-curves": Requirement(
            "the curves, saved as a PNG next to the report and linked",
            hint="plot_history(history, path) saves a PNG: is that path given as curves=?"),
        "missing-test-metrics": Requirement(
            "held-out test metrics",
            hint="You may have computed the test scores: were they given to write_run_report?"),
        "wrong-test-metrics": Requirement(
            "the test metrics of run['model'] on the whole test set, in the run's precision",
            hint="Which data set and which model did you evaluate? The test set, whole, with run['model']."),
        "missing-precision": Requirement(
            "the precision section (which operations autocast ran in fp32)",
            hint="Which harness.report function observes the dtype of each operation, and which argument takes it?"),
        "missing-best-checkpoint": Requirement(
            "the path of best.pt",
            hint="run['checkpoint_dir'] holds best.pt: which argument of write_run_report names it?"),
    },
)
def probe_report(write_capstone_report: Callable[..., Any], *, case: Case) -> dict:
    """Give the student's function a real run and its test set; record the report written, the files it links,
    and the run's weights (the judge evaluates them on the test set itself)."""
    with tempfile.TemporaryDirectory(prefix="check-10-report-") as tmp, _rng_kept():
        root = Path(tmp)
        precisions = supported_precisions(torch.device("cpu"))
        run, test = _report_run(root / "run", case, reference_precision("cpu", precisions))
        path = write_capstone_report(run, test, root / "report")
        seen: dict[str, Any] = {"returned": repr(path)[:200], "written": path is not None and Path(path).is_file()}
        if seen["written"]:
            path = Path(path)
            text = path.read_text()
            seen.update(text=text, files=_file_heads(text, path.parent), torch_version=torch.__version__,
                        precisions=precisions, weights=_state(run["model"].state_dict()))
    return seen


@judges("10-report")
def judge_report(seen: dict, *, case: Case) -> str:
    """Every section of the report, its test metrics checked against the judge's own evaluation of the run."""
    if seen["written"] is not True:
        fail("no-report", observed=f"write_capstone_report returned {seen['returned']}",
             expected="the path of the report written",
             cause="the report is not written, or its path not returned", where="return write_run_report(...)")
    _, epochs, (_, _, test) = _report_sets(case)
    _check_report_text(seen, case, epochs, len(test))
    return "environment, configuration, history, curves, held-out test metrics, precision and best checkpoint reported"
