"""Lesson 04: what several of its tasks share on the judge side (references)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.contract.compare import malformed, real, tensor_list
from harness.contract.failure import fail
from harness.contract.wire import type_name


def _syncs(count: int) -> str:
    """"1 host sync", "3 host syncs": the count for a pass message."""
    return f"{count} host sync{'' if count == 1 else 's'}"


def _copies(count: int) -> str:
    """"1 device-to-host copy", "3 device-to-host copies": the count for a failure message."""
    return f"{count} device-to-host cop{'y' if count == 1 else 'ies'}"


def _count(value: Any, what: str) -> int:
    """A non-negative int of the observation."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        malformed(f"{what} is not a count")
    return value


def _flags(value: Any, what: str) -> list[bool]:
    """A list of bools of the observation."""
    if not isinstance(value, list) or not all(isinstance(flag, bool) for flag in value):
        malformed(f"{what} is not a list of flags")
    return value


def _sync_calls(seen: dict) -> tuple[int, list[str]]:
    """The recorded host-sync count and the names of the calls that synced."""
    calls = seen["sync_calls"]
    if not isinstance(calls, list) or not all(isinstance(name, str) for name in calls):
        malformed("sync_calls is not a list of names")
    return _count(seen["syncs"], "syncs"), calls


def _model_state(value: Any, like: dict[str, torch.Tensor], what: str) -> dict[str, torch.Tensor]:
    """A state dict with the keys, shapes and dtypes of `like`."""
    if not isinstance(value, dict) or set(value) != set(like):
        malformed(f"{what} is not a state dict of the check's model")
    tensor_list([value[k] for k in like], list(like.values()), what)
    return value


def _scalar_or_fail(value: Any, what: str, where: str) -> float:
    """A returned number as a float, NaN and inf included; fails "not-a-scalar" for anything else.

    Not `expect.finite_number`: a diverged run's NaN is an answer here, judged against the reference's NaN.
    """
    if isinstance(value, torch.Tensor):
        if value.is_meta:  # no data: state kept from a run on the meta device, or made there
            fail(
                "not-a-scalar",
                observed=f"{what} is a tensor on the meta device, which holds no value",
                expected=f"{what} is a single number on the device of this run's inputs",
                cause="the value did not come from this run's inputs, which hold data: state kept from an earlier "
                      "run on another device, for example",
                where=where,
            )
        if value.numel() != 1:
            fail(
                "not-a-scalar",
                observed=f"{what} is a tensor of shape {tuple(value.shape)}",
                expected=f"{what} is a single number (a 0-dim tensor or a float)",
                cause="a per-sample or per-batch tensor was returned instead of its mean",
                where=where,
            )
    number = real(value)
    if number is None:
        fail(
            "not-a-scalar",
            observed=f"{what} is a {type_name(value)}",
            expected=f"{what} is a 0-dim tensor (or a float)",
            cause="the function returns something other than the number asked for",
            where=where,
        )
    return number


# How close a returned number must be to the reference (isclose_number's options): a diverged run's NaN matches
# only a NaN. SAME_LOGGED, for a history's values, allows a float32 sum in another order.
SAME = {"rel_tol": 1e-4, "abs_tol": 1e-4, "expected_nan": True}
SAME_LOGGED = {"rel_tol": 1e-3, "abs_tol": 1e-3, "expected_nan": True}


@torch.no_grad()
def _load(model: nn.Module, params: list[torch.Tensor]) -> None:
    for p, value in zip(model.parameters(), params, strict=True):
        p.copy_(value)


def _reference_grads_and_loss(
    model: nn.Module, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module
) -> tuple[list[torch.Tensor], float]:
    """Gradients and loss of one train-mode batch with `model` (the judge's own) set to `params`."""
    _load(model, params)
    model.train()
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()], float(loss.detach())


@torch.no_grad()
def _reference_eval(model: nn.Module, loader: DataLoader, loss_fn: nn.Module) -> dict[str, float]:
    """Per-sample mean loss, mean of batch means, sum of losses, and accuracy, all in eval mode."""
    was_training = model.training
    model.eval()
    total, batch_means, correct, n = 0.0, [], 0, 0
    for x, y in loader:
        out = model(x)
        loss = float(loss_fn(out, y))
        total += loss * len(y)
        batch_means.append(loss)
        correct += int((out.argmax(1) == y).sum())
        n += len(y)
    model.train(was_training)
    return {
        "loss": total / n,
        "batch_mean": sum(batch_means) / len(batch_means),
        "sum": total,
        "accuracy": correct / n,
        "correct": float(correct),
    }


def _require_train_mode(training: list[bool], where: str) -> None:
    if not all(training):
        fail(
            "eval-mode-in-training",
            observed="the model ran a training forward pass in eval mode (model.training was False)",
            expected="model.train() before the forward pass of every training step",
            cause="the model came in eval mode (as evaluate() leaves it) and nothing called model.train() before "
            "the training forward: BatchNorm then normalises with running statistics and Dropout does nothing "
            "while you train",
            where=where,
        )
