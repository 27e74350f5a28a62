"""DataLoaders for training: seeded, leak-free train/val/test splits, normalised with training statistics."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from harness.data.splits import check_disjoint, split_indices
from harness.env import select_device
from harness.repro import make_generator, seed_worker


@dataclass(frozen=True)
class Loaders:
    """The three loaders of one dataset, with the split indices and normalisation statistics.

    Attributes:
        train: shuffled every epoch by a seeded generator.
        val: in a fixed order; None when val_fraction is 0.
        test: in a fixed order; None when test_fraction is 0.
        mean: per-channel (images) or per-feature statistics of the training split; None when not normalised.
        std: the same for the standard deviation.
        indices: the dataset indices of each split, keyed "train", "val", "test".
    """

    train: DataLoader
    val: DataLoader | None
    test: DataLoader | None
    mean: torch.Tensor | None
    std: torch.Tensor | None
    indices: dict[str, torch.Tensor]


class Normalized(Dataset):
    """`dataset` with each input standardised as (x - mean) / std; targets unchanged."""

    def __init__(self, dataset: Dataset, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.dataset, self.mean, self.std = dataset, mean, std

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, target = self.dataset[index]
        return (inputs - self.mean) / self.std, target


def normalization_stats(inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of `inputs`, shaped to broadcast against one sample.

    (N, C, H, W) images give per-channel statistics of shape (C, 1, 1); (N, F) tables and (N, T, F)
    sequences give per-feature statistics of shape (F,). A constant feature (std 0, e.g. a digits pixel
    that is blank in every image) gets std 1, so it maps to 0 instead of dividing by zero.
    """
    if inputs.dim() == 4:
        dims, shape = (0, 2, 3), (-1, 1, 1)
    elif inputs.dim() in (2, 3):
        dims, shape = tuple(range(inputs.dim() - 1)), (-1,)
    else:
        raise ValueError(
            f"Cannot normalise inputs of shape {tuple(inputs.shape)}: expected (N, C, H, W) images, (N, F) "
            "features or (N, T, F) sequences. Pass normalize=False and normalise in the model instead."
        )
    inputs = inputs.double()  # float32 sums over millions of pixels lose digits
    mean = inputs.mean(dim=dims)
    std = inputs.std(dim=dims, correction=0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return mean.float().reshape(shape), std.float().reshape(shape)


def _training_inputs(dataset: Dataset, indices: torch.Tensor) -> torch.Tensor:
    """The raw inputs of the training split, stacked: read straight from a TensorDataset's first tensor,
    sample by sample otherwise."""
    tensors = getattr(dataset, "tensors", None)
    if tensors is not None:
        return tensors[0][indices]
    return torch.stack([torch.as_tensor(dataset[i][0]) for i in indices.tolist()])


def _check_arguments(n: int, batch_size: int, val_fraction: float, test_fraction: float, num_workers: int) -> None:
    """Reject arguments that cannot make three sensible loaders, saying which one and what is allowed."""
    if n < 1:
        raise ValueError("make_loaders: the dataset is empty.")
    if batch_size < 1:
        raise ValueError(f"make_loaders(batch_size={batch_size}): batch_size must be at least 1.")
    if num_workers < 0:
        raise ValueError(f"make_loaders(num_workers={num_workers}): use 0 (load in this process) or more.")
    for name, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 <= fraction < 1:
            raise ValueError(f"make_loaders({name}={fraction}): must be in [0, 1).")
    if val_fraction + test_fraction >= 1:
        raise ValueError(
            f"make_loaders(val_fraction={val_fraction}, test_fraction={test_fraction}): together they leave "
            "no training data; keep their sum below 1 (e.g. 0.1 and 0.1)."
        )


def make_loaders(
    dataset: Dataset,
    *,
    batch_size: int = 64,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
    num_workers: int = 0,
    normalize: bool = True,
    device: str | torch.device | None = None,
    generator: torch.Generator | None = None,
) -> Loaders:
    """Split `dataset` into train/val/test, normalise with training statistics, and wrap each in a DataLoader.

    Args:
        dataset: a dataset of (input, target) pairs, typically one of `harness.data`'s TensorDatasets.
        batch_size: samples per batch, for all three loaders.
        val_fraction: share of the samples held out for validation (0 for none).
        test_fraction: share of the samples held out for the final test (0 for none).
        seed: seeds the split and, unless `generator` is given, the training shuffle.
        num_workers: worker processes per loader (0 loads in this process); workers are seeded with
            `harness.repro.seed_worker` and kept alive between epochs. `fit(resume=True)` gives a resumed
            run the same batches in the same order as an uninterrupted one, with or without workers. A
            random transform run inside the workers would not resume exactly: a kept-alive worker carries
            its random stream from epoch to epoch, a resumed process restarts it (these datasets have none).
        normalize: standardise inputs with the training split's mean and std (see `normalization_stats`).
        device: where the batches will go; pinned host memory is used when it is CUDA. None: select_device().
        generator: the training shuffle's generator (default: `make_generator(seed)`); pass your own to
            save and restore its state with a checkpoint.

    Returns:
        Loaders with train, val, test, mean, std and the split indices.

    Raises:
        ValueError: an empty dataset, bad batch size, worker count or fractions, or a split that would be
            empty although its fraction is not 0.
    """
    n = len(dataset)  # type: ignore[arg-type]
    _check_arguments(n, batch_size, val_fraction, test_fraction, num_workers)
    fractions = {"train": 1.0 - val_fraction - test_fraction, "val": val_fraction, "test": test_fraction}
    parts = dict(zip(fractions, split_indices(n, list(fractions.values()), seed), strict=True))
    for name, indices in parts.items():
        if fractions[name] > 0 and len(indices) == 0:
            raise ValueError(
                f"make_loaders: {name}_fraction={fractions[name]:g} of {n} samples leaves the {name} split empty; "
                "use a larger dataset or fraction."
            )
    check_disjoint(*parts.values())
    mean = std = None
    if normalize:
        mean, std = normalization_stats(_training_inputs(dataset, parts["train"]))
        dataset = Normalized(dataset, mean, std)
    options = {
        "batch_size": batch_size,
        "num_workers": num_workers,
        "worker_init_fn": seed_worker,
        "pin_memory": select_device(device).type == "cuda",  # pinned pages make host-to-GPU copies async
        "persistent_workers": num_workers > 0,
    }
    shuffle_generator = generator if generator is not None else make_generator(seed)
    train = DataLoader(Subset(dataset, parts["train"].tolist()), shuffle=True, generator=shuffle_generator, **options)
    val, test = (
        # Their own seeded generators keep worker seeds (and so any random transform) reproducible too.
        DataLoader(Subset(dataset, parts[name].tolist()), shuffle=False, generator=make_generator(seed), **options)
        if len(parts[name])
        else None
        for name in ("val", "test")
    )
    return Loaders(train=train, val=val, test=test, mean=mean, std=std, indices=parts)
