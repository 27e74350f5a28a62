"""10-train, the probe.

A run straight through, then one interrupted and resumed: record what each returned, wrote and stepped.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from harness import env
from harness.checks.lesson10.common import PRECISIONS, _rng_kept, _state_as_data, mixed_precision_on_cpu
from harness.checks.lesson10.notebook_globals import notebook_data_read
from harness.contract.case import Case
from harness.contract.failure import CheckFailed
from harness.contract.registry import register
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, shapes
from harness.env import supported_precisions
from harness.train import OffDeviceError


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


def constant_accuracy_val() -> LabeledTensorDataset:
    """Five copies of one image labelled 0 to 4: whatever the model predicts, accuracy is exactly 0.2, so it
    never improves after epoch 1. Early stopping and best.pt become predictable."""
    image = shapes(1, seed=99, size=16).tensors[0]
    return LabeledTensorDataset(image.repeat(5, 1, 1, 1), torch.arange(5), classes=SHAPE_CLASSES)


class _ReadOrder(LabeledTensorDataset):
    """A copy of a labelled dataset that records the index of every sample read (the order a loader reads it in)."""

    def __init__(self, dataset: LabeledTensorDataset) -> None:
        super().__init__(*dataset.tensors, classes=dataset.classes)
        self.read: list[int] = []

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.read.append(int(index))
        return super().__getitem__(index)


def _interrupt_after(epoch: int) -> Callable[[int, dict[str, Any]], None]:
    def on_epoch_end(done: int, row: dict[str, Any]) -> None:
        if done == epoch:
            raise _Interrupted(f"interrupted after epoch {done}")

    return on_epoch_end


def train_config(case: Case, precisions: dict[str, bool]) -> tuple[dict[str, Any], int, int]:
    """The config, the number of samples and the epoch after which the run is interrupted. Its precision is bf16
    where the CPU's autocast runs it (`mixed_precision_on_cpu`): a run that ignores config['precision'] trains in
    fit's default, fp32, and last.pt says so."""
    precision = mixed_precision_on_cpu(precisions)
    if case.hidden:
        return dict(epochs=3, batch_size=16, lr=5e-3, weight_decay=0.1, warmup_fraction=0.2, max_grad_norm=0.5,
                    patience=1, width=4, seed=case.seeded(11), precision=precision), 80, 1
    return dict(epochs=4, batch_size=16, lr=3e-3, weight_decay=0.05, warmup_fraction=0.25, max_grad_norm=1.0,
                patience=2, width=4, seed=case.seeded(3), precision=precision), 96, 2


def _run(train_capstone: Callable[..., Any], data: tuple[Any, Any], out: Path, config: dict[str, Any],
         **options: Any) -> tuple[Any, int]:
    """Call the student's function from a scrambled global RNG state; return its result and its steps."""
    torch.default_generator.seed()  # the notebook's global RNG state is anyone's: the run must seed itself
    with _StepCounter() as steps:
        result = train_capstone(data[0], data[1], out, dict(config), device="cpu", **options)
    return result, steps.count


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """What the checks read from a checkpoint fit wrote: its epoch, step, config, scheduler steps and weights."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    scheduler = saved.get("scheduler")
    return {"epoch": saved.get("epoch"), "global_step": saved.get("global_step"), "config": saved.get("config"),
            "scheduler_steps": scheduler.get("last_epoch") if isinstance(scheduler, dict) else None,
            "model": _state_as_data(saved.get("model"))}


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
        record.update(model=_state_as_data(model.state_dict()), last=_read_checkpoint(out / "last.pt"),
                      best=_read_checkpoint(out / "best.pt"))
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
    record["resumed"] = _read_checkpoint(root / "resumed" / "last.pt")["model"]
    if not _same_weights(record["resumed"], straight["last"]["model"]):
        _run(train_capstone, data, root / "again", config)
        record["again"] = _read_checkpoint(root / "again" / "last.pt")["model"]
    return record


def _same_weights(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor] | None) -> bool:
    """Whether two state_dicts hold equal tensors (the probe's cue for a second fresh run; the judge compares)."""
    return a is not None and b is not None and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@register("10-train")
def probe_train(train_capstone: Callable[..., dict[str, Any]], *, case: Case) -> dict:
    """A run straight through, then one interrupted and resumed: record what each returned, wrote and stepped.
    A function that reads the notebook's data as globals is not run: what it reads is recorded instead."""
    read = notebook_data_read(train_capstone)
    if read is not None:
        return {"notebook_data": read}
    precisions = supported_precisions(torch.device("cpu"))
    config, n, stop_at = train_config(case, precisions)
    data = (shapes(n, seed=config["seed"] + 40, size=16), constant_accuracy_val())
    with tempfile.TemporaryDirectory(prefix="check-10-train-") as tmp, _rng_kept():
        root = Path(tmp)
        seen: dict[str, Any] = {"precisions": precisions}
        validation = _ReadOrder(data[1])  # the straight run's validation set: in what order is it read?
        result, steps = _run(train_capstone, (data[0], validation), root / "straight", config)
        seen["straight"] = _record_straight(result, root / "straight", steps)
        seen["validation_order"] = validation.read[:200]
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
