"""Drills on performance: host syncs in the loop, and where time goes."""

from __future__ import annotations

import time

import torch
from torch import nn

from harness.checks.core import fail
from harness.checks.probes import HostSyncCounter
from harness.drills.core import Drill, add
from harness.drills.support import multiple_choice


def _check_epoch_metrics(ns: dict) -> str:
    epoch_metrics = ns["epoch_metrics"]
    torch.manual_seed(0)
    model = nn.Linear(6, 3).eval()
    gen = torch.Generator().manual_seed(1)
    for n_batches in (3, 12):
        batches = [(torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen))
                   for _ in range(n_batches)]
        with HostSyncCounter() as counter:
            loss, accuracy = epoch_metrics(model, batches, nn.CrossEntropyLoss())
        with torch.no_grad():
            x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
            want_loss = nn.CrossEntropyLoss()(model(x), y).item()
            want_acc = (model(x).argmax(1) == y).float().mean().item()
        if abs(float(loss) - want_loss) > 1e-5 or abs(float(accuracy) - want_acc) > 1e-6:
            fail("wrong-value", observed=f"loss {float(loss):.5f}, accuracy {float(accuracy):.4f}",
                 expected=f"{want_loss:.5f} and {want_acc:.4f}", cause="means of batch means weight batches "
                 "wrongly only when sizes differ; here check the sums", where="sum loss*batch size and correct counts")
        if counter.count > 2:
            fail("sync-per-step", observed=f"{counter.count} host syncs for {n_batches} batches",
                 expected="at most 2 (the final values)", cause=".item() or float() inside the loop forces the host to "
                 "wait for the device every batch", where="accumulate tensors on the device; convert once at the end")
    return "exact epoch metrics with at most two host syncs, whatever the number of batches"


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

add(
    Drill(
        id="performance-epoch-metrics",
        title="Bug hunt: metrics that sync the GPU every batch",
        kind="bughunt",
        topics=("performance", "loop"),
        difficulty=2,
        prompt="epoch_metrics computes the right numbers, but calls .item() twice per batch: on a GPU each call waits "
        "for all queued work, so the GPU idles between batches. Keep the results, sync at most twice per epoch.",
        entry="epoch_metrics",
        starter=_METRICS_STARTER,
        solution='''import torch


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
''',
        hints=("Which calls move a value from the device to Python?",
               "Keep running sums as tensors on the device; call .item() once at the end."),
        check=_check_epoch_metrics,
        wrong_answers=(_METRICS_STARTER.replace(".item() * len(y)", " * len(y)"),),
    )
)


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
        prompt="Why does calling loss.item() every training step slow GPU training?\n"
        "  a) .item() copies the whole model\n"
        "  b) it forces the CPU to wait until the GPU has finished all queued work, "
        "so the CPU cannot run ahead and queue the next kernels\n"
        "  c) it disables autocast\n  d) it does not: it is free\n",
        correct="b",
        explanation=".item() is a host-device synchronisation point",
        hints=("CUDA launches are asynchronous. What does reading a value force?",
               "A device-to-host copy of a result must wait for that result to be computed."),
        wrong=("d", "a"),
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
        prompt="A model trains with DataLoader(num_workers=0) and heavy per-image augmentation; the GPU sits at 30% "
        "utilisation. The most likely first fix?\n  a) a bigger model\n  b) load and augment in worker processes "
        "(num_workers > 0, pin_memory=True), so data is ready when the GPU asks\n"
        "  c) a smaller learning rate\n  d) fp64\n",
        correct="b",
        explanation="the input pipeline starves the GPU: use workers",
        hints=("Who is waiting for whom?",
               "With num_workers=0 the main process decodes every batch while the GPU waits."),
        wrong=("a", "c"),
        experiment=_workers_experiment,
    )
)
