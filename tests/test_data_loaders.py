"""harness.data splits and loaders: disjoint seeded splits, training-only statistics, seeded shuffling."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from harness.data import (
    LabeledTensorDataset,
    check_disjoint,
    digits,
    make_loaders,
    normalization_stats,
    shapes,
    split_indices,
)
from harness.repro import make_generator


def indexed_dataset(n: int) -> TensorDataset:
    """Inputs that are their own index, so a batch tells which samples it holds."""
    return TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.zeros(n, dtype=torch.int64))


def epoch_order(loader) -> list[int]:
    return [int(x) for inputs, _ in loader for x in inputs.flatten()]


def test_split_sizes_add_up_and_parts_cover_everything_once() -> None:
    parts = split_indices(1797, (0.8, 0.1, 0.1), seed=0)
    assert [len(p) for p in parts] == [1437, 180, 180]  # 1437.6, 179.7, 179.7: leftovers to largest remainders
    assert sorted(torch.cat(parts).tolist()) == list(range(1797))
    assert all(p.dtype == torch.int64 for p in parts)


def test_split_depends_on_the_seed_only() -> None:
    first, again, other = (split_indices(100, (0.5, 0.5), seed=s) for s in (1, 1, 2))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


@pytest.mark.parametrize("fractions", [(0.8, 0.1), (0.9, 0.2, -0.1), (1.5, -0.5), (), (0.5, 0.6)])
def test_bad_fractions_are_rejected(fractions: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="adding up to 1"):
        split_indices(10, fractions, seed=0)


def test_check_disjoint_accepts_disjoint_sets() -> None:
    check_disjoint([0, 1], torch.tensor([2, 3]), [])


def test_check_disjoint_names_the_overlap() -> None:
    with pytest.raises(ValueError, match=r"sets 0 and 1 share 1 indices \(2\); sets 0 and 2 share 1 indices \(1\)"):
        check_disjoint([0, 1, 2], [2, 3], torch.tensor([4, 1]))
    with pytest.raises(ValueError, match=r"share 12 indices \(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \.\.\.\)"):
        check_disjoint(range(12), range(12))


def test_loaders_hold_disjoint_splits_of_the_requested_sizes() -> None:
    loaders = make_loaders(indexed_dataset(200), batch_size=16, normalize=False, device="cpu")
    check_disjoint(*loaders.indices.values())
    assert [len(loaders.indices[name]) for name in ("train", "val", "test")] == [160, 20, 20]
    assert sorted(epoch_order(loaders.train)) == sorted(loaders.indices["train"].tolist())
    assert epoch_order(loaders.val) == loaders.indices["val"].tolist(), "validation is read in a fixed order"
    assert epoch_order(loaders.test) == loaders.indices["test"].tolist()
    assert loaders.mean is None and loaders.std is None


def test_same_seed_same_order_new_epoch_new_order_other_seed_other_order() -> None:
    def loaders(seed: int, **kwargs):
        return make_loaders(indexed_dataset(200), batch_size=16, seed=seed, normalize=False, device="cpu", **kwargs)

    first = loaders(seed=0)
    epoch_1, epoch_2 = epoch_order(first.train), epoch_order(first.train)
    assert epoch_1 != epoch_2 and sorted(epoch_1) == sorted(epoch_2)
    again = loaders(seed=0)
    assert [epoch_order(again.train), epoch_order(again.train)] == [epoch_1, epoch_2]
    assert epoch_order(loaders(seed=1).train) != epoch_1
    own = loaders(seed=0, generator=make_generator(1))
    assert torch.equal(own.indices["train"], first.indices["train"]), "the generator shuffles; the seed splits"
    assert epoch_order(own.train) != epoch_1


def test_image_statistics_come_from_the_training_split_per_channel() -> None:
    dataset = shapes(300, seed=0)
    images = dataset.tensors[0]
    loaders = make_loaders(dataset, batch_size=50, device="cpu")
    train = images[loaders.indices["train"]]
    assert loaders.mean.shape == loaders.std.shape == (3, 1, 1)
    assert torch.allclose(loaders.mean.flatten(), train.mean(dim=(0, 2, 3)), atol=1e-6)
    assert torch.allclose(loaders.std.flatten(), train.std(dim=(0, 2, 3), correction=0), atol=1e-6)
    assert not torch.allclose(loaders.mean.flatten(), images.mean(dim=(0, 2, 3)), atol=1e-4)
    normalised_train = torch.cat([x for x, _ in loaders.train])
    assert torch.allclose(normalised_train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(normalised_train.std(dim=(0, 2, 3), correction=0), torch.ones(3), atol=1e-4)
    for split in ("val", "test"):  # the same training statistics, applied to every split
        batches = torch.cat([x for x, _ in getattr(loaders, split)])
        assert torch.allclose(batches * loaders.std + loaders.mean, images[loaders.indices[split]], atol=1e-5)


def test_tabular_statistics_are_per_feature() -> None:
    inputs = torch.randn(400, 5, generator=make_generator(0)) * torch.arange(1, 6) + 10
    loaders = make_loaders(TensorDataset(inputs, torch.zeros(400)), device="cpu")
    train = inputs[loaders.indices["train"]]
    assert loaders.mean.shape == (5,)
    assert torch.allclose(loaders.mean, train.mean(dim=0), atol=1e-5)
    assert torch.allclose(loaders.std, train.std(dim=0, correction=0), atol=1e-5)
    assert not torch.allclose(loaders.mean, inputs.mean(dim=0), atol=1e-4)


def test_constant_pixels_are_left_at_zero_instead_of_dividing_by_zero() -> None:
    loaders = make_loaders(digits(), device="cpu")
    batch, _ = next(iter(loaders.train))
    assert torch.isfinite(batch).all()
    assert normalization_stats(torch.zeros(4, 2))[1].tolist() == [1.0, 1.0]


def test_statistics_shapes_and_unsupported_inputs() -> None:
    mean, std = normalization_stats(torch.rand(8, 20, 2))  # sequences: per feature
    assert mean.shape == std.shape == (2,)
    with pytest.raises(ValueError, match="normalize=False"):
        normalization_stats(torch.rand(2, 3, 4, 5, 6))


class PairList(Dataset):
    """A dataset without `.tensors`: make_loaders must read it sample by sample."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.inputs = inputs

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.inputs[index], 0


def test_any_dataset_of_pairs_is_normalised_with_its_training_split() -> None:
    inputs = torch.rand(100, 3) * 4
    loaders = make_loaders(PairList(inputs), batch_size=10, device="cpu")
    assert torch.allclose(loaders.mean, inputs[loaders.indices["train"]].mean(dim=0), atol=1e-6)


def test_the_dataset_transform_runs_before_normalisation() -> None:
    images = torch.rand(50, 1, 4, 4)
    dataset = LabeledTensorDataset(images, torch.arange(50), transform=lambda x: x.flip(-1))  # target = index
    loaders = make_loaders(dataset, batch_size=50, val_fraction=0.0, test_fraction=0.0, device="cpu")
    assert loaders.val is None and loaders.test is None
    batch, indices = next(iter(loaders.train))
    assert torch.allclose(batch * loaders.std + loaders.mean, images[indices].flip(-1), atol=1e-6)


def test_cpu_batches_are_not_pinned() -> None:
    assert make_loaders(indexed_dataset(20), device="cpu").train.pin_memory is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batches_are_pinned() -> None:
    batch, _ = next(iter(make_loaders(indexed_dataset(20), device="cuda").train))
    assert batch.is_pinned()


@pytest.mark.slow
def test_workers_are_seeded_persistent_and_reproducible() -> None:
    def epochs(workers: int) -> list[torch.Tensor]:
        loaders = make_loaders(shapes(64, seed=0), batch_size=8, num_workers=workers, device="cpu")
        assert loaders.train.persistent_workers == (workers > 0)
        return [torch.cat([x for x, _ in loaders.train]) for _ in range(2)]

    in_process, with_workers = epochs(0), epochs(2)
    assert torch.equal(with_workers[0], in_process[0])
    # Persistent workers keep their seeds across epochs, so later epochs follow their own (still seeded) order.
    assert [torch.equal(a, b) for a, b in zip(epochs(2), with_workers, strict=True)] == [True, True]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "no training data"),
        ({"val_fraction": -0.1}, r"val_fraction=-0.1\): must be in \[0, 1\)"),
        ({"test_fraction": 1.0}, r"test_fraction=1.0\): must be in \[0, 1\)"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"num_workers": -1}, "num_workers=-1"),
        ({"device": "cuda:99"}, "not available"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_loaders(indexed_dataset(100), **kwargs)


def test_splits_too_small_to_hold_a_sample_are_rejected() -> None:
    with pytest.raises(ValueError, match="leaves the val split empty"):
        make_loaders(indexed_dataset(3), device="cpu")
    with pytest.raises(ValueError, match="dataset is empty"):
        make_loaders(indexed_dataset(0), device="cpu")
