"""The exercise's text states what its check requires: prose and requirement table cannot drift apart (issue 27).

The rule, for every requirement of every graded exercise: at least half of the key words of its stated phrase
(`Requirement.states`) appear in the exercise's text in the solution notebook. The text is what a student
reads: the markdown from the exercise's heading to its solution cell, and the solution cell outside
`### BEGIN SOLUTION` ... `### END SOLUTION` (its signature and docstring). A key word is a word of four or
more letters other than a few connecting words; it appears when its first five letters do (so "rounded"
matches "round", "restores" matches "restored"), case aside.

The requirements that broke the rule when it was introduced are listed in DRIFTED, by task and code: their
text or their phrase is to be reworded (the lessons' owners', not this test's, to do). An entry that meets the
rule again must leave the list, so it only shrinks; every new exercise is bound by the rule.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from harness.contract import registry
from harness.contract.failure import Requirement
from harness.grading.layout import REPO_ROOT, discover_assignments

EXERCISE = re.compile(r"^### Exercise \d+ — .+ \(`([^`]+)`, \d+ points?\)$", re.MULTILINE)
SOLUTION = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION", re.DOTALL)
CONNECTING = frozenset("""that this with from each into every than then when must returns return their there they
them those these which while what where does have been being only also other same your more less most least before
after under over between like just both either neither whose about without within""".split())
SHARE = 0.5

# Requirements whose phrase the exercise's text did not state (by the rule above) when the rule came in.
DRIFTED: dict[str, tuple[str, ...]] = {
    "00-make-batch": ("not-zeros",),
    "00-count-params": ("not-an-int",),
    "01-to-tokens": ("wrong-shape",),
    "01-pairwise-distances": ("python-loop",),
    "01-silu-function": ("input-modified", "ignores-grad-output"),
    "02-count-trainable": ("counts-buffers",),
    "02-running-standardizer": ("state-dict-round-trip", "does-not-move"),
    "03-pad-collate": ("wrong-values",),
    "04-evaluate": ("builds-graph", "changes-weights"),
    "05-scale-trace": ("tracker-not-reset",),
    "05-amp-step": ("loss-outside-autocast", "inf-step-not-skipped"),
    "06-grad-norm": ("not-a-tensor",),
    "06-clip-step": ("wrong-step-count", "clipped-below-threshold", "wrong-direction"),
    "06-amp-clip": ("loss-outside-autocast", "clipped-below-threshold", "value-not-norm", "wrong-direction",
                    "wrong-threshold"),
    "06-accum-clip": ("clipped-below-threshold", "value-not-norm", "wrong-direction", "wrong-threshold"),
    "09-train-ddp": ("hang",),
    "09-save-rank0": ("hang",),
    "09-no-sync": ("ranks-differ", "hang"),
    "10-report": ("missing-config", "missing-history", "missing-curves", "missing-precision"),
    "11-train-step": ("missing-entry", "update-outside-step"),
    "11-plain-list": ("missing-entry",),
    "11-warmup-cosine": ("missing-entry",),
    "11-amp-step": ("scaler-order",),
    "11-exact-resume": ("not-weights-only-loadable", "missing-optimizer-state",
                        "missing-scheduler-state", "missing-rng-state"),
    "15-masked-loss": ("no-gradient",),
    "15-smoothed-loss": ("not-a-scalar",),
}


def key_words(phrase: str) -> list[str]:
    """The key words of a requirement's phrase, lowercased."""
    return [w for w in re.findall(r"[a-z][a-z0-9_]*", phrase.lower()) if len(w) >= 4 and w not in CONNECTING]


def unstated(requirement: Requirement, text: str) -> list[str] | None:
    """The key words of `requirement` missing from `text` when fewer than half appear; None when it is stated."""
    words, lowered = key_words(requirement.states), text.lower()
    missing = [w for w in words if w[:5] not in lowered]
    return missing if words and len(missing) > len(words) * (1 - SHARE) else None


def exercise_texts(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """Task id -> what a student reads of its exercise: the text from its heading, and its solution cell's
    lines outside the solution block."""
    texts: dict[str, str] = {}
    task = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            headings = list(EXERCISE.finditer(cell.source))
            if headings:
                task = headings[-1].group(1)
                texts[task] = cell.source[headings[-1].start():]
            elif task:
                texts[task] += "\n" + cell.source
        elif task and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            texts[task] += "\n" + SOLUTION.sub("", cell.source)
            task = None
    return texts


def drift(assignment: str) -> dict[tuple[str, str], list[str]]:
    """(task, code) -> the missing key words, for every requirement of `assignment` its text does not state."""
    found = {}
    for path in sorted((REPO_ROOT / "solutions" / assignment).glob("*.ipynb")):
        for task, text in exercise_texts(nbformat.read(path, as_version=4)).items():
            for code, requirement in registry.get(task).requires.items():
                missing = unstated(requirement, text)
                if missing is not None:
                    found[(task, code)] = missing
    return found


@pytest.mark.parametrize("assignment", discover_assignments())
def test_each_requirement_is_stated_in_its_exercise_text(assignment):
    found = drift(assignment)
    new = [f"{task} [{code}]: {registry.get(task).requires[code].states!r}: the exercise's text lacks "
           f"{', '.join(missing)} (say it in the text, or word the requirement as the text does)"
           for (task, code), missing in found.items() if code not in DRIFTED.get(task, ())]
    stale = [f"{task} [{code}] is stated now: remove it from DRIFTED" for task, codes in DRIFTED.items()
             if task[:2] == assignment[:2] for code in codes if (task, code) not in found]
    assert not new + stale, "\n".join(new + stale)


def test_the_rule_reports_an_unstated_requirement():
    stated = Requirement("returns the classes as int64", hint="")
    assert unstated(stated, "Return the class ids as an `int64` tensor.") is None
    assert unstated(stated, "Return the top-k answers.") == ["classes", "int64"]
    assert unstated(Requirement("runs in eval mode", hint=""), "Put the model in eval mode.") is None
