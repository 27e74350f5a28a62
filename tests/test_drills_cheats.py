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
        "import harness.drills.bank.tensors as bank\n"
        "import harness.drills.support as support\n"
        "support.assert_close = lambda *a, **k: None\n"
        "bank.assert_close = lambda *a, **k: None\n"
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
