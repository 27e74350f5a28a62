"""harness.data.vision_dataset: FashionMNIST and CIFAR-10 read from small files in torchvision's own format."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torchvision.transforms.functional import pil_to_tensor

from harness.data import data_root, vision_dataset

FASHION_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An idx-ubyte file as in the MNIST family: magic (0, 0, type 0x08 = ubyte, ndim), sizes, data."""
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_fashion_mnist(root: Path, train: int = 6, test: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, test),
    }
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name, array in arrays.items():
        write_idx(raw / name, array)
    return arrays


def write_cifar10(root: Path, per_batch: int = 2, test: int = 3) -> dict[str, dict]:
    """cifar-10-batches-py as in the original archive: pickled dicts of uint8 rows (R, G, B planes) and labels."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {}
    for name, size in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", test)]:
        pixels = rng.integers(0, 256, (size, 3072), dtype=np.uint8)
        batches[name] = {"data": pixels, "labels": rng.integers(0, 10, size).tolist()}
        (folder / name).write_bytes(pickle.dumps(batches[name], protocol=2))
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return batches


def test_fashion_mnist_reads_torchvisions_raw_files(tmp_path: Path) -> None:
    arrays = write_fashion_mnist(tmp_path)
    train = vision_dataset("fashionmnist", root=tmp_path)
    images, labels = train.tensors
    assert images.shape == (6, 1, 28, 28) and images.dtype == torch.float32
    assert torch.equal(images[:, 0] * 255, torch.as_tensor(arrays["train-images-idx3-ubyte"], dtype=torch.float32))
    assert labels.dtype == torch.int64 and labels.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert train.classes == tuple(torchvision.datasets.FashionMNIST.classes)
    oracle = torchvision.datasets.FashionMNIST(str(tmp_path), train=False)
    test = vision_dataset("FashionMNIST", train=False, root=tmp_path)
    assert len(test) == 4
    assert torch.equal(test[3][0] * 255, pil_to_tensor(oracle[3][0]).float())


def test_cifar10_reads_the_python_batches(tmp_path: Path) -> None:
    batches = write_cifar10(tmp_path)
    train = vision_dataset("cifar10", root=tmp_path, check_md5=False)
    images, labels = train.tensors
    assert images.shape == (10, 3, 32, 32)
    row = batches["data_batch_3"]["data"][1]  # sample 5: R plane, then G, then B, each row-major 32x32
    assert images[5, 1, 2, 3] * 255 == row[1024 + 2 * 32 + 3]
    assert labels.tolist() == sum((batches[f"data_batch_{i}"]["labels"] for i in range(1, 6)), [])
    assert train.classes[0] == "airplane" and len(train.classes) == 10
    test = vision_dataset("CIFAR-10", train=False, root=tmp_path, check_md5=False)
    assert len(test) == 3


def test_cifar10_files_that_are_not_the_originals_fail_the_checksum(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    with pytest.raises(ValueError, match="data_batch_1 does not match the published CIFAR-10 checksum"):
        vision_dataset("cifar10", root=tmp_path)


def test_the_data_folder_comes_from_the_variable_or_defaults_to_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESS_DATA_DIR", raising=False)
    assert data_root() == Path("data")
    assert data_root(tmp_path) == tmp_path
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path))
    assert data_root() == tmp_path
    write_fashion_mnist(tmp_path)
    assert len(vision_dataset("fashionmnist")) == 6


def test_download_is_a_no_op_when_the_files_are_there(tmp_path: Path) -> None:
    write_fashion_mnist(tmp_path)  # nothing here can reach the network: a download attempt would fail
    assert len(vision_dataset("fashionmnist", root=tmp_path, download=True)) == 6


def test_transform_applies_to_each_image(tmp_path: Path) -> None:
    write_fashion_mnist(tmp_path)
    dataset = vision_dataset("fashionmnist", root=tmp_path, transform=lambda image: image.flip(-1))
    assert torch.equal(dataset[0][0], dataset.tensors[0][0].flip(-1))


def test_missing_files_say_what_to_put_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as error:
        vision_dataset("fashionmnist", root=tmp_path)
    message = str(error.value)
    assert str((tmp_path / "FashionMNIST" / "raw").resolve()) in message
    assert all(name in message for name in FASHION_FILES)
    assert "download=True" in message and "HARNESS_DATA_DIR" in message


def test_a_partly_missing_dataset_names_only_the_missing_files(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing data_batch_4\. .*cifar-10-python\.tar\.gz"):
        vision_dataset("cifar10", root=tmp_path, check_md5=False)
    assert len(vision_dataset("cifar10", train=False, root=tmp_path, check_md5=False)) == 3


def test_unknown_dataset_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="choose one of fashionmnist, cifar10"):
        vision_dataset("imagenet", root=tmp_path)
