"""PyTorch Training Lab's harness: real training, records, curves, and the checks that grade the course.

Import what you need from its modules: `harness.env`, `harness.repro`, `harness.data`, `harness.train`,
`harness.checks`, `harness.distributed`, `harness.grading`, `harness.drills`.

Imported in a Jupyter kernel, it makes every matplotlib figure shown there carry a text alternative read
from its data (`harness.figures`), so a screen reader can say what a plot shows.
"""

from harness.figures import show_figures_with_text

__version__ = "0.1.0"

show_figures_with_text()
