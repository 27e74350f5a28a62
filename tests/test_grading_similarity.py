"""Similarity at grade time (issue 38, item 7): pastes from shipped code and from classmates are flagged for
review, naming the source; honest answers of the same exercise in other styles are not; no points move.

The answers are real notebooks (the committed release answered as a student would, `answered_release`), read
from their files by `save_answers`, and the instructor's files are written by `write_summary` as a grading
writes them. Nothing runs a kernel: similarity reads only the submitted files.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from harness.grading.jobs import GradeResult
from harness.grading.release import answered_release
from harness.grading.similarity import (
    ANSWERS,
    OWN_CELLS,
    common_count,
    find_similar,
    read_answers,
    save_answers,
    tokens,
)
from harness.grading.submissions import collect
from harness.grading.summary import write_summary

ACCURACY = "00-accuracy-code"
# harness.metrics.accuracy pasted with mechanical edits: its import line, renamed arguments, a cast
PASTED_LIBRARY = '''import torch

def accuracy(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows of logits whose largest entry is at the target class."""
    if scores.dim() == 2 and scores.shape[1] > 1 and labels.dim() == 1:
        return float((scores.argmax(dim=1) == labels).float().mean())
    if scores.shape == labels.shape:
        return float(((scores > 0) == (labels > 0.5)).float().mean())
    raise ValueError(
        f"accuracy got outputs {tuple(scores.shape)} and targets {tuple(labels.shape)}: expected logits (N, C) "
        "with class indices (N,), or binary logits and 0/1 targets of the same shape."
    )
'''
# the same paste with the arguments in the other order
PASTED_SWAPPED = PASTED_LIBRARY.replace("(scores: torch.Tensor, labels: torch.Tensor)",
                                        "(labels: torch.Tensor, scores: torch.Tensor)")
# one student's own long answer, and a classmate's copy of it with every name changed and a cast added
OWN = '''def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows of logits whose largest entry is at the target class."""
    n_rows, n_classes = logits.shape
    assert targets.shape == (n_rows,), f"targets must be ({n_rows},), got {tuple(targets.shape)}"
    best = torch.full((n_rows,), -1, dtype=torch.long)
    for row in range(n_rows):
        top = logits[row, 0]
        best[row] = 0
        for column in range(1, n_classes):
            if logits[row, column] > top:
                top, best[row] = logits[row, column], column
    hits = int((best == targets.cpu()).sum())
    return hits / max(n_rows, 1)
'''
COPIED = '''def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows of logits whose largest entry is at the target class."""
    rows, classes = logits.shape
    assert targets.shape == (rows,), f"targets must be ({rows},), got {tuple(targets.shape)}"
    winner = torch.full((rows,), -1, dtype=torch.long)
    for r in range(rows):
        high = logits[r, 0]
        winner[r] = 0
        for c in range(1, classes):
            if logits[r, c] > high:
                high, winner[r] = logits[r, c], c
    correct = int((winner == targets.cpu()).sum())
    return float(correct / max(rows, 1))
'''
# honest, independent answers of lesson 00's accuracy in several styles
HONEST_ACCURACY = [
    "def accuracy(logits, targets):\n    return (logits.argmax(dim=1) == targets).float().mean().item()\n",
    "def accuracy(logits, targets):\n    predicted = torch.argmax(logits, 1)\n"
    "    correct = (predicted == targets).sum().item()\n    return correct / targets.numel()\n",
    "def accuracy(logits, targets):\n    pred = logits.max(dim=-1).indices\n    return float(torch.eq(pred, targets)"
    ".to(torch.float32).mean())\n",
    '''def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of rows of logits whose largest entry is at the target class."""
    if logits.numel() == 0:
        return 0.0
    guesses = logits.argmax(dim=1)
    matches = [int(g) == int(t) for g, t in zip(guesses, targets)]
    return sum(matches) / len(matches)
''',
]
# honest AMP steps (lesson 05), whose shipped reference is the canonical step the lesson teaches
HONEST_AMP = [
    '''def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    '''def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    x, y = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device_type, dtype=dtype):
        out = model(x)
        loss = loss_fn(out, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    '''def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    model.train()
    inputs, targets = batch[0], batch[1]
    with torch.autocast(device_type, dtype=dtype):
        predictions = model(inputs)
        loss = loss_fn(predictions, targets)
    optimizer.zero_grad()
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    '''def amp_train_step(model, batch, loss_fn, optimizer, scaler, device_type, dtype):
    """AMP step."""
    data, labels = batch
    model.train(True)
    for p in model.parameters():
        p.grad = None
    with torch.autocast(device_type, dtype):
        l = loss_fn(model(data), labels)
    scaler.scale(l).backward()
    scaler.step(optimizer); scaler.update()
    return l.detach().clone()
''',
]
# honest warmup-cosine factors (lesson 07), in two styles
HONEST_WARMUP = [
    '''def warmup_cosine(step, warmup_steps, total_steps):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    t = min(t, 1.0)
    return 0.5 * (1 + math.cos(math.pi * t))
''',
    '''def warmup_cosine(step, warmup_steps, total_steps):
    if step >= warmup_steps:
        done = min(1.0, (step - warmup_steps) / max(total_steps - warmup_steps, 1))
        return (1.0 + math.cos(done * math.pi)) / 2
    return float(step + 1) / float(warmup_steps)
''',
]


def _texts(flags):
    return sorted((f.student, f.cell, f.source) for f in flags)


def test_a_renamed_paste_of_the_course_library_is_flagged_naming_file_and_function():
    answers = {"paster": {ACCURACY: PASTED_LIBRARY}, "swapper": {ACCURACY: PASTED_SWAPPED},
               **{f"honest{i}": {ACCURACY: code} for i, code in enumerate(HONEST_ACCURACY)}}
    flags = find_similar(answers, "00_welcome")
    assert _texts(flags) == [("paster", ACCURACY, "harness/metrics.py: accuracy"), ("paster", ACCURACY, "swapper"),
                             ("swapper", ACCURACY, "harness/metrics.py: accuracy"), ("swapper", ACCURACY, "paster")]
    shipped = [f for f in flags if not f.classmate]
    assert all(f.share >= 0.6 and f.tokens >= 40 for f in shipped), shipped
    assert "matches harness/metrics.py: accuracy" in shipped[0].text()


def test_a_classmates_answer_copied_with_renames_is_flagged_naming_both():
    answers = {"ann": {ACCURACY: OWN}, "bob": {ACCURACY: COPIED},
               **{f"honest{i}": {ACCURACY: code} for i, code in enumerate(HONEST_ACCURACY)}}
    flags = find_similar(answers, "00_welcome")
    assert _texts(flags) == [("ann", ACCURACY, "bob"), ("bob", ACCURACY, "ann")], flags
    assert flags[0].share > 0.9 and "the same cell of classmate bob" in flags[0].text()


def test_a_copy_passed_to_several_classmates_flags_every_pair_of_them():
    """Up to `common_count` holders a shared passage is a copy, not the class's common way of writing it."""
    ring = {"ann": OWN, "bob": COPIED, "cy": COPIED.replace("winner", "argbest"), "di": OWN.replace("hits", "n")}
    assert len(ring) < common_count(len(ring) + len(HONEST_ACCURACY))
    answers = {**{student: {ACCURACY: code} for student, code in ring.items()},
               **{f"honest{i}": {ACCURACY: code} for i, code in enumerate(HONEST_ACCURACY)}}
    flags = find_similar(answers, "00_welcome")
    assert _texts(flags) == sorted((one, ACCURACY, other) for one in ring for other in ring if one != other), flags


@pytest.mark.parametrize(("assignment", "cell", "answers"), [
    ("00_welcome", ACCURACY, HONEST_ACCURACY),
    ("05_mixed_precision", "05-amp-step-code", HONEST_AMP),
    ("07_lr_schedulers", "07-warmup-cosine-code", HONEST_WARMUP),
])
def test_honest_answers_in_several_styles_are_not_flagged(assignment, cell, answers):
    """Including the step the lesson teaches, which the shipped reference of lesson 05 is word for word: what an
    honest answer is expected to hold (the model solution) is no evidence, nor is a short answer."""
    flags = find_similar({f"student{i}": {cell: code} for i, code in enumerate(answers)}, assignment)
    assert flags == []


def test_the_release_starter_and_the_model_solution_never_count():
    release = answered_release("00_welcome")  # the model solution everywhere
    cells = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    assert find_similar({"a": cells, "b": cells, "c": cells}, "00_welcome") == []


def test_tokens_ignore_names_comments_docstrings_and_import_lines():
    one = "import torch\ndef f(a, b):\n    '''Doc.'''\n    c = a + b  # add\n    return torch.relu(c)\n"
    other = "from torch import nn\ndef g(x, y):\n    z = x + y\n    return torch.relu(z)\n"
    assert tokens(one) == tokens(other) == ["def", "V", "(", "V", ",", "V", ")", ":", "V", "=", "V", "+", "V",
                                            "return", "torch", ".", "relu", "(", "V", ")"]


def _write(folder: Path, student: str, replace: dict[str, str]) -> None:
    (folder / student).mkdir(parents=True)
    nbformat.write(answered_release("00_welcome", replace), folder / student / "00_welcome.ipynb")


def test_flags_reach_grades_csv_and_mistakes_md_with_no_point_moved(tmp_path):
    """Read from the submitted files (`save_answers`), written as a grading writes them (`write_summary`)."""
    submissions = tmp_path / "in"
    _write(submissions, "paster", {"00-accuracy": PASTED_LIBRARY})
    _write(submissions, "ann", {"00-accuracy": OWN})
    _write(submissions, "bob", {"00-accuracy": COPIED})
    for i, code in enumerate(HONEST_ACCURACY):
        _write(submissions, f"honest{i}", {"00-accuracy": code})
    hostile = answered_release("00_welcome")
    hostile.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "=cmd|' /C calc'!A0"}}))
    (submissions / "mallory").mkdir()
    nbformat.write(hostile, submissions / "mallory" / "00_welcome.ipynb")
    (submissions / "nobody").mkdir()  # no notebook: no answers, no flag
    out = tmp_path / "out"
    found = collect(submissions, "00_welcome")
    save_answers(found, "00_welcome", out)
    assert "=cmd|' /C calc'!A0" not in json.dumps(read_answers(out, [s.student for s in found]))
    assert not (out / ANSWERS / "nobody.json").exists()
    scores = {"00-make-batch": [1.0, 1.0], "00-count-params": [2.0, 2.0], "00-accuracy": [2.0, 2.0]}
    results = [GradeResult(s.student, "00_welcome", "ok", scores).to_dict() for s in found]
    write_summary(results, out, "00_welcome")
    with (out / "grades.csv").open() as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(student for student, row in rows.items() if row["similar"]) == ["ann", "bob", "paster"]
    assert rows["paster"]["similar"].startswith(f"{ACCURACY}: ")
    assert rows["paster"]["similar"].endswith("matches harness/metrics.py: accuracy"), rows["paster"]
    assert "classmate bob" in rows["ann"]["similar"] and "classmate ann" in rows["bob"]["similar"]
    assert {row["total"] for row in rows.values()} == {"5.0"}  # flags for review: no score moves
    mistakes = (out / "mistakes.md").read_text()
    section = mistakes[mistakes.index("## Similar code"):]
    assert "| paster | `00-accuracy-code` | `harness/metrics.py: accuracy` | " in section, section
    assert "| ann | `00-accuracy-code` | classmate bob | " in section and "| bob |" not in section, section
    assert "honest" not in section and "mallory" not in section
    assert "## Similar code" in (out / "summary.md").read_text()
    assert "The answer cells of 8 of 9 notebooks (1 with no readable notebook, or graded before answers were kept)" \
        in section, section


def test_a_class_with_nothing_similar_says_so(tmp_path):
    found = []
    for i, code in enumerate(HONEST_ACCURACY):
        _write(tmp_path / "in", f"honest{i}", {"00-accuracy": code})
    found = collect(tmp_path / "in", "00_welcome")
    save_answers(found, "00_welcome", tmp_path / "out")
    results = [GradeResult(s.student, "00_welcome", "ok", {"00-accuracy": [2.0, 2.0]}).to_dict() for s in found]
    write_summary(results, tmp_path / "out", "00_welcome")
    assert "Nothing flagged: no answer cell matched" in (tmp_path / "out" / "mistakes.md").read_text()
    assert OWN_CELLS not in json.dumps(read_answers(tmp_path / "out", [s.student for s in found]))
