"""FashionMNIST and CIFAR-10 from local files in torchvision's layout, downloaded only when asked to."""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from harness.data.tensors import LabeledTensorDataset

DATA_DIR_ENV_VAR = "HARNESS_DATA_DIR"
VISION_DATASETS = ("fashionmnist", "cifar10")

_FASHION_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where datasets live: `root`, else HARNESS_DATA_DIR, else ./data."""
    return Path(root if root is not None else os.environ.get(DATA_DIR_ENV_VAR) or "data")


def vision_dataset(
    name: str,
    *,
    train: bool = True,
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    check_md5: bool = True,
) -> LabeledTensorDataset:
    """FashionMNIST or CIFAR-10 as tensors, read from `root` in torchvision's on-disk layout.

    Nothing is downloaded unless `download=True` (which needs the network); then torchvision fetches the
    archives and verifies them against their published checksums.

    Args:
        name: "fashionmnist" or "cifar10".
        train: the training split (else the test split).
        root: the data folder (default: HARNESS_DATA_DIR, else ./data).
        download: fetch the files with torchvision when they are missing.
        transform: applied to each image tensor (C, H, W) when it is read, e.g. a transforms.v2 augmentation.
        check_md5: CIFAR-10 only: verify each batch file against torchvision's published MD5 (turn off only
            for files you built yourself; FashionMNIST's raw files carry no checksum in torchvision).

    Returns:
        A dataset of X (N, C, H, W) float32 in [0, 1] (1x28x28 FashionMNIST, 3x32x32 CIFAR-10) and y (N,)
        int64, with `classes` the class names.

    Raises:
        ValueError: an unknown name, or a CIFAR-10 file whose checksum does not match.
        FileNotFoundError: files are missing and download is False; the message lists them and their place.
    """
    key = name.strip().lower().replace("-", "").replace("_", "")
    if key not in VISION_DATASETS:
        raise ValueError(f"vision_dataset({name!r}): unknown dataset; choose one of {', '.join(VISION_DATASETS)}.")
    folder = data_root(root)
    if download:
        _download(key, folder)
    if key == "fashionmnist":
        images, labels, classes = _load_fashion_mnist(folder, train)
    else:
        images, labels, classes = _load_cifar10(folder, train, check_md5)
    inputs = torch.from_numpy(np.ascontiguousarray(images)).to(torch.float32).div_(255.0)
    return LabeledTensorDataset(inputs, labels, classes=classes, transform=transform)


def _download(key: str, folder: Path) -> None:
    """Fetch and verify the archives with torchvision (a no-op where the files are already there)."""
    import torchvision  # imported here: a second or more that lessons not reading these files never pay
    dataset_class = torchvision.datasets.FashionMNIST if key == "fashionmnist" else torchvision.datasets.CIFAR10
    dataset_class(str(folder), train=True, download=True)


def _require_files(name: str, directory: Path, files: list[str], archive: str) -> None:
    """Raise FileNotFoundError listing the missing files, where they belong, and how to get them."""
    missing = [file for file in files if not (directory / file).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{name} is not in {directory.resolve()}: missing {', '.join(missing)}. Either put the files "
            f"there (extract {archive} so that {directory.resolve()} holds {', '.join(files)}), point "
            f"{DATA_DIR_ENV_VAR} or root= at the folder that holds them, or pass download=True on a machine "
            "with network access."
        )


def _load_fashion_mnist(folder: Path, train: bool) -> tuple[np.ndarray, torch.Tensor, tuple[str, ...]]:
    """Images (N, 1, 28, 28) uint8, labels and class names, read by torchvision from the raw idx files."""
    import torchvision  # imported here: a second or more that lessons not reading these files never pay
    raw = folder / "FashionMNIST" / "raw"
    archive = "the four *-ubyte.gz files from zalandoresearch/fashion-mnist"
    _require_files("FashionMNIST", raw, list(_FASHION_FILES), archive)
    dataset = torchvision.datasets.FashionMNIST(str(folder), train=train, download=False)
    return dataset.data.numpy()[:, None], dataset.targets.to(torch.int64), tuple(dataset.classes)


def _load_cifar10(folder: Path, train: bool, check_md5: bool) -> tuple[np.ndarray, torch.Tensor, tuple[str, ...]]:
    """Images (N, 3, 32, 32) uint8, labels and class names, from the python pickles of cifar-10-python.tar.gz.

    torchvision's CIFAR10 insists on the published MD5 of every batch; reading the pickles here (the same
    format and the same few lines torchvision runs) lets that check be a choice, `check_md5`.
    """
    import torchvision  # imported here: a second or more that lessons not reading these files never pay
    cifar_folder, cifar_meta = torchvision.datasets.CIFAR10.base_folder, torchvision.datasets.CIFAR10.meta
    directory = folder / cifar_folder
    batches = torchvision.datasets.CIFAR10.train_list if train else torchvision.datasets.CIFAR10.test_list
    files = [file for file, _ in batches] + [cifar_meta["filename"]]
    _require_files("CIFAR-10", directory, files, "cifar-10-python.tar.gz")
    images, labels = [], []
    for file, md5 in batches:
        entry = _read_pickle(directory / file, md5 if check_md5 else None)
        images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(entry["labels"])
    meta = _read_pickle(directory / cifar_meta["filename"], cifar_meta["md5"] if check_md5 else None)
    return np.concatenate(images), torch.tensor(labels, dtype=torch.int64), tuple(meta[cifar_meta["key"]])


def _read_pickle(path: Path, md5: str | None) -> dict:
    """Unpickle one CIFAR file after checking its MD5 (when one is given)."""
    data = path.read_bytes()
    if md5 is not None and hashlib.md5(data).hexdigest() != md5:
        raise ValueError(
            f"{path} does not match the published CIFAR-10 checksum (MD5 {md5}): the file is corrupt or not the "
            "original. Delete the folder and download again (download=True), or pass check_md5=False for files "
            "you built yourself."
        )
    return pickle.loads(data, encoding="latin1")
