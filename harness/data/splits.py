"""Random splits of a dataset's indices into parts that never overlap."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from harness.repro import make_generator


def split_indices(n: int, fractions: Sequence[float], seed: int) -> tuple[torch.Tensor, ...]:
    """Shuffle 0..n-1 with `seed` and cut it into parts of the given fractions.

    Part sizes are the floors of fraction * n, the leftover samples going to the parts with the largest
    remainders (so sizes add up to n and differ from the exact shares by less than one).

    Args:
        n: number of samples.
        fractions: one fraction per part, each in [0, 1], adding up to 1 (e.g. (0.8, 0.1, 0.1)).
        seed: the seed of the shuffle.

    Returns:
        One int64 index tensor per part, disjoint and together covering 0..n-1.

    Raises:
        ValueError: n < 1, a fraction outside [0, 1], or fractions that do not add up to 1.
    """
    if n < 1:
        raise ValueError(f"split_indices(n={n}): there is nothing to split.")
    if not fractions or any(not 0 <= f <= 1 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(
            f"split_indices(fractions={tuple(fractions)}): give one fraction in [0, 1] per part, adding up to 1 "
            "(e.g. (0.8, 0.1, 0.1))."
        )
    shares = [f * n for f in fractions]
    sizes = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: shares[i] - sizes[i], reverse=True)
    for i in by_remainder[: n - sum(sizes)]:
        sizes[i] += 1
    permutation = torch.randperm(n, generator=make_generator(seed))
    return tuple(torch.split(permutation, sizes))


def check_disjoint(*index_sets: Sequence[int] | torch.Tensor) -> None:
    """Raise if any index appears in more than one of the sets (a sample shared by train and test leaks).

    Raises:
        ValueError: naming the overlapping pairs of sets and (up to ten of) the shared indices.
    """
    sets = [set(torch.as_tensor(indices, dtype=torch.int64).tolist()) for indices in index_sets]
    overlaps = []
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            shared = sorted(sets[i] & sets[j])
            if shared:
                shown = ", ".join(map(str, shared[:10])) + (", ..." if len(shared) > 10 else "")
                overlaps.append(f"sets {i} and {j} share {len(shared)} indices ({shown})")
    if overlaps:
        raise ValueError(
            "Index sets overlap: " + "; ".join(overlaps) + ". Every sample must be in exactly one split: "
            "build the splits with split_indices()."
        )
