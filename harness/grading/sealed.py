"""Hidden inputs as data, for a task whose targets must stay secret (`register(..., inputs_as_data=...)`).

A graded kernel gets each case of a task as {hidden, seed}, and its probe builds the inputs from them. Where the
targets follow from the same seed (held-out labels), that seed would hand the kernel the answer key. So the worker
builds such a task's hidden inputs itself, writes them into a folder the sandbox mounts read-only, and gives the
kernel the file (`Case.inputs`) with the local seed in place of the drawn one; the judge keeps the drawn seed and
rebuilds the targets. Both copies of a case share its digest (`Case.digest`), so observations still match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.contract.case import LOCAL_SEED, Case
from harness.contract.registry import get

Cases = dict[str, list[dict[str, Any]]]  # task -> [{"hidden", "seed"[, "inputs"]}]


def seal_cases(cases: Cases, folder: Path) -> tuple[Cases, Cases]:
    """(the kernel's cases, the judge's cases): the same, except the hidden cases of tasks with `inputs_as_data`,
    whose inputs are written into `folder` (which the kernel reads) and whose drawn seed only the judge gets."""
    kernel: Cases = {}
    judged: Cases = {}
    for task, task_cases in cases.items():
        build = get(task, judged=False).inputs_as_data
        kernel[task], judged[task] = [], []
        for index, fields in enumerate(task_cases):
            if build is None or not fields["hidden"]:
                kernel[task].append(fields)
                judged[task].append(fields)
                continue
            path = folder / f"{task}-{index}.pt"
            torch.save(build(Case(hidden=True, seed=int(fields["seed"]))), path)
            path.chmod(0o644)
            kernel[task].append({"hidden": True, "seed": LOCAL_SEED, "inputs": str(path)})
            judged[task].append({**fields, "inputs": str(path)})
    return kernel, judged
