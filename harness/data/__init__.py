"""Datasets for the course, all offline: real digits, procedural shapes, tabular toys, the adding problem,
and FashionMNIST/CIFAR-10 from local files; `make_loaders` turns any of them into train/val/test loaders.

Every dataset is a `torch.utils.data.TensorDataset` of float32 inputs (a `LabeledTensorDataset`, which also
carries class names and an optional transform).
"""

from harness.data.loaders import Loaders, Normalized, make_loaders, normalization_stats
from harness.data.procedural_shapes import SHAPE_CLASSES, shapes
from harness.data.sequences import adding_problem
from harness.data.sklearn_digits import digits
from harness.data.splits import check_disjoint, split_indices
from harness.data.tensors import LabeledTensorDataset
from harness.data.toys import binary_toy, spirals, two_moons
from harness.data.vision import VISION_DATASETS, data_root, vision_dataset

__all__ = [
    "SHAPE_CLASSES",
    "VISION_DATASETS",
    "LabeledTensorDataset",
    "Loaders",
    "Normalized",
    "adding_problem",
    "binary_toy",
    "check_disjoint",
    "data_root",
    "digits",
    "make_loaders",
    "normalization_stats",
    "shapes",
    "spirals",
    "split_indices",
    "two_moons",
    "vision_dataset",
]
