"""Drills on performance: host syncs in the loop, the input pipeline, and where time goes."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.contract.case import Case
from harness.contract.failure import fail
from harness.contract.instruments import HostSyncCounter, StepRecorder
from harness.contract.wire import WireError, describe
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice, no_harness_shortcut, seeded_init


# ------------------------------------------------------------------------------------------------ shared helpers
def _one_number(value: Any) -> float | None:
    """A Python number or a one-element tensor as a float; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.detach().double())
    return None


# ------------------------------------------------------------------------------------------------ epoch metrics
def _metrics_inputs(case: Case) -> tuple[nn.Module, list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """A seeded Linear(6, 3) in eval mode and two epochs of batches of 8 whose last batch is shorter."""
    model = seeded_init(nn.Linear(6, 3), case.seeded(0)).eval()
    generator = torch.Generator().manual_seed(case.seeded(1))
    epochs = []
    for n_batches in (3, 12):
        last = int(torch.randint(2, 8, (), generator=generator))
        epochs.append([(torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,), generator=generator))
                       for size in [8] * (n_batches - 1) + [last]])
    return model, epochs


def _probe_epoch_metrics(answer: dict, *, case: Case) -> dict:
    model, epochs = _metrics_inputs(case)
    results = []
    for batches in epochs:
        with HostSyncCounter() as counter:
            loss, accuracy = answer["epoch_metrics"](model, batches, nn.CrossEntropyLoss())
        results.append({"loss": loss, "accuracy": accuracy, "syncs": counter.count})
    return {"results": results}


def _judge_epoch_metrics(seen: dict, *, case: Case) -> str:
    model, epochs = _metrics_inputs(case)
    results = seen.get("results")
    if not isinstance(results, list) or len(results) != len(epochs):
        raise WireError("epoch_metrics results missing")
    for batches, result in zip(epochs, results, strict=True):
        if not isinstance(result, dict) or not isinstance(result.get("syncs"), int):
            raise WireError("malformed epoch_metrics result")
        with torch.no_grad():
            x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
            want_loss = float(F.cross_entropy(model(x), y))
            want_acc = float((model(x).argmax(1) == y).double().mean())
        loss, accuracy = _one_number(result.get("loss")), _one_number(result.get("accuracy"))
        if loss is None or accuracy is None:
            fail("wrong-value", observed=f"loss {describe(result.get('loss'))}, accuracy "
                 f"{describe(result.get('accuracy'))}", expected=f"two numbers: {want_loss:.5f} and {want_acc:.4f}",
                 cause="returning something other than two numbers", where="the return statement")
        if not (abs(loss - want_loss) <= 1e-5 and abs(accuracy - want_acc) <= 1e-6):
            fail("wrong-value", observed=f"loss {loss:.5f}, accuracy {accuracy:.4f} over {len(batches)} batches",
                 expected=f"{want_loss:.5f} and {want_acc:.4f} (the last batch holds {len(batches[-1][1])} samples, "
                 "the others 8)", cause=_metrics_cause(model, batches, loss, accuracy, want_loss, want_acc),
                 where="sum loss * batch size and correct counts; divide by the number of samples")
        if result["syncs"] > 2:
            fail("sync-per-step", observed=f"{result['syncs']} host syncs for {len(batches)} batches",
                 expected="at most 2 (the two final values)", cause=".item() or float() inside the loop makes the "
                 "host wait for the device at every batch", where="accumulate tensors on the device; convert once "
                 "at the end")
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


# two literals only to keep this file within 120 columns: the starter's docstring is a single line
_METRICS_STARTER = ('''import torch


def epoch_metrics(model, batches, loss_fn):
    """Mean loss and accuracy over the epoch. Symptom: on a GPU the loop is slow and the GPU sits idle '''
                    '''between batches."""
    total_loss, correct, count = 0.0, 0, 0
    with torch.inference_mode():
        for x, y in batches:
            out = model(x)
            total_loss += loss_fn(out, y).item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            count += len(y)
    return total_loss / count, correct / count
''')

_METRICS_SOLUTION = '''import torch


def epoch_metrics(model, batches, loss_fn):
    total_loss = torch.zeros(())
    correct = torch.zeros((), dtype=torch.long)
    count = 0
    with torch.inference_mode():
        for x, y in batches:
            out = model(x)
            total_loss += loss_fn(out, y) * len(y)  # stays on the device
            correct += (out.argmax(1) == y).sum()
            count += len(y)
    return (total_loss / count).item(), (correct / count).item()  # the epoch's only syncs
'''

add(
    Drill(
        id="performance-epoch-metrics",
        title="Bug hunt: metrics that sync the GPU every batch",
        kind="bughunt",
        topics=("performance", "loop"),
        difficulty=2,
        prompt="epoch_metrics computes the right numbers, but calls .item() twice per batch: on a GPU each call waits "
        "for all queued work, so the GPU idles between batches. Keep the results, sync at most twice per epoch. "
        "This is a self-check: the syncs are counted inside your answer's own process, so they can fail the drill, "
        "and a pass does not count in a mock interview.",
        self_check=True,
        entry="epoch_metrics",
        starter=_METRICS_STARTER,
        solution=_METRICS_SOLUTION,
        hints=("Which calls move a value from the device to Python?",
               "Keep running sums as tensors on the device; call .item() once at the end."),
        probe=_probe_epoch_metrics,
        judge=_judge_epoch_metrics,
        wrong_answers=(
            # the loss fixed, the accuracy still read every batch
            (_METRICS_STARTER.replace(".item() * len(y)", " * len(y)"), "sync-per-step"),
            # float() is .item() under another name
            (_METRICS_SOLUTION.replace("loss_fn(out, y) * len(y)", "float(loss_fn(out, y)) * len(y)"),
             "sync-per-step"),
            # a mean of batch means: the short last batch weighs as much as a full one
            (_METRICS_SOLUTION.replace("loss_fn(out, y) * len(y)", "loss_fn(out, y)")
             .replace("(total_loss / count).item()", "(total_loss / len(batches)).item()"), "wrong-value"),
        ),
    )
)


# ------------------------------------------------------------------------------------------------ logging every N
_LOG_LR = 0.2


def _log_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]], int]:
    """A seeded Linear(5, 3), 7 to 11 batches, and a window size that leaves a shorter last window."""
    model = seeded_init(nn.Linear(5, 3), case.seeded(10))
    generator = torch.Generator().manual_seed(case.seeded(11))
    log_every = int(torch.randint(3, 5, (), generator=generator))
    n_batches = int(torch.randint(7, 12, (), generator=generator))
    if n_batches % log_every == 0:
        n_batches += 1
    batches = [(torch.randn(6, 5, generator=generator), torch.randint(0, 3, (6,), generator=generator))
               for _ in range(n_batches)]
    return model, batches, log_every


def _probe_log_every(answer: dict, *, case: Case) -> dict:
    no_harness_shortcut(answer)
    model, batches, log_every = _log_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=_LOG_LR)
    with StepRecorder(optimizer) as steps, HostSyncCounter() as syncs:
        logs = answer["train_logged"](model, optimizer, batches, log_every)
    return {"logs": logs, "syncs": syncs.count, "sync_calls": syncs.calls[:12],
            "params": [record.params for record in steps.records], "final": [p.detach() for p in model.parameters()]}


def _judge_log_every(seen: dict, *, case: Case) -> str:
    model, batches, log_every = _log_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=_LOG_LR)
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
            raise WireError("malformed step record")
        if not all(isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g, w, atol=1e-5, rtol=1e-5)
                   for g, w in zip(got, want, strict=True)):
            fail("wrong-updates", observed=f"the weights before step {step} differ from plain SGD's",
                 expected=f"w <- w - {_LOG_LR} * the gradient of each batch's loss alone",
                 cause="this is not plain SGD on each batch's own gradient: zero_grad(set_to_none=True) at every "
                 "step (gradients add up otherwise), cross_entropy, backward, step", where="the training loop")
    windows = [sum(losses[i:i + log_every]) / len(losses[i:i + log_every]) for i in range(0, len(losses), log_every)]
    logs = seen.get("logs")
    numbers = [_one_number(v) for v in logs] if isinstance(logs, (list, tuple)) else None
    if numbers is None or len(numbers) != len(windows) or any(v is None for v in numbers):
        fail("wrong-value", observed=f"train_logged returned {describe(logs)}",
             expected=f"a list of {len(windows)} floats: one per window of {log_every} steps, the last window "
             f"holding {len(batches) - log_every * (len(windows) - 1)}",
             cause="the last, shorter window is dropped, or the values are not numbers", where="the logging branch")
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


_LOG_STARTER = '''import torch
import torch.nn.functional as F


def train_logged(model, optimizer, batches, log_every):
    """Train one pass over `batches`; return the mean loss of each window of `log_every` steps."""
    raise NotImplementedError
'''

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

add(
    Drill(
        id="performance-log-every", unjudged=('final/*',),
        title="Log the loss without syncing every step",
        kind="write",
        topics=("performance", "loop"),
        difficulty=2,
        prompt="Write train_logged(model, optimizer, batches, log_every): one pass of training over the list "
        "`batches` (zero_grad(set_to_none=True), F.cross_entropy, backward, step for each batch) that returns the "
        "mean training loss of each window of log_every consecutive steps as Python floats; the last window may be "
        "shorter. On a GPU every .item() waits for the device: make at most one host sync per window. The sync "
        "count is a self-check: it is measured inside your answer's own process, so it can fail the drill, and a "
        "pass does not count in a mock interview.",
        self_check=True,
        entry="train_logged",
        starter=_LOG_STARTER,
        solution=_LOG_SOLUTION,
        hints=("Where can the running sum of the window live so that adding to it costs no sync?",
               "running = running + loss.detach() on the device; at the end of a window append (running / count)"
               ".item() and reset."),
        probe=_probe_log_every,
        judge=_judge_log_every,
        wrong_answers=(
            (_LOG_SOLUTION.replace("running = loss.detach() if running is None else running + loss.detach()",
                                   "running = loss.item() if running is None else running + loss.item()")
             .replace("(running / count).item()", "running / count"), "sync-per-step"),
            (_LOG_SOLUTION.replace("(running / count).item()", "(running / log_every).item()"), "wrong-value"),
            (_LOG_SOLUTION.replace("count == log_every or step == len(batches)", "count == log_every"),
             "wrong-value"),
            (_LOG_SOLUTION.replace("        optimizer.zero_grad(set_to_none=True)\n", "")
             .replace("    logs, running, count", "    optimizer.zero_grad(set_to_none=True)\n"
                      "    logs, running, count"), "wrong-updates"),
        ),
    )
)


# ------------------------------------------------------------------------------------------------ loader settings
def _loader_settings_dataset(case: Case) -> tuple[torch.utils.data.TensorDataset, int]:
    generator = torch.Generator().manual_seed(case.seeded(20))
    size = int(torch.randint(40, 80, (), generator=generator))
    batch_size = int(torch.randint(4, 17, (), generator=generator))
    return torch.utils.data.TensorDataset(torch.randn(size, 3, generator=generator)), batch_size


def _probe_loader_settings(answer: dict, *, case: Case) -> dict:
    dataset, batch_size = _loader_settings_dataset(case)
    seen = {}
    for device_type in ("cuda", "cpu"):
        loader = answer["make_loader"](dataset, batch_size, device_type)  # never iterated: no worker starts
        seen[device_type] = {
            "type": type(loader).__name__, "num_workers": getattr(loader, "num_workers", None),
            "persistent_workers": getattr(loader, "persistent_workers", None),
            "pin_memory": getattr(loader, "pin_memory", None), "batch_size": getattr(loader, "batch_size", None),
            "sampler": type(getattr(loader, "sampler", None)).__name__,
            "same_dataset": getattr(loader, "dataset", None) is dataset,
        }
    return seen


def _judge_loader_settings(seen: dict, *, case: Case) -> str:
    _, batch_size = _loader_settings_dataset(case)
    for device_type in ("cuda", "cpu"):
        got = seen.get(device_type)
        if not isinstance(got, dict):
            raise WireError(f"no observation for {device_type}")
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
                 where="pin_memory=(device_type == 'cuda')")
    return "shuffled batches from persistent workers, pinned only for a CUDA device"


_LOADER_STARTER = '''from torch.utils.data import DataLoader


def make_loader(dataset, batch_size, device_type):
    """The training DataLoader. Symptom: the GPU idles at the start of every epoch and between batches."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
'''

_LOADER_SOLUTION = '''from torch.utils.data import DataLoader


def make_loader(dataset, batch_size, device_type):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2,
                      persistent_workers=True,  # workers survive from one epoch to the next
                      pin_memory=device_type == "cuda")  # page-locked batches: fast, asynchronous copies
'''

add(
    Drill(
        id="performance-loader-settings",
        title="Bug hunt: a DataLoader that starves the GPU",
        kind="bughunt",
        topics=("performance", "data"),
        difficulty=1,
        prompt="make_loader(dataset, batch_size, device_type) builds the training loader. Make it load in 2 worker "
        "processes that stay alive from one epoch to the next, and pin memory when device_type is 'cuda' (only "
        "then). Keep the batch size and the shuffling.",
        entry="make_loader",
        starter=_LOADER_STARTER,
        solution=_LOADER_SOLUTION,
        hints=("Which DataLoader arguments start workers, keep them between epochs, and page-lock the batches?",
               "num_workers=2, persistent_workers=True, pin_memory=(device_type == 'cuda')."),
        probe=_probe_loader_settings,
        judge=_judge_loader_settings,
        wrong_answers=(
            (_LOADER_SOLUTION.replace("persistent_workers=True", "persistent_workers=False"), "workers-restarted"),
            (_LOADER_SOLUTION.replace('pin_memory=device_type == "cuda"', "pin_memory=True"), "pinned-on-cpu"),
            (_LOADER_SOLUTION.replace("num_workers=2", "num_workers=0"), "raised"),
            (_LOADER_SOLUTION.replace("num_workers=2,\n                      persistent_workers=True,",
                                      "num_workers=4,"), "workers-restarted"),
            (_LOADER_SOLUTION.replace("shuffle=True", "shuffle=False"), "wrong-batches"),
        ),
    )
)


# ------------------------------------------------------------------------------------------------ explain drills
def _item_experiment() -> None:
    x = torch.randn(256, 256)
    with HostSyncCounter() as counter:
        total = torch.zeros(())
        for _ in range(50):
            total += (x @ x).mean()
        total.item()
    print(f"50 steps accumulating on the device: {counter.count} host sync(s)")
    with HostSyncCounter() as counter:
        total_py = 0.0
        for _ in range(50):
            total_py += (x @ x).mean().item()
    print(f"50 steps with .item() each: {counter.count} host syncs. On a GPU each one waits for the queue to drain.")


add(
    multiple_choice(
        id="performance-item-sync",
        title="Why is loss.item() every step slow on a GPU?",
        topics=("performance",),
        difficulty=1,
        question="Why does calling loss.item() at every training step slow down training on a GPU?",
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
        hints=("CUDA launches are asynchronous. What does reading a value force?",
               "A device-to-host copy of a result must wait for that result to be computed."),
        experiment=_item_experiment,
    )
)


def _workers_experiment() -> None:
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self) -> int:
            return 16

        def __getitem__(self, index: int) -> torch.Tensor:
            time.sleep(0.05)  # stands for decoding and augmenting an image
            return torch.zeros(1)

    for workers in (0, 2):
        start = time.perf_counter()
        for _ in DataLoader(Slow(), batch_size=4, num_workers=workers,
                            multiprocessing_context="fork" if workers else None):
            pass
        print(f"num_workers={workers}: {time.perf_counter() - start:.2f} s to load 16 slow samples (measured now)")
    print("with workers, loading overlaps with training; with 0 the training step waits for every batch.")


add(
    multiple_choice(
        id="performance-num-workers",
        title="A GPU at 30% utilisation",
        topics=("performance", "data"),
        difficulty=1,
        question="A model trains with DataLoader(num_workers=0) and heavy per-image augmentation; the GPU sits at "
        "30% utilisation. What is the most likely first fix?",
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
        hints=("Who is waiting for whom?",
               "With num_workers=0 the main process decodes every batch while the GPU waits."),
        experiment=_workers_experiment,
    )
)


def _cudnn_experiment() -> None:
    print(f"torch.backends.cudnn.benchmark is {torch.backends.cudnn.benchmark} by default.")
    generator = torch.Generator().manual_seed(0)
    fixed = {(32, 3, 224, 224)}
    lengths = torch.randint(50, 400, (100,), generator=generator)
    varying = {(32, 80, int(n)) for n in lengths}
    print(f"an image model with fixed crops: {len(fixed)} input shape over 100 batches -> 1 autotuning run, then "
          "the fastest kernel every step")
    print(f"an audio model with unpadded lengths: {len(varying)} distinct shapes over 100 batches -> "
          f"{len(varying)} autotuning runs, each trying every convolution algorithm")
    print("benchmark=True pays off when shapes repeat; pad or bucket variable lengths to a few shapes first.")


add(
    multiple_choice(
        id="performance-cudnn-benchmark",
        title="When does cudnn.benchmark help?",
        topics=("performance",),
        difficulty=2,
        question="A convolutional model trains on a GPU. Someone sets torch.backends.cudnn.benchmark = True. When "
        "does this make training faster, and when slower?",
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
        hints=("What does cuDNN do the first time it sees a convolution of a given shape with benchmark on?",
               "It times several algorithms and caches the fastest per shape: how often does it see a new shape?"),
        experiment=_cudnn_experiment,
    )
)


def _compile_experiment() -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x) * 2
        if y.sum() > 0:  # a Python branch on a tensor's value: dynamo must break the graph here
            y = y + 1
        return y.relu()

    explained = torch._dynamo.explain(step)(torch.randn(8))
    print(f"a branch on y.sum() > 0: {explained.graph_count} graphs, {explained.graph_break_count} graph break(s)")
    for reason in explained.break_reasons[:1]:
        print(f"  reason: {str(reason.reason).splitlines()[0][:100]}")
    torch._dynamo.reset()
    print("each graph break leaves Python in between the compiled pieces; a value-dependent branch also makes "
          "guards on the data, so new values or shapes can trigger recompiles.")


add(
    multiple_choice(
        id="performance-compile-graph-breaks",
        title="torch.compile barely speeds up a training step",
        topics=("performance",),
        difficulty=2,
        question="A training step is wrapped in torch.compile. It runs, but barely faster than eager, and "
        "TORCH_LOGS=graph_breaks,recompiles prints many lines. The step logs loss.item() and branches with "
        "`if loss > threshold:`. What is the most likely cause?",
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
        hints=("What must dynamo do when Python code needs the value of a tensor?",
               "torch._dynamo.explain(fn)(x) counts the graphs and says why each break happened."),
        experiment=_compile_experiment,
    )
)


def _throughput_experiment() -> None:
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    with torch.inference_mode():
        for batch in (1, 8, 64):
            x = torch.randn(batch, 256)
            best = float("inf")
            for _ in range(3):  # best of three: the least disturbed by other work on the machine
                start = time.perf_counter()
                for _ in range(1024 // batch):
                    layer(x)
                best = min(best, time.perf_counter() - start)
            print(f"batch {batch:3d}: {1024 / best:9.0f} samples/s (measured now, on this CPU)")
    print("small batches pay a fixed cost per step (launches, Python) for little arithmetic; throughput grows with "
          "the batch until the device is busy, then stays flat.")


add(
    multiple_choice(
        id="performance-batch-throughput",
        title="Batch size and throughput",
        topics=("performance",),
        difficulty=1,
        question="On one GPU a model trains at batch size 8 with 20% utilisation and plenty of free memory. The "
        "batch size goes to 128. What happens to samples per second, and why?",
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
        hints=("What part of a step's time does not depend on the batch size?",
               "Kernel launches and Python overhead are paid per step; the arithmetic is paid per sample."),
        experiment=_throughput_experiment,
    )
)
