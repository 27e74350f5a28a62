"""Shapes: a procedural image classification set that generates in seconds and needs a real CNN.

Each image is one coloured shape (the class) at a random position, size and rotation on a noisy, shaded
background. Colours are drawn independently of the class, and the shapes are sized to cover about the
same area, so neither mean colour nor brightness gives the class away: a model has to see the outline.
Everything is computed with batched tensor ops from one seeded generator, so a seed gives the same set on
every machine (on CPU, where it is generated).
"""

from __future__ import annotations

import math

import torch

from harness.data.tensors import LabeledTensorDataset

SHAPE_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "cross", "ring")

# Sizes in units of the shape's radius, chosen so that every class covers about 2.5 radius² of the image.
_CIRCLE_RADIUS = 0.9
_SQUARE_HALF_SIDE = 0.79
_TRIANGLE_INRADIUS = 0.695
_CROSS_HALF_WIDTH = 0.38
_RING_MID, _RING_HALF_WIDTH = 0.725, 0.275
_EXTENT = 1.4  # the farthest any shape reaches from its centre, in radii (the triangle's corners)
_CHUNK = 4096  # images per batch of tensor ops: bounds the temporary memory, large enough to be fast


def shapes(
    n: int,
    *,
    seed: int = 0,
    size: int = 32,
    scale: tuple[float, float] = (0.16, 0.28),
    noise: tuple[float, float] = (0.02, 0.1),
) -> LabeledTensorDataset:
    """`n` images of coloured shapes on noisy backgrounds, labelled by shape (`SHAPE_CLASSES`).

    Args:
        n: number of images.
        seed: the seed; the same seed and arguments give the same images.
        size: image height and width in pixels (at least 16).
        scale: range of the shape's radius as a fraction of `size`.
        noise: range of the per-image standard deviation of the pixel noise.

    Returns:
        A dataset of X (n, 3, size, size) float32 in [0, 1] and y (n,) int64 in [0, len(SHAPE_CLASSES)).

    Raises:
        ValueError: n < 1, size < 16, or a range outside what keeps the shape inside the image.
    """
    _validate(n, size, scale, noise)
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(len(SHAPE_CLASSES), (n,), generator=generator)
    params = _draw_parameters(n, size, scale, noise, generator)
    images = torch.empty(n, 3, size, size)
    for start in range(0, n, _CHUNK):
        chunk = slice(start, min(start + _CHUNK, n))
        images[chunk] = _render(labels[chunk], {key: value[chunk] for key, value in params.items()}, size, generator)
    return LabeledTensorDataset(images, labels, classes=SHAPE_CLASSES)


def _validate(n: int, size: int, scale: tuple[float, float], noise: tuple[float, float]) -> None:
    """Reject arguments that would give an empty set or shapes cut by the image border."""
    if n < 1:
        raise ValueError(f"shapes(n={n}): n must be at least 1.")
    if size < 16:
        raise ValueError(f"shapes(size={size}): images smaller than 16 pixels cannot show the shapes apart.")
    low, high = scale
    if not 0 < low <= high <= 1 / (2 * _EXTENT) - 1 / size:
        raise ValueError(
            f"shapes(scale={scale}): need 0 < low <= high <= {1 / (2 * _EXTENT) - 1 / size:.3f} so that every "
            "shape fits inside the image."
        )
    if not 0 <= noise[0] <= noise[1]:
        raise ValueError(f"shapes(noise={noise}): need 0 <= low <= high.")


def _uniform(shape: tuple[int, ...], low: float, high: float, generator: torch.Generator) -> torch.Tensor:
    """Uniform samples in [low, high)."""
    return low + (high - low) * torch.rand(shape, generator=generator)


def _draw_parameters(
    n: int, size: int, scale: tuple[float, float], noise: tuple[float, float], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Per-image radius, centre, rotation, colours, background shading and noise level."""
    radius = _uniform((n,), scale[0] * size, scale[1] * size, generator)
    margin = _EXTENT * radius + 0.5
    centre = margin[:, None] + (size - 2 * margin[:, None]) * torch.rand((n, 2), generator=generator)
    background = torch.rand((n, 3), generator=generator)
    # Each foreground channel is 0.3 to 0.7 away from the background's (modulo 1): always visible, and still
    # uniformly distributed, so colour says nothing about the class.
    foreground = torch.remainder(background + _uniform((n, 3), 0.3, 0.7, generator), 1.0)
    return {
        "radius": radius,
        "centre": centre,
        "angle": _uniform((n,), 0.0, 2 * math.pi, generator),
        "background": background,
        "foreground": foreground,
        "shade_angle": _uniform((n,), 0.0, 2 * math.pi, generator),
        "shade": _uniform((n,), 0.0, 0.15, generator),
        "noise": _uniform((n,), noise[0], noise[1], generator),
    }


def _render(
    labels: torch.Tensor, params: dict[str, torch.Tensor], size: int, generator: torch.Generator
) -> torch.Tensor:
    """Images (B, 3, size, size) of the shapes `labels` drawn with `params` (each of leading size B)."""
    alpha = torch.empty(len(labels), 1, size, size)  # how much of each pixel the shape covers
    for label, name in enumerate(SHAPE_CLASSES):
        # Only each image's own shape is evaluated: one group of images per class.
        rows = (labels == label).nonzero().squeeze(1)
        if len(rows):
            group = {key: value[rows] for key, value in params.items()}
            u, v = _shape_coordinates(group, size)
            alpha[rows, 0] = _coverage(_SIGNED_DISTANCES[name](u, v), group["radius"])
    image = params["background"][:, :, None, None] + _shading(params, size)  # (B, 3, size, size)
    image.lerp_(params["foreground"][:, :, None, None].expand_as(image), alpha)
    image.add_(torch.randn(image.shape, generator=generator).mul_(params["noise"][:, None, None, None]))
    return image.clamp_(0.0, 1.0)


def _coverage(distance: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """Anti-aliased coverage from a signed distance in radii: 1 inside, 0 outside, linear across the one
    pixel that straddles the edge."""
    return distance.mul_(-radius[:, None, None]).add_(0.5).clamp_(0.0, 1.0)


def _pixel_grid(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y of the pixel centres, (size, size) each."""
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    return coords[None, :].expand(size, size), coords[:, None].expand(size, size)


def _shape_coordinates(params: dict[str, torch.Tensor], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixel positions in each shape's own frame: centred, rotated, in units of its radius."""
    x, y = _pixel_grid(size)
    dx = x[None] - params["centre"][:, 0, None, None]
    dy = y[None] - params["centre"][:, 1, None, None]
    cos, sin = torch.cos(params["angle"])[:, None, None], torch.sin(params["angle"])[:, None, None]
    radius = params["radius"][:, None, None]
    return (cos * dx + sin * dy) / radius, (cos * dy - sin * dx) / radius


# Signed distance (in radii, negative inside) from each pixel to each class's shape, in the shape's frame.
def _circle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.hypot(u, v) - _CIRCLE_RADIUS


def _square(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.maximum(u.abs(), v.abs()) - _SQUARE_HALF_SIDE


def _triangle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # The intersection of three half-planes whose outward normals point at -90, 30 and 150 degrees.
    return torch.maximum(torch.maximum(-v, 0.866 * u + 0.5 * v), -0.866 * u + 0.5 * v) - _TRIANGLE_INRADIUS


def _cross(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    au, av = u.abs(), v.abs()
    horizontal_bar = torch.maximum(au - 1.0, av - _CROSS_HALF_WIDTH)
    vertical_bar = torch.maximum(au - _CROSS_HALF_WIDTH, av - 1.0)
    return torch.minimum(horizontal_bar, vertical_bar)


def _ring(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (torch.hypot(u, v) - _RING_MID).abs_() - _RING_HALF_WIDTH


_SIGNED_DISTANCES = {"circle": _circle, "square": _square, "triangle": _triangle, "cross": _cross, "ring": _ring}


def _shading(params: dict[str, torch.Tensor], size: int) -> torch.Tensor:
    """A linear brightness ramp across the background in a random direction: (B, 1, size, size)."""
    x, y = _pixel_grid(size)
    direction_x = torch.cos(params["shade_angle"])[:, None, None]
    direction_y = torch.sin(params["shade_angle"])[:, None, None]
    ramp = (direction_x * (x[None] / size - 0.5) + direction_y * (y[None] / size - 0.5)) * 2
    return (params["shade"][:, None, None] * ramp)[:, None]
