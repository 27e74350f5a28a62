"""The judges' references that answer exercises stay with the instructor (issue 38, item 1).

A student tree holds none of their bodies (`harness.grading.references`); in the tree, with its own harness, each
affected exercise's solution passes its visible check and a hidden or other input is a clear error; the recorded
table gives every planted mistake and correct variant of those exercises the same verdict and message as the
references themselves; and the answerability audit no longer counts a recorded stub (it passes the visible check
only) while it still finds the reference planted back.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.checks import check
from harness.contract import recorded
from harness.contract.failure import CheckFailed
from harness.contract.registry import get
from harness.grading.answerability import Scope, audit, exercises, summary
from harness.grading.answerable import WITHHELD_DRILLS
from harness.grading.layout import REPO_ROOT
from harness.grading.references import STUB, marked, stripped
from harness.grading.student_tree import write_student_tree
from tests.exercises import correct_variants, mistakes

pytestmark = pytest.mark.xdist_group("student-tree")

# Each withheld reference: its file, and a line of its body that must not reach students.
WITHHELD = {
    "harness.judges.lesson01.to_tokens._reference_tokens": "images.flatten(2).transpose(1, 2)",
    # (its hints, in the same file, name scaler.scale(loss).backward(): the line below is the body's alone)
    "harness.judges.lesson05.amp_step._reference_two_steps": "loss = nn.functional.mse_loss(model(inputs), targets)",
    "harness.judges.lesson05.cast_report.reference_cast_report": "underflow = (x != 0) & (y == 0)",
    "harness.judges.lesson05.cast_report._signed_rel_errors": "signed = (y[kept] - x[kept]) / x[kept]",
    "harness.judges.lesson05.choose_precision.reference_choose_precision":
        "return (torch.bfloat16, False) if bf16_supported else (torch.float16, True)",
    "harness.judges.lesson05.output_dtypes.reference_output_dtypes": "module.register_forward_hook(",
    "harness.judges.lesson05.scale_trace.real_scale_trace": "trace.append(float(scaler.get_scale()))",
    "harness.judges.lesson05.scale_trace._trace_without_reset": "scale, tracker = scale * growth_factor, 0",
    "harness.judges.lesson07.common.warmup_cosine_reference": "return 0.5 * (1.0 + math.cos(math.pi * progress))",
    "harness.judges.lesson07.inverse_sqrt.reference_inverse_sqrt":
        "return [min((s + 1) / warmup_steps, math.sqrt(warmup_steps / (s + 1))) for s in range(steps)]",
    "harness.judges.lesson10.precision.reference_precision":
        "if device_type == \"cuda\" and precisions.get(\"fp16_autocast\") and precisions.get(\"grad_scaler\"):",
    "harness.judges.lesson13.activation_formula.measured_activation_bytes":
        "with saved_for_backward(exclude=model.parameters()) as saved:",
    "harness.judges.lesson13.activation_formula.activation_miscounts":
        "return {\"element\": element, \"elements\": batch * inputs, \"four-bytes\": batch * inputs * 4,",
    "harness.judges.lesson13.memory_formula.reference_training_memory":
        "sizes[\"optimizer\"] = STATE_COPIES[optimizer] * sizes[\"grads\"]",
    "harness.judges.lesson13.memory_formula.params_miscounts":
        "\"frozen-left-out\": sum(p.numel() * p.element_size() for p in params if p.requires_grad)",
    "harness.judges.lesson15.masked_loss._per_token": "reduction=\"none\").view(targets.shape)",
    "harness.judges.lesson15.masked_loss._reference_masked": "return loss.detach(), leaf.grad",
    "harness.judges.lesson15.pad_collate._reference_collate":
        "torch.nn.utils.rnn.pad_sequence(list(sequences), batch_first=True, padding_value=pad)",
    "harness.judges.lesson15.warmup.reference_lr_factor":
        "return max(0.0, (total_steps - step) / (total_steps - warmup_steps))",
}
LESSONS = ("01", "05", "07", "10", "13", "15")
TREE_FIRST = ("import sys\nsys.path.insert(0, sys.argv[1])\nsys.meta_path = [f for f in sys.meta_path if 'Editable' "
              "not in type(f).__name__ and 'Editable' not in getattr(f, '__name__', '')]\n")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("recorded") / "course"
    write_student_tree(target, withheld_drills=WITHHELD_DRILLS)
    return target


def _file(tree: Path, name: str) -> Path:
    return tree / (name.rsplit(".", 1)[0].replace(".", "/") + ".py")


def _affected() -> list[dict[str, Any]]:
    """The exercises whose judge calls a recorded reference, as the audit builds them (solution, arguments)."""
    found = []
    for assignment in sorted(p.name for p in (REPO_ROOT / "solutions").iterdir() if p.name[:2] in LESSONS):
        for exercise in exercises(assignment):
            module = sys.modules[get(exercise["task"]).judge.__module__]
            if any(hasattr(value, recorded.MARK) for value in vars(module).values()):
                found.append(exercise)
    return found


def test_the_tree_holds_no_reference_body(tree):
    for name, line in WITHHELD.items():
        instructor, student = (_file(root, name).read_text() for root in (REPO_ROOT, tree))
        assert line in instructor, f"{name}: the test's line is not in the instructor's file"
        assert line not in student, f"{name}: its body reached the student tree"
        function = next(n for n in marked(student) if n.name == name.rsplit(".", 1)[1])
        assert [ast.unparse(s) for s in function.body] == [ast.unparse(ast.parse(STUB).body[0])], name
    shipped = {f"{'.'.join(p.relative_to(tree).with_suffix('').parts)}.{n.name}"
               for p in (tree / "harness").rglob("*.py") for n in marked(p.read_text())}
    assert shipped == set(WITHHELD), "every @recorded reference is listed here, and only those"
    assert "def reference_precision" not in (tree / "harness/checks/lesson10/common.py").read_text()
    table = recorded.load(tree / "harness" / "judges" / "recorded.json")
    assert set(table) == set(WITHHELD)


def test_stripping_keeps_the_rest_of_the_file():
    source = ('"""doc"""\n\nimport math\n\n\n@recorded\ndef answer(x: float) -> float:\n    """How."""\n'
              "    y = math.cos(x)\n    return y\n\n\ndef helper() -> int:\n    return 1\n")
    assert stripped(source) == ('"""doc"""\n\nimport math\n\n\n@recorded\ndef answer(x: float) -> float:\n'
                                f"    {STUB}\n\n\ndef helper() -> int:\n    return 1\n")


_IN_TREE = TREE_FIRST + """
import json, torch
from harness.checks import check
from harness.contract.recorded import Unrecorded
from harness.judges.lesson15.warmup import reference_lr_factor
report = {}
for exercise in json.loads(sys.stdin.read()):
    namespace = {"torch": torch, "nn": torch.nn}
    exec(exercise["setup"], namespace)
    arguments = eval(f"({exercise['arguments']},)", namespace)
    check(exercise["task"], *arguments)
    try:
        check(exercise["task"], *arguments, hidden=True)
        report[exercise["task"]] = "hidden passed"
    except Unrecorded as error:
        report[exercise["task"]] = str(error)
try:
    reference_lr_factor(3, 1, 1000)
except Unrecorded as error:
    report["direct"] = str(error)
print(json.dumps(report))
"""


def test_in_the_tree_the_solutions_pass_and_other_inputs_are_a_clear_error(tree):
    affected = _affected()
    assert len(affected) >= 14, [e["task"] for e in affected]
    done = subprocess.run([sys.executable, "-I", "-c", _IN_TREE, str(tree)], input=json.dumps(affected),
                          capture_output=True, text=True, timeout=600, cwd=tree)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert set(report) == {e["task"] for e in affected} | {"direct"}
    clear = "stays with the instructor, and the student course holds only what it returned on the visible case"
    # every hidden case calls its reference on an input the visible case does not (05-choose-precision's visible case
    # calls half of its eight inputs): in the tree no hidden check passes
    assert {task for task, said in report.items() if clear not in said} == set(), report
    assert report["direct"].startswith("harness.judges.lesson15.warmup.reference_lr_factor is a reference")


def _verdict(task: str, objects: Any) -> tuple[str, str]:
    try:
        check(task, *(objects() if callable(objects) else objects))
    except CheckFailed as failure:
        return failure.code, str(failure)
    return "passed", ""


def test_the_recorded_table_gives_every_mistake_its_verdict_and_message(tree, monkeypatch, capsys):
    """With the tree's table standing in for the references (as the tree's wrappers read it), each mistake and
    correct variant of the affected exercises gets the same code and message as with the references."""
    affected = {e["task"] for e in _affected()}
    table = recorded.load(tree / "harness" / "judges" / "recorded.json")
    cases = [(m.task, m.objects, False) for task in sorted(affected) for m in mistakes(task)]
    cases += [(c.task, c.objects, True) for task in sorted(affected) for c in correct_variants(task)]
    assert len(cases) > 60
    for task, objects, correct in cases:
        monkeypatch.setattr(recorded, "_loaded", None)
        monkeypatch.setattr(recorded, "TABLE", tree / "absent.pt")
        instructor = _verdict(task, objects)
        monkeypatch.setattr(recorded, "_loaded", table)
        student = _verdict(task, objects)
        assert student == instructor, task
        assert (instructor[0] == "passed") == correct, (task, instructor)


def test_the_audit_counts_a_recorded_stub_no_more_and_finds_the_reference_planted_back(tree, tmp_path):
    """In one audit of the tree with the reference's body planted back under another name: the recorded stub passes
    the visible check only (not a hit), the planted copy earns the points (a hit)."""
    planted = tmp_path / "course"
    shutil.copytree(tree, planted)
    module = planted / "harness" / "judges" / "lesson01" / "to_tokens.py"
    module.write_text(module.read_text() + "\n\ndef tokens_again(images):\n"
                      "    return images.flatten(2).transpose(1, 2)\n")
    found = audit(planted, Scope(assignments=("01_tensors_autograd",), modules=("harness.judges.lesson01.to_tokens",)))
    assert [(h.task, h.source) for h in found.hits] == [
        ("01-to-tokens", "harness.judges.lesson01.to_tokens.tokens_again")], summary(found)
    assert found.visible_only == ["01-to-tokens: harness.judges.lesson01.to_tokens._reference_tokens"], summary(found)


def test_a_machine_the_release_did_not_record_is_left_to_the_grader(tree, monkeypatch, capsys):
    """10-precision asks this machine's own device too: where the tree holds no recorded answer for its support, the
    local check judges the described devices and says the grader judges the machine; the instructor's judges it."""
    import harness.checks.lesson10.precision as probe

    unusual = {"fp32": True, "bf16_autocast": False, "fp16_autocast": False, "grad_scaler": True}
    monkeypatch.setattr(probe, "supported_precisions", lambda device: dict(unusual))
    exercise = next(e for e in _affected() if e["task"] == "10-precision")
    namespace: dict[str, Any] = {"torch": torch, "nn": torch.nn}
    exec(exercise["setup"], namespace)
    answer = eval(f"({exercise['arguments']},)", namespace)
    monkeypatch.setattr(recorded, "_loaded", None)
    monkeypatch.setattr(recorded, "TABLE", tree / "absent.pt")
    check("10-precision", *answer)
    assert "this machine's cpu included" in capsys.readouterr().out
    monkeypatch.setattr(recorded, "_loaded", recorded.load(tree / "harness/judges/recorded.json"))
    check("10-precision", *answer)
    said = capsys.readouterr().out
    assert "this machine's cpu (support" in said and "is judged by the grader" in said, said
    wrong = namespace["choose_precision"]
    described = lambda device_type, precisions: "fp16" if device_type == "mps" else wrong(device_type, precisions)  # noqa: E731
    with pytest.raises(CheckFailed) as failure:
        check("10-precision", described)
    assert failure.value.code == "fp16-off-cuda", "the described devices are still judged"


def test_a_modules_digest_does_not_read_its_repr(monkeypatch):
    """torch 2.11's LayerNorm prints no `bias=True`, 2.14's does: a model's digest, taken at the release on one torch
    and in the student's tree on another, must not depend on how modules print (CI's hosted journey, lesson 05)."""
    import torch
    from torch import nn

    from harness.contract.recorded import digest

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU())
    before = digest((model,), {})
    monkeypatch.setattr(nn.LayerNorm, "extra_repr", lambda self: "printed otherwise")
    assert digest((model,), {}) == before
    model[1].weight.data[0] += 1.0
    assert digest((model,), {}) != before
