"""The judge side of the performance drills (`harness.drills.bank.performance`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.compare import close_tensors, malformed, number
from harness.contract.failure import fail
from harness.contract.wire import describe
from harness.drills.bank.performance import (
    LOG_LR,
    loader_settings_dataset,
    log_inputs,
    metrics_inputs,
)
from harness.drills.core import Answers, add_judge, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_epoch_metrics(seen: dict, *, case: Case) -> str:
    model, epochs = metrics_inputs(case)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != len(epochs):
        malformed("epoch_metrics results missing")
    for batches, result in zip(epochs, results, strict=True):
        if not isinstance(result, dict) or not isinstance(result.get("syncs"), int):
            malformed("epoch_metrics result")
        with torch.no_grad():
            x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
            want_loss = float(F.cross_entropy(model(x), y))
            want_acc = float((model(x).argmax(1) == y).double().mean())
        loss, accuracy = number(result.get("loss")), number(result.get("accuracy"))
        if loss is None or accuracy is None:
            fail("wrong-value", observed=f"loss {describe(result.get('loss'))}, accuracy "
                 f"{describe(result.get('accuracy'))}", expected=f"two numbers: {want_loss:.5f} and {want_acc:.4f}",
                 cause="returning something other than two finite numbers", where="the return statement")
        if not (abs(loss - want_loss) <= 1e-5 and abs(accuracy - want_acc) <= 1e-6):
            fail("wrong-value", observed=f"loss {loss:.5f}, accuracy {accuracy:.4f} over {len(batches)} batches",
                 expected=f"{want_loss:.5f} and {want_acc:.4f} (the last batch holds {len(batches[-1][1])} samples, "
                 "the others 8)", cause=_metrics_cause(model, batches, loss, accuracy, want_loss, want_acc),
                 where="how the loss and the correct count are summed and divided")
        if result["syncs"] > 2:
            fail("sync-per-step", observed=f"{result['syncs']} host syncs for {len(batches)} batches",
                 expected="at most 2 (the two final values)", cause=".item() or float() inside the loop makes the "
                 "host wait for the device at every batch", where="the conversions inside the batch "
                 "loop")
    syncs = max(result["syncs"] for result in results)
    return (f"exact epoch metrics with {syncs} host sync{'' if syncs == 1 else 's'} per epoch at most, "
            "whatever the number of batches")


def _metrics_cause(model: nn.Module, batches: list, loss: float, accuracy: float, want_loss: float,
                   want_acc: float) -> str:
    """The slips whose numbers match the returned loss and accuracy (each one judged on its own)."""
    with torch.no_grad():
        outs = [(model(x), y) for x, y in batches]
    n = sum(len(y) for _, y in outs)
    loss_slips = {"the loss is a mean of batch means: the short last batch weighs as much as a full one":
                  sum(float(F.cross_entropy(o, y)) for o, y in outs) / len(outs),
                  "the loss is summed over the samples, not divided by their number": want_loss * n}
    acc_slips = {"the accuracy is in percent, not a fraction": want_acc * 100,
                 "the accuracy is the count of correct predictions, not divided by the number of samples": want_acc * n,
                 "the accuracy is a mean of batch accuracies: the short last batch weighs as much as a full one":
                 sum(float((o.argmax(1) == y).double().mean()) for o, y in outs) / len(outs)}
    causes = []
    for got, want, slips, what in ((loss, want_loss, loss_slips, "loss"), (accuracy, want_acc, acc_slips, "accuracy")):
        if not abs(got - want) <= (1e-5 if what == "loss" else 1e-6):  # a NaN names a cause too
            named = [slip for slip, value in slips.items() if abs(got - value) <= 1e-5 * max(1.0, abs(value))]
            causes.append(named[0] if named else f"the {what} is not the mean over all the epoch's samples")
    return "; ".join(causes)


def _judge_log_every(seen: dict, *, case: Case) -> str:
    model, batches, log_every = log_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=LOG_LR)
    losses, expected_params = [], []
    for x, y in batches:  # the reference run: a few steps of a tiny model
        expected_params.append([p.detach().clone() for p in model.parameters()])
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    params = seen.get("params")
    if not isinstance(params, list) or len(params) != len(batches):
        fail("wrong-step-count", observed=f"{len(params) if isinstance(params, list) else 0} optimizer steps for "
             f"{len(batches)} batches", expected="one optimizer.step() per batch",
             cause="a step skipped, or taken only when logging", where="the training loop")
    for step, (got, want) in enumerate(zip(params, expected_params, strict=True)):
        if not isinstance(got, list) or len(got) != len(want):
            malformed("step record")
        if not close_tensors(got, want, atol=1e-5, rtol=1e-5, dtype=False):
            fail("wrong-updates", observed=f"the weights before step {step} differ from plain SGD's",
                 expected=f"w <- w - {LOG_LR} * the gradient of each batch's loss alone",
                 cause="this is not plain SGD on each batch's own gradient: zero_grad(set_to_none=True) at every "
                 "step (gradients add up otherwise), cross_entropy, backward, step", where="the training loop")
    windows = [sum(losses[i:i + log_every]) / len(losses[i:i + log_every]) for i in range(0, len(losses), log_every)]
    logs = seen.get("logs")
    numbers = [number(v) for v in logs] if isinstance(logs, (list, tuple)) else None
    if numbers is None or len(numbers) != len(windows) or any(v is None for v in numbers):
        fail("wrong-value", observed=f"train_logged returned {describe(logs)}",
             expected=f"a list of {len(windows)} floats: one per window of {log_every} steps, the last window "
             f"holding {len(batches) - log_every * (len(windows) - 1)}",
             cause="the last, shorter window is dropped, or the values are not finite numbers",
             where="the logging branch")
    worst = max(abs(got - want) for got, want in zip(numbers, windows, strict=True))
    if worst > 1e-5:
        fail("wrong-value", observed=f"logged {[round(v, 5) for v in numbers]}",
             expected=f"{[round(v, 5) for v in windows]}: the mean loss of each window",
             cause="the mean is not over the window's own steps: the last step's loss alone, or a short last "
             "window divided by log_every", where="what you divide the window's sum by")
    if seen.get("syncs", 0) > len(windows):
        fail("sync-per-step", observed=f"{seen['syncs']} host syncs in {len(batches)} steps "
             f"({', '.join(map(str, seen.get('sync_calls', [])))[:120]})",
             expected=f"at most {len(windows)}: one per logged window",
             cause=".item() or float() at every step makes the host wait for the device each time",
             where="sum loss.detach() on the device; call .item() once when you log")
    return f"{len(windows)} exact window means with {seen.get('syncs')} host syncs in {len(batches)} steps"


_LOG_SOLUTION = '''import torch
import torch.nn.functional as F


def train_logged(model, optimizer, batches, log_every):
    model.train()
    logs, running, count = [], None, 0
    for step, (x, y) in enumerate(batches, start=1):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        running = loss.detach() if running is None else running + loss.detach()  # no sync, no graph kept
        count += 1
        if count == log_every or step == len(batches):
            logs.append((running / count).item())  # one sync per window
            running, count = None, 0
    return logs
'''


def _judge_loader_settings(seen: dict, *, case: Case) -> str:
    _, batch_size = loader_settings_dataset(case)
    for device_type in ("cuda", "cpu"):
        got = seen.get(device_type)
        if not isinstance(got, dict):
            malformed(f"no observation for {device_type}")
        call = f"make_loader(dataset, {batch_size}, {device_type!r})"
        if got.get("type") != "DataLoader" or got.get("same_dataset") is not True:
            fail("not-a-loader", observed=f"{call} returned a {got.get('type')}", expected="a DataLoader over dataset",
                 cause="returning the dataset, or a loader over another dataset", where="the return statement")
        if got.get("batch_size") != batch_size or got.get("sampler") != "RandomSampler":
            fail("wrong-batches", observed=f"{call}: batch_size={got.get('batch_size')}, sampler {got.get('sampler')}",
                 expected=f"batch_size={batch_size} and shuffle=True (a RandomSampler) for training",
                 cause="the batch size is fixed in the code, or shuffling is off", where="DataLoader(...)")
        workers = got.get("num_workers")
        if not isinstance(workers, int) or workers < 1:
            fail("no-workers", observed=f"{call}: num_workers={workers}",
                 expected="num_workers >= 1: loading and augmenting in worker processes, ahead of the GPU",
                 cause="with num_workers=0 the training process prepares every batch while the GPU waits",
                 where="num_workers")
        if got.get("persistent_workers") is not True:
            fail("workers-restarted", observed=f"{call}: persistent_workers={got.get('persistent_workers')}",
                 expected="persistent_workers=True",
                 cause="without it the workers are killed at the end of every epoch and started again (re-importing, "
                 "re-opening files) at the next: a stall at each epoch start", where="persistent_workers")
        want_pin = device_type == "cuda"
        if got.get("pin_memory") is not want_pin:
            fail("pinned-on-cpu" if device_type == "cpu" else "no-pin-memory",
                 observed=f"{call}: pin_memory={got.get('pin_memory')}", expected=f"pin_memory={want_pin}",
                 cause="page-locked batches make the copy to a CUDA device faster and asynchronous "
                 "(.to(device, non_blocking=True)); with no CUDA device pinning only costs memory and warns",
                 where="the DataLoader's pin_memory")
    return "shuffled batches from persistent workers, pinned only for a CUDA device"


_LOADER_SOLUTION = '''from torch.utils.data import DataLoader


def make_loader(dataset, batch_size, device_type):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2,
                      persistent_workers=True,  # workers survive from one epoch to the next
                      pin_memory=device_type == "cuda")  # page-locked batches: fast, asynchronous copies
'''


add_judge("performance-epoch-metrics", _judge_epoch_metrics)


add_answers(
    Answers(
        drill_id="performance-log-every",
        solution=_LOG_SOLUTION,
        wrong_answers=(
            (edited(_LOG_SOLUTION,
                    ("running = loss.detach() if running is None else running + loss.detach()",
                     "running = loss.item() if running is None else running + loss.item()"),
                    ("(running / count).item()", "running / count")), "sync-per-step"),
            (edited(_LOG_SOLUTION, ("(running / count).item()", "(running / log_every).item()")), "wrong-value"),
            (edited(_LOG_SOLUTION, ("count == log_every or step == len(batches)", "count == log_every")),
             "wrong-value"),
            (edited(_LOG_SOLUTION,
                    ("        optimizer.zero_grad(set_to_none=True)\n", ""),
                    ("    logs, running, count",
                     "    optimizer.zero_grad(set_to_none=True)\n"
                     "    logs, running, count")), "wrong-updates"),
        ),
        judge=_judge_log_every,
    )
)


add_answers(
    Answers(
        drill_id="performance-loader-settings",
        solution=_LOADER_SOLUTION,
        wrong_answers=(
            (edited(_LOADER_SOLUTION, ("persistent_workers=True", "persistent_workers=False")), "workers-restarted"),
            (edited(_LOADER_SOLUTION, ('pin_memory=device_type == "cuda"', "pin_memory=True")), "pinned-on-cpu"),
            (edited(_LOADER_SOLUTION, ("num_workers=2", "num_workers=0")), "raised"),
            (edited(_LOADER_SOLUTION,
                    ("num_workers=2,\n                      persistent_workers=True,",
                     "num_workers=4,")), "workers-restarted"),
            (edited(_LOADER_SOLUTION, ("shuffle=True", "shuffle=False")), "wrong-batches"),
        ),
        judge=_judge_loader_settings,
    )
)


add_answers(
    choice_answers(
        "performance-item-sync",
        options=(
            (".item() copies the whole model to the host", ".item() copies one number; the model stays where it is"),
            ("it turns autocast off for the next step", "autocast is a context manager: reading a value does not "
             "touch it"),
            ("it does not: .item() is free on a GPU", "it costs a full wait for the device's queue, which the "
             "experiment counts as a host sync per call"),
            ("the host must wait for the GPU to finish", "CUDA kernels run asynchronously: reading a result on the "
             "host waits for all queued work, so the CPU cannot run ahead and queue the next step"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "performance-num-workers",
        options=(
            ("load and augment in worker processes", "the input pipeline starves the GPU: with workers (and "
             "pin_memory) the next batches are ready when the GPU asks"),
            ("a bigger model to keep the GPU busy", "a bigger model hides the gap but trains slower: the GPU "
             "would still wait for every batch"),
            ("a smaller learning rate for stability", "the learning rate changes what a step does, not how long "
             "the GPU waits for data"),
            ("float64 so each step does more work", "slower arithmetic is not better utilisation; the GPU still "
             "waits for the data"),
        ),
        key="a",
    )
)


add_answers(
    choice_answers(
        "performance-cudnn-benchmark",
        options=(
            ("always faster: it only turns on faster kernels", "it turns on a search: each new input shape is timed "
             "against every algorithm first, which costs time"),
            ("faster with fixed input shapes, slower with many", "cuDNN times its algorithms once per new input shape "
             "and caches the fastest: repeated shapes profit, a new shape every batch pays the search each time"),
            ("faster only on the CPU, with no effect on a GPU", "cuDNN is NVIDIA's GPU library: the flag has no "
             "effect on the CPU at all"),
            ("slower always, since it makes results deterministic", "determinism is the other flag "
             "(cudnn.deterministic); benchmark may even pick non-deterministic kernels"),
        ),
        key="b",
    )
)


add_answers(
    choice_answers(
        "performance-compile-graph-breaks",
        options=(
            ("compile only speeds up models on the CPU", "compile targets GPUs first (Triton kernels); a break in "
             "the graph is what keeps it from fusing the step"),
            ("the first compiled call is still running", "the first call compiles, but later steps run the cached "
             "graphs; many breaks and recompiles stay slow at every step"),
            ("host syncs on tensor values break the graph", ".item() and a Python branch on a tensor's value force a "
             "graph break: compiled pieces with Python in between, and value guards that recompile"),
            ("the model has too many parameters to be traced", "dynamo traces the operations, whatever the parameter "
             "count; size is not a cause of breaks"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "performance-batch-throughput",
        options=(
            ("the same: each sample costs the same arithmetic", "the arithmetic per sample is the same, but at batch "
             "8 most of the step's time is fixed launch and Python overhead"),
            ("it drops: larger batches are slower per sample", "larger matrix products use the GPU's cores better; "
             "per sample they are cheaper until the GPU is saturated"),
            ("it falls at first, then climbs back to the same", "nothing in a bigger batch makes early steps slower; "
             "throughput rises and then plateaus"),
            ("it rises until the GPU is busy, then plateaus", "a step's fixed costs (launches, Python, syncs) are "
             "shared by more samples and larger kernels fill the GPU; once it is saturated, more only adds memory"),
        ),
        key="d",
    )
)
