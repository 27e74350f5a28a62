"""Figures in a notebook carry their text alternative: the PNG is shown as an `<img>` with alt text.

JupyterLab shows a PNG output as an `<img>` without an `alt` attribute, so a screen reader says nothing of
a plot. Inside a Jupyter kernel, `import harness` calls `show_figures_with_text()`: from then on every
matplotlib figure displayed (`plot_history`'s, `plt.show()`'s, a bare `Figure` as a cell's value) also
gets a `text/html` output, the same picture in an `<img alt="...">`, which JupyterLab prefers to the PNG.
The alt text is the figure's `alt_text` attribute when the harness drew it (`harness.plots`), else
`harness.describe.describe_figure`'s reading of what it draws. The output's metadata keeps the alt text
(`{"text/html": {"alt": ...}}`), where `harness course` finds it for its report.

This module imports neither matplotlib nor IPython: `import harness` stays cheap outside a notebook.
"""

from __future__ import annotations

import base64
import html
import io
import sys
from typing import Any


def alt_text(figure: Any) -> str:
    """The text alternative of a matplotlib figure: its `alt_text` attribute, else a reading of its data."""
    given = getattr(figure, "alt_text", None)
    if given:
        return given
    from harness.describe import describe_figure

    return describe_figure(figure)


def png_bytes(figure: Any) -> bytes:
    """The figure as PNG bytes at its own dpi, cropped to what it draws (as the inline backend draws it)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figure.dpi, bbox_inches="tight")
    return buffer.getvalue()


def figure_html(figure: Any) -> tuple[str, dict[str, str]] | None:
    """The `text/html` output of a figure: its PNG in an `<img>` with its alt text, and that text as metadata.

    Returns:
        (html, {"alt": text}), the form IPython's formatters take for data with metadata; None for a
        figure with nothing drawn (IPython shows no picture of it either).
    """
    if not figure.axes:
        return None
    text = alt_text(figure)
    source = base64.b64encode(png_bytes(figure)).decode("ascii")
    return f'<img src="data:image/png;base64,{source}" alt="{html.escape(text)}">', {"alt": text}


def show_figures_with_text() -> bool:
    """Inside IPython, give every matplotlib figure displayed a `text/html` output with alt text.

    Registered by the type's name, so matplotlib is not imported here (a kernel that never draws never
    imports it), and for `FigureBase`, the class `Figure` derives from: matplotlib's inline backend removes
    every formatter's entry for `Figure` whenever it is set up (`%matplotlib inline`, the first
    `import matplotlib.pyplot`), which may come after `import harness`. Does nothing outside IPython
    (IPython not imported, or no shell running).

    Returns:
        Whether the formatter is registered.
    """
    if "IPython" not in sys.modules:
        return False
    shell = sys.modules["IPython"].get_ipython()
    if shell is None:
        return False
    shell.display_formatter.formatters["text/html"].for_type_by_name("matplotlib.figure", "FigureBase", figure_html)
    return True


__all__ = ["alt_text", "figure_html", "png_bytes", "show_figures_with_text"]
