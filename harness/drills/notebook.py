"""Build notebook 11 (interview drills) from the drill bank, so the notebook and `harness drill` never drift.

`python -m harness.drills.notebook` rewrites solutions/11_interview_drills/11_interview_drills.ipynb; a test
asserts the committed notebook equals what this builds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from harness.drills.choices import bank_order, render
from harness.drills.core import Drill, get_drill
from harness.drills.lesson import NOTEBOOK_DRILLS, SECTIONS, answer_name
from harness.hosted import INSTALL_CELL, INSTALL_CELL_ID, hosted_metadata

NOTEBOOK = Path("solutions/11_interview_drills/11_interview_drills.ipynb")

INTRO = """# Lesson 11 — Interview drills

**In about 45 minutes you will be able to** answer, with running code, the PyTorch-training questions that
come up in ML-engineer interviews: write a correct training step, find the bug behind a symptom, explain a
behaviour and show the experiment that proves it.

Every drill here comes from the course's drill bank, and its answer is checked by running it: hooks on the
optimizer, the model's modes, the GradScaler's state, the learning rates each step actually used. Nothing
matches your text, so any correct answer passes. In the terminal the options of a multiple-choice drill are
shuffled for every attempt, and your answer runs in a process of its own, judged by another.

The same bank (100+ drills) is in your terminal, with hints, a daily set, spaced repetition and timed mock
interviews; from the course's folder on your laptop:

```
make drill ARGS="list --topic amp"
make drill ARGS="start loop-loss-stalls"
make drill ARGS="check loop-loss-stalls"
make drill ARGS="mock --count 5 --minutes 30"
```

On a hub or in Colab, `python3 -m harness drill list` (and so on) does the same.
"""

SETUP = """from harness.checks import check, hint
from harness.drills import get_drill"""

RECAP = """## Recap

- A training step has a fixed order: `model.train()` (the model may come back from an evaluation) →
  `zero_grad(set_to_none=True)` → forward and loss (under autocast for AMP) → `backward` outside autocast →
  `unscale_` → clip → `step` (through the scaler) → `update` → scheduler.
- Symptoms point at causes: only the output layer learning means layers nn.Module cannot see (a plain list);
  two forwards that disagree mean dropout or batch norm is still in training mode; a resumed run that diverges
  means a checkpoint forgot some state.
- Keep metrics on the device and sync once per epoch.

**Interview questions this prepares you for:** What happens if you forget `zero_grad`? Why `model.eval()`?
Why does fp16 need a GradScaler and bf16 not? What must a checkpoint hold to resume exactly? Why is
`.item()` in the loop slow on a GPU? Practise more with `make drill ARGS=daily`.
"""


def _metadata(grade_id: str, *, solution: bool, points: int | None = None) -> dict:
    nbgrader = {"grade_id": grade_id, "schema_version": 3, "solution": solution, "grade": points is not None,
                "locked": not solution}
    if points is not None:
        nbgrader["points"] = points
    return {"nbgrader": nbgrader}


def _points(drill: Drill) -> int:
    """The points of a drill's exercise: 2 above difficulty 1."""
    return 2 if drill.difficulty > 1 else 1


def _drill_cells(number: int, task_id: str, drill: Drill) -> list:
    points = _points(drill)
    prompt = drill.prompt
    if drill.choices is not None:  # the bank's order, as a markdown list
        prompt = render(prompt, drill.choices, bank_order(), answer_line=False).replace("\n  (", "\n- (")
    heading = (f"### Exercise {number} — {drill.title} (`{task_id}`, {points} point{'' if points == 1 else 's'})\n"
               f"*{drill.kind}, difficulty {drill.difficulty}, topics: {', '.join(drill.topics)}*\n\n{prompt}\n\n"
               f'Stuck? Run `hint("{task_id}")` in a new cell; run it again for a more explicit hint.')
    cells = [new_markdown_cell(heading)]
    if drill.kind == "bughunt":
        cells.append(new_markdown_cell(f"The broken code:\n\n```python\n{drill.starter.rstrip()}\n```\n\n"
                                       "Write the fixed version in the cell below."))
    if drill.kind == "explain":
        cells.append(new_markdown_cell(f"Predict first: set `{answer_name(task_id)}` to your choice, then run the "
                                       "experiment below the test cell to see why."))
        body = drill.solution.replace("answer =", f"{answer_name(task_id)} =", 1).rstrip()
        checked = f'{{"answer": {answer_name(task_id)}}}'
    else:
        body = drill.solution.rstrip()
        checked = "globals()"
    cells.append(new_code_cell(f"### BEGIN SOLUTION\n{body}\n### END SOLUTION",
                               metadata=_metadata(f"{task_id}-code", solution=True)))
    cells.append(new_code_cell(
        f'check("{task_id}", {checked})\n### BEGIN HIDDEN TESTS\ncheck("{task_id}", {checked}, hidden=True)\n'
        "### END HIDDEN TESTS",
        metadata=_metadata(task_id, solution=False, points=points)))
    if drill.kind == "explain":
        cells.append(new_code_cell(f'get_drill("{drill.id}").experiment()'))
    return cells


def build() -> nbformat.NotebookNode:
    """The solution notebook of lesson 11, built from the drill bank."""
    cells = [new_markdown_cell(INTRO), new_code_cell(INSTALL_CELL, id=INSTALL_CELL_ID), new_code_cell(SETUP)]
    section = None
    for number, (task_id, drill_id) in enumerate(NOTEBOOK_DRILLS, 1):
        if SECTIONS[task_id] != section:  # the heading each task's hints send the student back to
            section = SECTIONS[task_id]
            cells.append(new_markdown_cell(f"## {section}"))
        cells += _drill_cells(number, task_id, get_drill(drill_id))
    cells.append(new_markdown_cell(RECAP))
    notebook = new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        **hosted_metadata("11"),
    })
    numbered = (cell for cell in notebook.cells if cell.id != INSTALL_CELL_ID)  # every lesson's install cell
    for index, cell in enumerate(numbered):
        cell["id"] = f"drill-cell-{index:02d}"  # stable ids: rebuilding changes nothing
    return notebook


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else NOTEBOOK
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(build(), path)
    print(f"wrote {path}")
