"""The checks registry, failure messages and hints (harness.checks.core)."""

import pytest

from harness.checks import CheckFailed, check, fail, hint, register
from harness.checks import core
from harness.checks.core import Case, judges


def _inputs(case: Case) -> list[int]:
    return list(range(-3, 4)) if not case.hidden else [10**6 + case.seed, -(10**6)]


@pytest.fixture
def toy_check():
    @register("99-double", hints=("Multiply by two.", "return 2 * x"))
    def probe_double(double, *, case: Case) -> dict:
        return {"values": [double(x) for x in _inputs(case)]}

    @judges("99-double")
    def judge_double(seen: dict, *, case: Case) -> str:
        for x, value in zip(_inputs(case), seen["values"], strict=True):
            if value != 2 * x:
                fail("wrong-value", observed=f"double({x}) = {value}", expected=f"{2 * x}",
                     cause="the function does not double", where="your double()")
        return "doubles integers"

    yield "99-double"
    core._REGISTRY.pop("99-double")
    core._hints_shown.pop("99-double", None)


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


def test_student_exception_becomes_check_failure(toy_check):
    def broken(x):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as info:
        check(toy_check, broken)
    assert info.value.code == "raised"
    assert "NotImplementedError" in str(info.value)


def test_hints_go_from_gentle_to_explicit(toy_check, capsys):
    hint(toy_check)
    hint(toy_check)
    hint(toy_check)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Hint 1/2") and "Multiply" in lines[0]
    assert lines[1].startswith("Hint 2/2") and "return 2 * x" in lines[1]
    assert lines[2].startswith("Hint 2/2")
    with pytest.raises(ValueError, match="levels 1 to 2"):
        hint(toy_check, 3)


def test_unknown_task_ids_are_clear_errors():
    with pytest.raises(KeyError, match="task ids start with the lesson number"):
        check("train-step", print)
    with pytest.raises(KeyError, match="no checks exist for lesson 98"):
        check("98-nothing", print)


def test_register_requires_two_hint_levels_and_a_probe_with_a_case():
    with pytest.raises(ValueError, match="at least two levels"):
        register("99-x", hints=("only one",))
    with pytest.raises(TypeError, match="keyword argument `case`"):
        register("99-x", hints=("a", "b"))(lambda f, *, hidden: "old contract")


def test_the_judge_decides_from_data_of_its_own_case_only(toy_check):
    case = Case(hidden=True, seed=5)
    data = core.observe(toy_check, (lambda x: 2 * x,), case)
    assert "doubles" in core.decide(toy_check, data, case)
    with pytest.raises(core.wire.WireError, match="not of the case"):  # replayed from another case
        core.decide(toy_check, data, Case(hidden=True, seed=6))
    forged = core.observe(toy_check, (lambda x: 0,), case)
    with pytest.raises(CheckFailed, match="wrong-value"):
        core.decide(toy_check, forged, case)
    raised = core.observe(toy_check, (lambda x: 1 / 0,), case)
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        core.decide(toy_check, raised, case)


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
