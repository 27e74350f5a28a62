"""The checks registry, failure messages and hints (harness.checks.core)."""

import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.checks import CheckFailed, check, core, fail, hint, register
from harness.contract import protocol, registry
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.forbidden import CallRecorder, forbid
from harness.contract.registry import judges


def _inputs(case: Case) -> list[int]:
    return list(range(-3, 4)) if not case.hidden else [10**6 + case.seed, -(10**6)]


@pytest.fixture
def toy_check():
    @register("99-double")
    def probe_double(double, *, case: Case) -> dict:
        with CallRecorder() as calls:
            values = [double(x) for x in _inputs(case)]
        return {"values": values, "calls": calls.seen}

    @judges("99-double", hints=Hints("Multiply by two.", "Doubling is multiplying by 2.", "return 2 * x",
                                     section="1. Doubling"),
            requires={"wrong-value": Requirement("returns twice its input", "Compare double(3) with 3 + 3."),
                      "forbidden-call": Requirement("does not call torch.mul", "Write the product yourself.")})
    def judge_double(seen: dict, *, case: Case) -> str:
        forbid(seen["calls"], {"mul": "the exercise asks for the product written with *"}, where="exercise 1")
        for x, value in zip(_inputs(case), seen["values"], strict=True):
            if value == x + 2 != 2 * x:
                fail("wrong-value", observed=f"double({x}) = {value}", expected=f"{2 * x}",
                     cause="the function adds two", where="your double()", hint="Doubling multiplies, adding does not.")
            if value != 2 * x:
                fail("wrong-value", observed=f"double({x}) = {value}", expected=f"{2 * x}",
                     cause="the function does not double", where="your double()")
        return "doubles integers"

    yield "99-double"
    registry._REGISTRY.pop("99-double")
    core._hints_shown.pop("99-double", None)
    core._last_failure.pop("99-double", None)


def test_passing_check_prints_what_it_verified(toy_check, capsys):
    check(toy_check, lambda x: x + x)
    check(toy_check, lambda x: 2 * x, hidden=True)
    out = capsys.readouterr()
    assert "\u2714 99-double: doubles integers" in out.out
    assert "(hidden tests)" in out.out
    assert out.err == ""


def test_failing_check_raises_teaching_message(toy_check):
    with pytest.raises(CheckFailed) as info:
        check(toy_check, lambda x: x * x)
    assert info.value.code == "wrong-value"
    message = str(info.value)
    for part in ("Observed:", "Expected:", "Likely cause:", "Where to look:", "99-double failed"):
        assert part in message
    assert isinstance(info.value, AssertionError)  # nbgrader marks the cell failed
    assert info.value._render_traceback_() == [f"CheckFailed: {message}"]  # IPython shows no frame of the check


def test_student_exception_names_their_line_and_what_it_means(toy_check):
    def broken(x):
        return torch.ones(2, 3) @ torch.ones(2, 3)

    with pytest.raises(CheckFailed) as info:
        check(toy_check, broken)
    message = str(info.value)
    assert info.value.code == "raised"
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in message
    assert "raised at your line" in message and "return torch.ones(2, 3) @ torch.ones(2, 3)" in message
    assert "a shape mismatch" in message
    assert "probe_double" not in message and "values = [double(x)" not in message  # never the check's own lines


def test_an_error_in_the_checks_own_code_is_not_blamed_on_a_line_of_the_student():
    from harness.contract.errors import explain

    try:
        {}["missing"]  # stands for the check's code failing on what the student returned
    except KeyError as error:
        error.__traceback__ = None  # no frame of the student's at all
        assert "not on a line of yours" in explain(error)


def test_forbidden_calls_are_named_with_the_students_line(toy_check):
    def as_method(x):
        return torch.tensor(x).mul(2).item()

    with pytest.raises(CheckFailed) as info:
        check(toy_check, as_method)
    assert info.value.code == "forbidden-call"
    assert "Tensor.mul" in str(info.value) and "return torch.tensor(x).mul(2).item()" in str(info.value)
    check(toy_check, lambda x: int((torch.tensor(x) + x).item()))  # other calls are fine


def test_recorded_calls_read_as_the_student_wrote_them():
    from harness.contract.forbidden import written_as

    assert written_as(torch.special.logsumexp) == "torch.special.logsumexp"
    assert written_as(torch.linalg.vector_norm) == "torch.linalg.vector_norm"
    assert written_as(torch.nn.functional.softmax) == "F.softmax"
    assert written_as(torch.Tensor.logsumexp) == "Tensor.logsumexp"
    assert written_as(torch.logsumexp) == "torch.logsumexp"


def test_a_check_leaves_the_students_rngs_dtype_and_grad_mode_alone(toy_check):
    def messy(x):
        random.random(), np.random.rand(), torch.rand(1)
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return 2 * x

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    check(toy_check, messy)
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


def test_hints_go_from_gentle_to_explicit(toy_check, capsys):
    for _ in range(4):
        hint(toy_check)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Hint 1/3 for 99-double: Multiply by two.")
    assert lines[1].startswith("Hint 2/3") and 'Reread the section "1. Doubling"' in lines[1]
    assert lines[2].startswith("Hint 3/3") and "return 2 * x" in lines[2]
    assert lines[3].startswith("Hint 3/3")
    with pytest.raises(ValueError, match="levels 1 to 3"):
        hint(toy_check, 4)


def test_hints_follow_the_last_failure_and_demos_use_none(toy_check, capsys):
    hint(toy_check, level=3)  # a lesson's demonstration: shown, not counted
    with pytest.raises(CheckFailed):
        check(toy_check, lambda x: x + 1)
    hint(toy_check)
    hint(toy_check)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "Hint 1/3 for 99-double (after [wrong-value]): Compare double(3) with 3 + 3. " \
                       "Call hint() again for a more explicit one."
    assert lines[2].startswith("Hint 2/3")
    with pytest.raises(CheckFailed):  # another mistake: the hints start again, about it
        check(toy_check, lambda x: int(torch.mul(torch.tensor(x), 2)))
    hint(toy_check)
    assert "(after [forbidden-call]): Write the product yourself." in capsys.readouterr().out


def test_the_first_hint_follows_the_cause_the_judge_found(toy_check, capsys):
    """A failure with a cause narrower than its code (`fail(..., hint=...)`) gets that cause's hint first, and
    another cause under the same code starts the hints again."""
    with pytest.raises(CheckFailed) as info:
        check(toy_check, lambda x: x + 2)
    assert info.value.code == "wrong-value" and info.value.hint == "Doubling multiplies, adding does not."
    hint(toy_check)
    hint(toy_check)
    with pytest.raises(CheckFailed):  # the same code, the requirement's own hint
        check(toy_check, lambda x: x + 1)
    hint(toy_check)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Hint 1/3 for 99-double (after [wrong-value]): Doubling multiplies, adding does not.")
    assert lines[1].startswith("Hint 2/3")
    assert lines[2].startswith("Hint 1/3 for 99-double (after [wrong-value]): Compare double(3) with 3 + 3.")


def test_a_demonstration_prints_the_verdict_and_leaves_the_hints_alone(toy_check, capsys):
    from harness.checks import demonstrate

    hint(toy_check)
    failure = demonstrate(toy_check, lambda x: x + 1)
    assert failure is not None and failure.code == "wrong-value"
    assert demonstrate(toy_check, lambda x: 2 * x) is None
    hint(toy_check)
    out = capsys.readouterr().out
    assert "[wrong-value]" in out and "\u2714 99-double: doubles integers" in out
    assert "Hint 2/3" in out and "(after [" not in out  # the demonstration was not the student's attempt


def test_a_graded_kernel_skips_demonstrations_and_hints_without_a_judge(toy_check, capsys, monkeypatch):
    """In a graded kernel (no judges there, so no hints) a lesson's own demonstration and hint cells run without an
    error, each saying in one line on stdout that it runs in the student's own notebook."""
    from harness.checks import core, demonstrate
    from harness.contract import registry

    monkeypatch.setattr(core, "graded_outside", True)
    monkeypatch.setitem(registry._REGISTRY, toy_check, replace(registry._REGISTRY[toy_check], judge=None,
                                                               hints=None, requires=None))
    assert demonstrate(toy_check, lambda x: x + 1) is None
    hint(toy_check, level=1)
    out = capsys.readouterr()
    assert out.out.splitlines() == ["(a demonstration of 99-double's check: it runs in your own notebook, not while "
                                    "grading)", "(the hints of 99-double show in your own notebook, not while "
                                    "grading)"]
    assert out.err == ""


def test_unknown_task_ids_are_clear_errors():
    with pytest.raises(KeyError, match="task ids start with the lesson number"):
        check("train-step", print)
    with pytest.raises(KeyError, match="no checks exist for lesson 98"):
        check("98-nothing", print)


def test_register_requires_a_probe_with_a_case_and_judges_a_requirement_table_and_hints():
    hints = Hints("a", "b", "c", section="1. X")
    with pytest.raises(TypeError, match="keyword argument `case`"):
        register("99-x")(lambda f, *, hidden: "old contract")
    with pytest.raises(TypeError, match="Requirement"):
        judges("99-x", hints=hints, requires={"wrong": "a bare string"})
    with pytest.raises(TypeError, match="Requirement"):
        judges("99-x", hints=hints, requires={})
    with pytest.raises(TypeError, match="hints are Hints"):
        judges("99-x", hints="a, b, c", requires={"w": Requirement("a", "b")})
    with pytest.raises(ValueError, match="register the probe of '99-x' before its judge"):
        judges("99-x", hints=hints, requires={"w": Requirement("a", "b")})(lambda seen, *, case: "judged")


def test_what_the_judge_enforces_is_absent_until_it_registers():
    """The probe side registers the instrument only: hints and requirement table come with the judge (a graded
    kernel, which never imports the judges, holds a check without them)."""

    @register("99-probed")
    def probe(value, *, case: Case) -> dict:
        return {"value": value}

    try:
        entry = registry.get("99-probed", judged=False)
        assert (entry.hints, entry.requires, entry.judge) == (None, None, None)
        hints = Hints("a", "b", "c", section="1. X")
        judges("99-probed", hints=hints, requires={"w": Requirement("a", "b")}, nonfinite=("value",))(
            lambda seen, *, case: "judged")
        entry = registry.get("99-probed")
        assert entry.hints == hints and set(entry.requires) == {"w"} and entry.nonfinite == ("value",)
    finally:
        registry._REGISTRY.pop("99-probed")


def test_the_judge_decides_from_data_of_its_own_case_only(toy_check):
    case = Case(hidden=True, seed=5)
    data = protocol.observe(toy_check, (lambda x: 2 * x,), case)
    assert "doubles" in protocol.decide(toy_check, data, case)
    with pytest.raises(protocol.wire.WireError, match="not of the case"):  # replayed from another case
        protocol.decide(toy_check, data, Case(hidden=True, seed=6))
    forged = protocol.observe(toy_check, (lambda x: 0,), case)
    with pytest.raises(CheckFailed, match="wrong-value"):
        protocol.decide(toy_check, forged, case)
    raised = protocol.observe(toy_check, (lambda x: 1 / 0,), case)
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        protocol.decide(toy_check, raised, case)


def test_check_assertions_for_planted_bugs_can_fail(toy_check, capsys):
    from harness.checks.testing import assert_check_fails, assert_check_passes

    assert "does not double" in assert_check_fails(toy_check, lambda x: x * x, code="wrong-value", phrase="double(")
    with pytest.raises(pytest.fail.Exception):  # a correct solution is no planted bug
        assert_check_fails(toy_check, lambda x: 2 * x, code="wrong-value", phrase="double(")
    with pytest.raises(AssertionError, match="99-double failed"):  # the right failure, the wrong code
        assert_check_fails(toy_check, lambda x: x * x, code="other-code", phrase="double(")
    capsys.readouterr()
    assert_check_passes(toy_check, lambda x: x + x, capsys=capsys)
    with pytest.raises(CheckFailed):  # fails only on the hidden inputs
        assert_check_passes(toy_check, lambda x: 2 * x if abs(x) < 100 else 0)
