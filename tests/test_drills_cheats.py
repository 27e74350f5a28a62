"""The ways a candidate fooled the old checker (issue 18), each shown to fail now.

The answer runs in a forked child and its observation is judged in another process that never ran it; explain
answers are parsed, never run; every check draws its own case.
"""

import random
from collections import Counter

import pytest

from harness.contract.case import Case
from harness.drills import pool
from harness.drills.checker import check_source, draw_case
from harness.drills.choices import LETTERS, shuffled_order
from harness.drills.core import all_drills, get_drill

WRITE_DRILLS = ["tensors-logsumexp", "loop-train-step", "amp-train-step"]
PASS_LINES = [
    'print("PASSED: matches the reference")\nraise SystemExit(0)\n',
    'import json, os\nprint(json.dumps({"passed": True, "code": "passed", "message": "ok"}), flush=True)\n'
    "os._exit(0)\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
]


@pytest.mark.parametrize("drill_id", WRITE_DRILLS)
@pytest.mark.parametrize("source", PASS_LINES, ids=["print-and-exit", "json-pass-line", "kill-itself"])
def test_printing_a_pass_line_and_leaving_passes_nothing(drill_id, source):
    result = check_source(get_drill(drill_id), source, case=Case(seed=3))
    assert not result.passed and result.code in ("no-report", "raised"), result


def test_patching_torch_in_the_answer_cannot_make_a_wrong_answer_pass():
    patched = (
        "import torch\n"
        "torch.allclose = lambda *a, **k: True\n"
        "torch.equal = lambda *a, **k: True\n"
        "torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)\n"
        "torch.logsumexp = lambda x, dim: x.exp().sum(dim).log()\n"
        "def logsumexp(x, dim):\n"
        "    return x.exp().sum(dim).log()\n"
    )
    result = check_source(get_drill("tensors-logsumexp"), patched, case=Case(seed=5))
    assert (result.passed, result.code) == (False, "not-finite"), result.message


def test_patching_the_drill_module_in_the_answer_changes_nothing_the_judge_uses():
    patched = (
        "import harness.contract.compare as compare\n"
        "import harness.contract.expect as expect\n"
        "expect.close = lambda *a, **k: a[1]\n"
        "compare.close_values = lambda *a, **k: True\n"
        "def pairwise_sq_dists(a, b):\n"
        "    return (a[:, None] - b[None]).abs().sum(-1)\n"
    )
    result = check_source(get_drill("tensors-pairwise-distances"), patched, case=Case(seed=5))
    assert (result.passed, result.code) == (False, "wrong-value"), result.message


def test_a_string_that_equals_everything_is_no_answer():
    source = "class Anything(str):\n    def __eq__(self, other):\n        return True\n" \
             "    def strip(self):\n        return self\n    def lower(self):\n        return self\n" \
             'answer = Anything("a")\n'
    for drill in (d for d in all_drills() if d.kind == "explain"):
        result = check_source(drill, source)
        assert (result.passed, result.code) == (False, "no-choice"), drill.id


def test_an_explain_answer_is_never_run():
    source = 'import os\nos._exit(0)\nanswer = "a"\n'
    drill = next(d for d in all_drills() if d.kind == "explain" and d.choices.key == 0)
    assert check_source(drill, source).passed  # a string literal is read; the os._exit above never ran


def test_one_letter_for_everything_passes_only_its_share():
    explain = [d for d in all_drills() if d.kind == "explain"]
    share = len(explain) / len(LETTERS)
    for letter in LETTERS:
        passed = sum(check_source(d, f'answer = "{letter}"\n').passed for d in explain)
        assert passed <= share + 2, f'answer = "{letter}" passes {passed} of {len(explain)} explain drills'
    rng = random.Random(0)  # as shown to a candidate: each attempt shuffles the options
    shuffled = Counter(check_source(d, 'answer = "b"\n', order=shuffled_order(rng)).passed for d in explain * 8)
    assert shuffled[True] < 0.4 * (shuffled[True] + shuffled[False])


def test_each_check_draws_new_inputs_so_a_memorised_result_fails():
    seeds = {draw_case().seed for _ in range(20)}
    assert len(seeds) > 15


def test_an_infinite_loop_times_out_and_leaves_no_process(tmp_path):
    import psutil

    source = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\n" \
             "def logsumexp(x, dim):\n    while True:\n        pass\n"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = check_source(get_drill("tensors-logsumexp"), source, timeout_s=3)
    assert (result.passed, result.code) == (False, "timeout")
    spare = set(pool._POOL.pids())  # the runner the pool starts ahead for the next check, and its sandbox
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.pid not in spare and not spare & {a.pid for a in p.parents()}]
    assert left == []


# "Do not use X" seen below __torch_function__ (issues 38 and 41): each forbidden thing, hidden from a
# TorchFunctionMode, still fails with the call that made it.
BELOW_TORCH_FUNCTION = [
    ("modules-layer-norm-from-scratch", "F.layer_norm, in layer_norm, line 7",
     "import torch\nimport torch.nn.functional as F\n\n\n"
     "def layer_norm(x, normalized_shape, weight, bias, eps=1e-5):\n"
     "    with torch._C.DisableTorchFunction():\n"
     "        return F.layer_norm(x, normalized_shape, weight, bias, eps)\n"),
    ("tensors-logsumexp", "aten::logcumsumexp, in logsumexp, line 5",
     "import torch\n\n\ndef logsumexp(x, dim):\n    return torch.logcumsumexp(x, dim).select(dim, -1)\n"),
    ("sequences-label-smoothing", "F.cross_entropy, in smoothed_cross_entropy",
     "import torch\nimport torch.nn.functional as F\n\n\n"
     "def smoothed_cross_entropy(logits, targets, eps, ignore_index):\n"
     "    with torch._C.DisableTorchFunction():\n"
     "        return F.cross_entropy(logits, targets, label_smoothing=eps, ignore_index=ignore_index)\n"),
    ("loop-adamw-from-scratch", "torch.optim.adamw.adamw, in adamw_step",
     "import torch\nfrom torch.optim.adamw import adamw\n\n\n@torch.no_grad()\n"
     "def adamw_step(params, states, step, lr, betas, eps, weight_decay):\n"
     "    adamw(\n"
     "        params, [p.grad for p in params], [s['exp_avg'] for s in states], [s['exp_avg_sq'] for s in states],\n"
     "        [], [torch.tensor(float(step)) for _ in params], foreach=False, amsgrad=False, beta1=betas[0],\n"
     "        beta2=betas[1], lr=lr, weight_decay=weight_decay, eps=eps, maximize=False)\n"),
    ("loop-adamw-from-scratch", "aten::_fused_adamw_, in adamw_step",
     "import torch\n\n\n@torch.no_grad()\ndef adamw_step(params, states, step, lr, betas, eps, weight_decay):\n"
     "    torch._fused_adamw_(\n"
     "        params, [p.grad for p in params], [s['exp_avg'] for s in states], [s['exp_avg_sq'] for s in states],\n"
     "        [], [torch.tensor(float(step)) for _ in params], lr=lr, beta1=betas[0], beta2=betas[1],\n"
     "        weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)\n"),
]


@pytest.mark.parametrize(("drill_id", "named", "source"), BELOW_TORCH_FUNCTION,
                         ids=["layer-norm-torch-function-off", "logcumsumexp-synonym",
                              "cross-entropy-torch-function-off", "functional-adamw", "fused-adamw-kernel"])
def test_a_forbidden_call_hidden_from_torch_function_fails_naming_it(drill_id, named, source, tmp_path):
    answer = tmp_path / "answer.py"  # as `harness drill check` runs it: from the candidate's file
    answer.write_text(source)
    result = check_source(get_drill(drill_id), source, filename=str(answer), case=Case(seed=11))
    assert (result.passed, result.code) == (False, "forbidden-call"), result.message
    assert named in result.message, result.message


LEGIT_BELOW_TORCH_FUNCTION = [
    ("loop-adamw-from-scratch",  # torch._foreach_* ops are tensor operations, not torch.optim
     "import torch\n\n\n@torch.no_grad()\ndef adamw_step(params, states, step, lr, betas, eps, weight_decay):\n"
     "    b1, b2 = betas\n    grads = [p.grad for p in params]\n"
     "    m, v = [s['exp_avg'] for s in states], [s['exp_avg_sq'] for s in states]\n"
     "    torch._foreach_mul_(params, 1 - lr * weight_decay)\n"
     "    torch._foreach_lerp_(m, grads, 1 - b1)\n"
     "    torch._foreach_mul_(v, b2)\n    torch._foreach_addcmul_(v, grads, grads, 1 - b2)\n"
     "    denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(v), (1 - b2 ** step) ** 0.5), eps)\n"
     "    torch._foreach_addcdiv_(params, m, denom, -lr / (1 - b1 ** step))\n"),
    ("modules-layer-norm-from-scratch",
     "import torch\n\n\ndef layer_norm(x, normalized_shape, weight, bias, eps=1e-5):\n"
     "    dims = tuple(range(-len(normalized_shape), 0))\n"
     "    var, mean = torch.var_mean(x, dim=dims, correction=0, keepdim=True)\n"
     "    return (x - mean) * torch.rsqrt(var + eps) * weight + bias\n"),
]


@pytest.mark.parametrize(("drill_id", "source"), LEGIT_BELOW_TORCH_FUNCTION, ids=["foreach-adamw", "var-mean-rsqrt"])
def test_a_correct_answer_written_with_other_kernels_passes(drill_id, source, tmp_path):
    answer = tmp_path / "answer.py"
    answer.write_text(source)
    result = check_source(get_drill(drill_id), source, filename=str(answer), case=Case(seed=11))
    assert result.passed, result.message
