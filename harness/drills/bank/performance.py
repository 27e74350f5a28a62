"""Drills on performance: host syncs in the loop, the input pipeline, and where time goes."""

from __future__ import annotations

import time

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import HostSyncCounter, StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import explain, no_harness_shortcut, seeded_init


# ------------------------------------------------------------------------------------------------ epoch metrics
def metrics_inputs(case: Case) -> tuple[nn.Module, list[list[tuple[torch.Tensor, torch.Tensor]]]]:
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
    model, epochs = metrics_inputs(case)
    results = []
    for batches in epochs:
        with HostSyncCounter() as counter:
            loss, accuracy = answer["epoch_metrics"](model, batches, nn.CrossEntropyLoss())
        results.append({"loss": loss, "accuracy": accuracy, "syncs": counter.count})
    return {"results": results}


# two literals only to keep this file within 120 columns: the starter's docstring is a single line
METRICS_STARTER = ('''import torch


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
        "for all queued work, so the GPU idles between batches. Keep the results, sync at most twice per epoch. "
        "This is a self-check: the syncs are counted inside your answer's own process, so they can fail the drill, "
        "and a pass does not count in a mock interview.",
        self_check=True,
        entry="epoch_metrics",
        starter=METRICS_STARTER,
        hints=("Which calls move a value from the device to Python?",
               "Keep running sums as tensors on the device; call .item() once at the end."),
        probe=_probe_epoch_metrics,
    )
)


# ------------------------------------------------------------------------------------------------ logging every N
LOG_LR = 0.2


def log_inputs(case: Case) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]], int]:
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
    model, batches, log_every = log_inputs(case)
    optimizer = torch.optim.SGD(model.parameters(), lr=LOG_LR)
    with StepRecorder(optimizer) as steps, HostSyncCounter() as syncs:
        logs = answer["train_logged"](model, optimizer, batches, log_every)
    return {"logs": logs, "syncs": syncs.count, "sync_calls": syncs.calls[:12],
            "params": [record.params for record in steps.records], "final": [p.detach() for p in model.parameters()]}


_LOG_STARTER = '''import torch
import torch.nn.functional as F


def train_logged(model, optimizer, batches, log_every):
    """Train one pass over `batches`; return the mean loss of each window of `log_every` steps."""
    raise NotImplementedError
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
        hints=("Where can the running sum of the window live so that adding to it costs no sync?",
               "running = running + loss.detach() on the device; at the end of a window append (running / count)"
               ".item() and reset."),
        probe=_probe_log_every,
    )
)


# ------------------------------------------------------------------------------------------------ loader settings
def loader_settings_dataset(case: Case) -> tuple[torch.utils.data.TensorDataset, int]:
    """A dataset of a size drawn by the case and the batch size to load it with."""
    generator = torch.Generator().manual_seed(case.seeded(20))
    size = int(torch.randint(40, 80, (), generator=generator))
    batch_size = int(torch.randint(4, 17, (), generator=generator))
    return torch.utils.data.TensorDataset(torch.randn(size, 3, generator=generator)), batch_size


def _probe_loader_settings(answer: dict, *, case: Case) -> dict:
    dataset, batch_size = loader_settings_dataset(case)
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


_LOADER_STARTER = '''from torch.utils.data import DataLoader


def make_loader(dataset, batch_size, device_type):
    """The training DataLoader. Symptom: the GPU idles at the start of every epoch and between batches."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
'''


add(
    Drill(
        id="performance-loader-settings",
        self_check=True,
        title="Bug hunt: a DataLoader that starves the GPU",
        kind="bughunt",
        topics=("performance", "data"),
        difficulty=1,
        prompt="make_loader(dataset, batch_size, device_type) builds the training loader. Make it load in 2 worker "
        "processes that stay alive from one epoch to the next, and pin memory when device_type is 'cuda' (only "
        "then). Keep the batch size and the shuffling.",
        entry="make_loader",
        starter=_LOADER_STARTER,
        hints=("Which DataLoader arguments start workers, keep them between epochs, and page-lock the batches?",
               "num_workers=2, persistent_workers=True, pin_memory=(device_type == 'cuda')."),
        probe=_probe_loader_settings,
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
    explain(
        id="performance-item-sync",
        title="Why is loss.item() every step slow on a GPU?",
        topics=("performance",),
        difficulty=1,
        question="Why does calling loss.item() at every training step slow down training on a GPU?",
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
    explain(
        id="performance-num-workers",
        title="A GPU at 30% utilisation",
        topics=("performance", "data"),
        difficulty=1,
        question="A model trains with DataLoader(num_workers=0) and heavy per-image augmentation; the GPU sits at "
        "30% utilisation. What is the most likely first fix?",
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
    explain(
        id="performance-cudnn-benchmark",
        title="When does cudnn.benchmark help?",
        topics=("performance",),
        difficulty=2,
        question="A convolutional model trains on a GPU. Someone sets torch.backends.cudnn.benchmark = True. When "
        "does this make training faster, and when slower?",
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
    explain(
        id="performance-compile-graph-breaks",
        title="torch.compile barely speeds up a training step",
        topics=("performance",),
        difficulty=2,
        question="A training step is wrapped in torch.compile. It runs, but barely faster than eager, and "
        "TORCH_LOGS=graph_breaks,recompiles prints many lines. The step logs loss.item() and branches with "
        "`if loss > threshold:`. What is the most likely cause?",
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
    explain(
        id="performance-batch-throughput",
        title="Batch size and throughput",
        topics=("performance",),
        difficulty=1,
        question="On one GPU a model trains at batch size 8 with 20% utilisation and plenty of free memory. The "
        "batch size goes to 128. What happens to samples per second, and why?",
        hints=("What part of a step's time does not depend on the batch size?",
               "Kernel launches and Python overhead are paid per step; the arithmetic is paid per sample."),
        experiment=_throughput_experiment,
    )
)
