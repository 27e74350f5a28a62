"""Plots in words: the text alternative of a figure, written from the data it draws.

A screen reader reads an image's alt text, and a PNG of a loss curve has none to give. These functions
read the same numbers the plot draws and say what it shows: what is plotted, its range, its trend and the
best epoch, e.g. "Validation loss falls from 2.1 to 0.42 by epoch 7, then rises to 0.55 by epoch 10."
Numbers are written with 3 significant digits, as a reader of the plot would read them off its axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import pandas as pd


def number(value: float) -> str:
    """`value` with 3 significant digits: 2.1, 0.42, 0.000125, 1e-06."""
    return f"{value:.3g}"


def describe_series(name: str, steps: Sequence[float], values: Sequence[float], *, unit: str = "epoch") -> str:
    """How one curve moves, in at most three stretches: "validation loss falls from 2.1 to 0.42 by epoch 7, ...".

    The stretches end at the first and the last finite point and at the first lowest and first highest
    finite value, so a curve that falls and then rises is told as such, with its minimum. A stretch whose two
    ends read the same with 3 significant digits "stays at" that value, and a curve whose every stretch
    stays is flat. Points that are not finite (NaN, infinity) are left out of the stretches and named after
    them, with their steps.

    Args:
        name: what is plotted, in words ("validation loss").
        steps: the x value of each point (the epochs).
        values: the y value of each point.
        unit: what a step is called ("epoch", "step").

    Returns:
        One clause, without a capital or a full stop.

    Raises:
        ValueError: `steps` and `values` differ in length, or are empty.
    """
    if len(steps) != len(values) or not len(values):
        raise ValueError(f"describe_series needs as many steps as values, at least one: {len(steps)}, {len(values)}")
    finite = [(step, float(value)) for step, value in zip(steps, values, strict=True) if math.isfinite(value)]
    broken = [step for step, value in zip(steps, values, strict=True) if not math.isfinite(value)]
    if not finite:
        text = f"{name} has no finite value"
    elif len(finite) == 1:
        text = f"{name} is {number(finite[0][1])} at {unit} {_step(finite[0][0])}"
    else:
        text = name + " " + ", then ".join(_stretches(finite, unit))
    if broken and finite:
        text += f" (not finite at {unit}{'s' * (len(broken) > 1)} {_listed([_step(s) for s in broken])})"
    return text


def describe_history(history: pd.DataFrame, monitor: str | None = None) -> str:
    """The text alternative of `plot_history(history)`: each curve it draws, then the best epoch.

    Args:
        history: `fit`'s DataFrame (columns epoch, train_loss, val_loss, val_<metric>, lr, ...).
        monitor: the column that chose the best epoch (see `best_epoch`).

    Returns:
        Sentences, e.g. "Training curves over epochs 1 to 4. Train loss falls from 1 to 0.4 by epoch 4. ...
        Best epoch: 2, with the lowest validation loss (0.8)."
    """
    epochs = history["epoch"].tolist()
    span = f"epochs {epochs[0]} to {epochs[-1]}" if len(epochs) > 1 else f"one epoch (epoch {epochs[0]})"
    columns = [c for c in ("train_loss", "val_loss") if c in history]
    columns += [c for c in history.columns if c.startswith("val_") and c != "val_loss"]  # the metrics panel
    columns += ["lr"] if "lr" in history else []
    sentences = [f"Training curves over {span}."]
    sentences += [_sentence(describe_series(column_name(c), epochs, history[c].tolist())) for c in columns]
    best = best_epoch(history, monitor)
    if best is None:
        sentences.append("No best epoch: the monitored column has no value.")
    else:
        column, highest = _monitor(history, monitor)
        value = history.loc[history["epoch"] == best, column].iloc[0]
        sentences.append(f"Best epoch: {best}, with the {'highest' if highest else 'lowest'} "
                         f"{column_name(column)} ({number(value)}).")
    return " ".join(sentences)


def describe_lr_schedule(rates: Sequence[float]) -> str:
    """The text alternative of `plot_lr_schedule`: the learning rate at each scheduler step, from step 0.

    Returns:
        E.g. "Learning-rate schedule over 20 scheduler steps: the learning rate rises from 0.02 to 0.5 by
        step 5, then falls to 2e-06 by step 19."
    """
    steps = list(range(len(rates)))
    return (f"Learning-rate schedule over {len(rates)} scheduler step{'s' * (len(rates) != 1)}: "
            f"{describe_series('the learning rate', steps, rates, unit='step')}.")


def describe_figure(figure: Any) -> str:
    """The text alternative of any matplotlib figure, from what its panels draw.

    Each panel is told by its title and axis labels, then each line it draws (as `describe_series`, with
    the x axis's label as the unit), each image (its size and range of values), each set of bars and each
    scatter of points. Colour bars are left out: the image they belong to gives its range.

    Args:
        figure: a `matplotlib.figure.Figure`.

    Returns:
        Sentences, one per panel.
    """
    panels = [ax for ax in figure.axes if ax.get_label() != "<colorbar>"]
    title = figure.get_suptitle()
    sentences = [f"{title}." if title else f"A figure with {len(panels)} panel{'s' * (len(panels) != 1)}."]
    for index, ax in enumerate(panels, start=1):
        sentences.append(_sentence(_describe_panel(ax, f"panel {index}" if len(panels) > 1 else "the plot")))
    return " ".join(sentences)


def describe_distribution(totals: Sequence[float], maximum: float) -> str:
    """The grade histogram in words: how many students, the range, the median and the most common total.

    Example: "Grade distribution of 6 students: totals from 0 to 5 of 5 points, median 3.5; the most common
    total is 5 (3 students)."
    """
    if not totals:
        return f"Grade distribution: no students (out of {number(maximum)} points)."
    ordered = sorted(float(t) for t in totals)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    counts = {total: ordered.count(total) for total in ordered}
    common = max(counts.values())
    modes = [total for total, count in counts.items() if count == common]
    if len(ordered) == 1:
        return f"Grade distribution of 1 student: a total of {number(ordered[0])} of {number(maximum)} points."
    text = (f"Grade distribution of {len(ordered)} students: totals from {number(ordered[0])} to "
            f"{number(ordered[-1])} of {number(maximum)} points, median {number(median)}")
    if common > 1:
        text += (f"; the most common total{'s are' if len(modes) > 1 else ' is'} "
                 f"{_listed([number(m) for m in modes])} ({common} students{' each' if len(modes) > 1 else ''})")
    return text + "."


def best_epoch(history: pd.DataFrame, monitor: str | None = None) -> int | None:
    """The epoch with the best value of the monitored column; None when that column has no value.

    Args:
        history: `fit`'s DataFrame.
        monitor: the column that chooses; default `history.attrs["config"]["monitor"]`, else val_loss, else
            train_loss. Lowest is best unless `history.attrs["config"]["monitor_mode"]` is "max".
    """
    column, highest = _monitor(history, monitor)
    if column not in history or history[column].isna().all():
        return None
    index = history[column].idxmax() if highest else history[column].idxmin()
    return int(history.loc[index, "epoch"])


def column_name(column: str) -> str:
    """A history column in words: "val_loss" -> "validation loss", "lr" -> "learning rate"."""
    if column == "lr":
        return "learning rate"
    if column.startswith("val_"):
        column = "validation " + column.removeprefix("val_")
    return column.replace("_", " ")


def _monitor(history: pd.DataFrame, monitor: str | None) -> tuple[str, bool]:
    """The monitored column and whether its highest value is the best."""
    config = history.attrs.get("config", {})
    column = monitor or config.get("monitor") or ("val_loss" if "val_loss" in history else "train_loss")
    return column, config.get("monitor_mode") == "max"


def _stretches(points: list[tuple[float, float]], unit: str) -> list[str]:
    """The clauses of a curve of at least two finite points, first to last (see `describe_series`)."""
    values = [value for _, value in points]
    ends = sorted({0, len(values) - 1, values.index(min(values)), values.index(max(values))})
    merged: list[tuple[str, int]] = []  # (verb, index where the stretch ends)
    for start, end in pairwise(ends):
        before, after = number(values[start]), number(values[end])
        verb = "stays" if before == after else ("rises" if values[end] > values[start] else "falls")
        if merged and merged[-1][0] == verb:
            merged[-1] = (verb, end)
        else:
            merged.append((verb, end))
    if merged == [("stays", len(values) - 1)]:
        return [f"stays at {number(values[0])} from {unit} {_step(points[0][0])} to {unit} {_step(points[-1][0])}"]
    clauses = []
    for verb, end in merged:
        at = f"{unit} {_step(points[end][0])}"
        if verb == "stays":
            clauses.append(f"stays at {number(values[end])} until {at}")
        else:
            start = f"from {number(values[0])} " if not clauses else ""
            clauses.append(f"{verb} {start}to {number(values[end])} by {at}")
    return clauses


def _describe_panel(ax: Any, fallback: str) -> str:
    """One panel of a figure: its title, axes and what it draws."""
    from matplotlib.collections import PathCollection

    x_label, y_label = ax.get_xlabel(), ax.get_ylabel()
    head = ax.get_title() or fallback
    log = ", log scale" * (ax.get_yscale() == "log")
    if y_label:
        head += f" ({y_label} against {x_label or 'x'}{log})"
    elif x_label:
        head += f" (against {x_label}{log})"
    unit = x_label or "x ="  # "by epoch 7", or "by x = 7" on an axis without a label
    drawn = [_describe_line(line, unit, index) for index, line in enumerate(ax.get_lines(), start=1)]
    for image in ax.images:
        values = image.get_array()
        drawn.append(f"an image of {values.shape[0]} by {values.shape[1]} values from {number(values.min())} "
                     f"to {number(values.max())}")
    for container in ax.containers:
        heights = [bar.get_height() for bar in container.patches] if hasattr(container, "patches") else []
        if heights:
            drawn.append(f"{len(heights)} bars from {number(min(heights))} to {number(max(heights))} high")
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and len(collection.get_offsets()):  # a scatter
            label, count = collection.get_label(), len(collection.get_offsets())
            drawn.append(f"{count} points" if label.startswith("_") else f"{label}: {count} points")
    return head + ": " + ("; ".join(drawn) if drawn else "nothing drawn")


def _describe_line(line: Any, unit: str, index: int) -> str:
    """One line of a panel: a curve, or a reference line (vertical, horizontal) at its value."""
    label = line.get_label()
    name = f"line {index}" if label.startswith("_") else label
    try:
        xs = [float(x) for x in line.get_xdata()]
        ys = [float(y) for y in line.get_ydata()]
    except (TypeError, ValueError):  # dates or categories on an axis: say what it is, not its numbers
        return f"{name}, {len(line.get_xdata())} points"
    if len(set(xs)) == 1 and len(xs) > 1:
        return f"{name}: a vertical line at {unit} {_step(xs[0])}"
    if len(xs) == 2 and ys[0] == ys[1]:  # axhline draws two points across the panel
        return f"{name}: a horizontal line at {number(ys[0])}"
    return describe_series(name, xs, ys, unit=unit)


def _step(step: float) -> str:
    """A step as read on the x axis: 7, not 7.0; 0.001 with 3 significant digits."""
    return str(int(step)) if float(step).is_integer() else number(step)


def _listed(items: list[str]) -> str:
    """"3", "3 and 5", "3, 4 and 5"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _sentence(clause: str) -> str:
    """A clause as a sentence: a capital first letter and a full stop."""
    return clause[:1].upper() + clause[1:] + "."


__all__ = ["best_epoch", "column_name", "describe_distribution", "describe_figure", "describe_history",
           "describe_lr_schedule", "describe_series", "number"]
