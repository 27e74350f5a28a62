""""Do not use X" below `__torch_function__` (harness.contract.kernels): what a TorchFunctionMode cannot see is
still recorded, a rule names only the kernels nothing else runs, and the recorder leaves nothing behind."""

import sys

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from harness.contract.failure import CheckFailed
from harness.contract.forbidden import CallRecorder, forbid
from harness.contract.kernels import KERNELS

# Kernels that correct from-scratch answers run: no rule may name one (a false alarm is the worst defect).
_EVERYDAY = {"exp", "log", "sum", "amax", "max", "mean", "var", "var_mean", "sqrt", "rsqrt", "mul", "add", "sub",
             "div", "where", "masked_fill", "gather", "bmm", "mm", "sigmoid", "addcmul_", "addcdiv_", "lerp_",
             "_foreach_mul_", "_foreach_add_", "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_lerp_",
             "_foreach_sqrt", "_foreach_div", "_foreach_add"}


def test_no_rule_names_a_kernel_that_correct_answers_run():
    named = {op for ops in KERNELS.values() for op in ops}
    assert not named & _EVERYDAY


def _lse_from_c(x, dim):
    lse = torch.logsumexp
    with torch._C.DisableTorchFunction():
        return next(map(lse, [x], [dim]))  # called from C: no profile event, only its kernel shows


def _lse_from_scratch(x, dim):
    m = x.amax(dim, keepdim=True)
    return (x - m).exp().sum(dim).log() + m.squeeze(dim)


def test_a_call_hidden_from_torch_function_and_the_profiler_shows_as_its_kernel():
    with CallRecorder() as calls:
        _lse_from_c(torch.randn(3, 4), 1)
    with pytest.raises(CheckFailed) as failure:
        forbid(calls.seen, {"logsumexp": "write it yourself"}, where="the prompt")
    assert failure.value.code == "forbidden-call"
    assert "ran the kernel aten::logsumexp, in _lse_from_c" in str(failure.value)


def test_a_from_scratch_answer_passes_its_rule():
    with CallRecorder() as calls:
        _lse_from_scratch(torch.randn(3, 4), 1)
    forbid(calls.seen, {"logsumexp": "write it yourself", "softmax": "no"}, where="the prompt")


def test_the_recorder_restores_the_profiler_and_the_modes_even_when_the_block_raises():
    def before(*_):
        return None

    sys.setprofile(before)
    try:
        with pytest.raises(ZeroDivisionError), CallRecorder():
            torch.ones(2).sum()
            1 / 0  # noqa: B018
        assert sys.getprofile() is before
    finally:
        sys.setprofile(None)
    assert _get_current_dispatch_mode() is None
