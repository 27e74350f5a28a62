"""The judge side of the data drills (`harness.drills.bank.data`): judges and the references
they recompute, reference solutions, planted wrong answers, explain drills' options and keys.

A graded kernel never mounts this package (`harness.judges`).
"""

from __future__ import annotations

import torch

from harness.contract.case import Case
from harness.contract.compare import malformed, same_values
from harness.contract.failure import fail
from harness.drills.bank.data import SAMPLER_EPOCHS, imbalanced_labels, loader_setup, pad_collate_batches
from harness.drills.core import Answers, choice_answers
from harness.drills.support import edited
from harness.judges.drills.whys import add_answers


def _judge_pad_collate(seen: dict, *, case: Case) -> str:
    outputs, batches = seen.get("outputs"), pad_collate_batches(case)
    if not isinstance(outputs, list) or len(outputs) != len(batches):
        malformed("collate outputs missing")
    where = "torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)"
    for batch, out in zip(batches, outputs, strict=True):
        lengths = [len(seq) for seq, _ in batch]
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            fail("wrong-output", observed=f"pad_collate returned {type(out).__name__}",
                 expected="a tuple (padded, lengths, labels)", cause="a different return value", where="the return")
        padded, lens, labels = out
        want_shape = (len(batch), max(lengths), 3)
        if not isinstance(padded, torch.Tensor) or tuple(padded.shape) != want_shape:
            shown = tuple(padded.shape) if isinstance(padded, torch.Tensor) else repr(padded)
            fail("wrong-shape", observed=f"padded is {shown} for lengths {lengths}", expected=f"{want_shape}",
                 cause="pad_sequence without batch_first=True puts time first: (max L, B, F); or padding to a "
                 "fixed length", where=where)
        if not isinstance(lens, torch.Tensor) or lens.dtype != torch.int64 or lens.tolist() != lengths:
            fail("wrong-lengths", observed=f"lengths {lens.tolist() if isinstance(lens, torch.Tensor) else lens!r}",
                 expected=f"torch.tensor({lengths}) (int64, in batch order)", cause="the batch was sorted by length "
                 "(the labels and lengths no longer match the caller's order), or lengths lost", where="the lengths")
        for row, (seq, _) in enumerate(batch):
            if (not same_values(padded[row, :len(seq)], seq, dtype=False)
                    or bool(padded[row, len(seq):].abs().sum() != 0)):
                fail("wrong-padding", observed=f"row {row} is not its sequence followed by zeros",
                     expected="each sequence at the start of its row, then zeros",
                     cause="padding on the left, a padding value other than 0, or rows reordered", where=where)
        want_labels = torch.stack([label for _, label in batch])
        if not isinstance(labels, torch.Tensor) or not same_values(labels, want_labels, dtype=False):
            fail("wrong-labels", observed=f"labels {labels!r}", expected=f"{want_labels!r}",
                 cause="labels returned as a tuple or list, reordered or lost", where="torch.stack(labels)")
    return "pads on the right with zeros, batch first, keeps the order, returns true lengths and stacked labels"


def _judge_worker_seeding(seen: dict, *, case: Case) -> str:
    runs = []
    for key in ("first", "again"):
        run = seen.get(key)
        if (not isinstance(run, list) or len(run) != 2 or not all(isinstance(e, list) and len(e) == 2 for e in run)
                or not all(isinstance(b, torch.Tensor) and b.shape == (4,) for e in run for b in e)):
            malformed(f"{key} malformed")
        runs.append(run)
    first, again = runs
    where = "worker_init_fn: what it does to the worker's dataset.rng"
    if same_values(first[0][0], first[0][1], dtype=False):
        fail("duplicate-augmentations", observed="both workers drew identical NumPy random numbers",
             expected="different numbers in each worker",
             cause="each worker gets an identical copy of the dataset, its NumPy Generator included; torch reseeds "
             "only its own RNG per worker (and np.random.seed does not touch a Generator object)", where=where)
    if not all(same_values(a, b, dtype=False)
               for e, f in zip(first, again, strict=True) for a, b in zip(e, f, strict=True)):
        fail("not-reproducible", observed="the same loader seed gave different augmentations",
             expected="reproducible augmentations for a seeded DataLoader generator",
             cause="the workers' seeds do not follow the loader's generator: they come from a source the "
             "loader's seed does not fix (the clock, os.urandom)", where=where)
    if same_values(torch.stack(first[0]), torch.stack(first[1]), dtype=False):
        fail("same-every-epoch", observed="epoch 2 drew exactly the augmentations of epoch 1",
             expected="new augmentations every epoch",
             cause="the worker's Generator was seeded from worker_id alone: workers restart each epoch with the same "
             "seed; torch.initial_seed() in a worker is base_seed + worker_id, with a new base_seed per epoch",
             where=where)
    return "workers draw different augmentations, new each epoch, reproducible for a seeded loader"


def _judge_sampler(seen: dict, *, case: Case) -> str:
    labels = imbalanced_labels(case)
    n, where = len(labels), "WeightedRandomSampler(weights, num_samples=len(labels), replacement=True, generator=...)"
    epochs, again, other = seen.get("epochs"), seen.get("again"), seen.get("other")
    if (not isinstance(epochs, list) or len(epochs) != SAMPLER_EPOCHS
            or not all(isinstance(e, list) and all(isinstance(i, int) for i in e) for e in [*epochs, again, other])):
        malformed("sampled indices malformed")
    if any(len(e) != n for e in epochs):
        fail("wrong-num-samples", observed=f"an epoch of {len(epochs[0])} indices", expected=f"{n} (len(labels))",
             cause="num_samples is not the dataset's size", where=where)
    if any(i < 0 or i >= n for e in epochs for i in e):
        fail("index-out-of-range", observed="indices outside the dataset", expected=f"indices in [0, {n})",
             cause="the sampler yields something other than dataset indices", where=where)
    if all(len(set(e)) == n for e in epochs):
        fail("no-replacement", observed=f"every epoch is a permutation of the {n} indices",
             expected="minority samples drawn several times per epoch",
             cause="replacement=False: each sample is drawn once, so the classes keep their original proportions",
             where=where)
    if max(i for e in epochs for i in e) < 3:
        fail("weights-per-class", observed="only the indices 0, 1 and 2 are ever drawn",
             expected=f"indices across the whole dataset (0..{n - 1})",
             cause="one weight per CLASS was passed: WeightedRandomSampler takes one weight per SAMPLE, and draws "
             "indices into that weight vector", where="weights = 1.0 / counts[labels]")
    drawn = labels[torch.tensor([i for e in epochs for i in e])]
    shares = (torch.bincount(drawn, minlength=3).double() / len(drawn)).tolist()
    if any(not 0.25 <= s <= 0.42 for s in shares):
        fail("not-balanced", observed=f"class shares of the drawn samples: {[round(s, 3) for s in shares]} "
             f"(dataset: {[round(c / n, 3) for c in torch.bincount(labels).tolist()]})", expected="about 1/3 each",
             cause="the weight of a sample must be 1 / (the count of its class): weights proportional to the count "
             "favour the majority even more", where="weights = 1.0 / torch.bincount(labels)[labels]")
    if again != epochs[0]:
        fail("not-reproducible", observed="two samplers built with identically seeded generators drew different "
             "indices", expected="the same indices", cause="the generator passed in is not given to the sampler",
             where="WeightedRandomSampler(..., generator=generator)")
    if other == epochs[0]:
        fail("ignores-generator", observed="a generator with another seed drew the same indices",
             expected="different indices", cause="a fixed seed inside the function", where="use the generator given")
    return "per-sample inverse-frequency weights, with replacement, len(labels) draws, following the generator"


_SAMPLER_SOLUTION = '''import torch
from torch.utils.data import WeightedRandomSampler


def balanced_sampler(labels, generator):
    counts = torch.bincount(labels)
    weights = 1.0 / counts[labels].double()  # one weight per sample
    return WeightedRandomSampler(weights, num_samples=len(labels), replacement=True, generator=generator)
'''


def _judge_train_loader(seen: dict, *, case: Case) -> str:
    size, batch_size, _ = loader_setup(case)
    epochs, again, other = seen.get("epochs"), seen.get("again"), seen.get("other")
    if not isinstance(epochs, list) or len(epochs) != 2:
        malformed("epochs missing")
    runs = [*epochs, again, other]
    for run in runs:
        if not isinstance(run, list) or not all(isinstance(b, torch.Tensor) and b.dim() == 2 and b.shape[1] == 2
                                                for b in run):
            malformed("batches malformed")
    full = size // batch_size
    for run in runs:
        sizes = [b.shape[0] for b in run]
        if sizes != [batch_size] * full:
            fail("incomplete-last-batch" if sizes[:full] == [batch_size] * full else "wrong-batches",
                 observed=f"batch sizes {sizes} for {size} items", expected=f"{[batch_size] * full}",
                 cause="the last, incomplete batch is kept: a batch of 1 breaks BatchNorm, and a small one makes a "
                 "noisy step", where="DataLoader(..., drop_last=True)")
    orders = [torch.cat([b[:, 0] for b in run]).tolist() for run in runs]
    if any(len(set(o)) != len(o) or not set(o) <= set(range(size)) for o in orders):
        fail("wrong-batches", observed="an epoch repeats or invents indices", expected="each index at most once",
             cause="a sampler other than a shuffled pass over the dataset", where="shuffle=True")
    if orders[0] == sorted(orders[0]):
        fail("not-shuffled", observed="the first epoch visits the items in order", expected="a shuffled order",
             cause="shuffle is off", where="DataLoader(..., shuffle=True, generator=...)")
    if orders[0] == orders[1]:
        fail("same-order-every-epoch", observed="epochs 1 and 2 visit the items in the same order",
             expected="a new order every epoch", cause="a fixed permutation built once",
             where="DataLoader(..., shuffle=True, generator=torch.Generator().manual_seed(seed))")
    if orders[2] != orders[0]:
        fail("not-reproducible", observed="two loaders built with the same seed shuffled differently",
             expected="the same order", cause="shuffle=True without a seeded generator uses torch's global RNG",
             where="generator=torch.Generator().manual_seed(seed)")
    if orders[3] == orders[0]:
        fail("ignores-seed", observed="another seed gave the same order", expected="a different order",
             cause="a seed hard-coded inside the function", where="manual_seed(seed)")
    pids = [set(torch.cat([b[:, 1] for b in run]).tolist()) for run in epochs]
    main_pid = seen.get("main_pid")
    if main_pid in pids[0] or len(pids[0]) != 2:
        fail("wrong-workers", observed=f"batches loaded by {len(pids[0])} process(es)"
             + (", the main one included" if main_pid in pids[0] else ""), expected="2 worker processes",
             cause="num_workers is not 2", where="DataLoader(..., num_workers=2)")
    if pids[0] != pids[1]:
        fail("workers-restarted", observed="epoch 2 was loaded by new worker processes",
             expected="the same 2 workers in every epoch", cause="without persistent_workers=True the workers (and "
             "the dataset copies they hold) are torn down and forked again every epoch",
             where="DataLoader(..., persistent_workers=True)")
    if seen.get("pin_memory") is True and seen.get("cuda") is False:
        fail("pin-memory-without-gpu", observed="pin_memory=True on a machine without CUDA",
             expected="pin_memory=torch.cuda.is_available()", cause="pinned memory only speeds up copies to a GPU; "
             "without one, torch warns and ignores it", where="DataLoader(..., pin_memory=torch.cuda.is_available())")
    return "shuffled reproducibly per epoch, full batches only, 2 persistent workers"


_LOADER_SOLUTION = '''import torch
from torch.utils.data import DataLoader


def make_train_loader(dataset, batch_size, seed):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        drop_last=True,
        num_workers=2,
        persistent_workers=True,
        pin_memory=torch.cuda.is_available(),
    )
'''


add_answers(
    Answers(
        drill_id="data-balanced-sampler",
        solution=_SAMPLER_SOLUTION,
        wrong_answers=(
            (edited(_SAMPLER_SOLUTION, ("1.0 / counts[labels].double()", "counts[labels].double()")), "not-balanced"),
            (edited(_SAMPLER_SOLUTION,
                    ("WeightedRandomSampler(weights,", "WeightedRandomSampler(1.0 / counts.double(),")),
             "weights-per-class"),
            (edited(_SAMPLER_SOLUTION, ("replacement=True", "replacement=False")), "no-replacement"),
            (edited(_SAMPLER_SOLUTION, (", generator=generator)", ")")), "not-reproducible"),
        ),
        judge=_judge_sampler,
    )
)


add_answers(
    Answers(
        drill_id="data-train-loader",
        solution=_LOADER_SOLUTION,
        wrong_answers=(
            (edited(_LOADER_SOLUTION, ("        drop_last=True,\n", "")), "incomplete-last-batch"),
            (edited(_LOADER_SOLUTION, ("        persistent_workers=True,\n", "")), "workers-restarted"),
            (edited(_LOADER_SOLUTION, ("        generator=torch.Generator().manual_seed(seed),\n", "")),
             "not-reproducible"),
            (edited(_LOADER_SOLUTION,
                    ("        num_workers=2,\n        persistent_workers=True,\n", "")),
             "wrong-workers"),
        ),
        judge=_judge_train_loader,
    )
)


add_answers(
    choice_answers(
        "data-normalisation-leakage",
        options=(
            ("each split's own mean and std",
             "the model was trained on inputs shifted by the training statistics; other statistics move the inputs"),
            ("the training split's mean and std",
             "right: at deployment only the training data's statistics exist, and the test data must not leak in"),
            ("the mean and std of all splits together",
             "the test data then shapes what training sees: leakage, and an optimistic test score"),
            ("any of them: standardising is invariant",
             "the model sees different numbers for the same raw input depending on the statistics used"),
        ),
        key="b",
    )
)
