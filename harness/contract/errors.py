"""What a student reads when their own code raises inside a check: the line of theirs that raised, and what
the error usually means.

Frames of the harness, of torch and of the standard library are never shown: a check's own lines (its
inputs, its comparisons) are not the student's to read or fix. Used by the probes (`harness.contract.protocol`)
and by the call recorder (`harness.contract.instruments.CallRecorder`) to name the student's line of a call.
"""

from __future__ import annotations

import linecache
import re
import sys
import sysconfig
import types
from pathlib import Path

import torch

_NOT_THE_STUDENTS = tuple(
    str(Path(folder).resolve())
    for folder in (
        Path(__file__).resolve().parents[1],  # harness
        Path(torch.__file__).resolve().parent,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    )
)

# The common errors of a training exercise and what to check for each. First match wins.
_TRANSLATIONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), advice)
    for pattern, advice in (
        (r"Expected all tensors to be on the same device|on different devices|Expected .* device",
         "a device mismatch: two tensors of one operation live on different devices. Create tensors with "
         "device=... (or move them with .to(device)) so that inputs, targets and the model agree."),
        (r"mat1 and mat2 shapes cannot be multiplied|must match the size of tensor|shape .* is invalid for input|"
         r"Expected input batch_size|size mismatch|cannot be broadcast|does not match the broadcast shape|"
         r"Dimension out of range|dimension specified as",
         "a shape mismatch: print the .shape of each tensor on that line and compare them with the shapes the "
         "exercise states (which axis is the batch, which the features)."),
        (r"expected scalar type|Found dtype|expected .* dtype|result type .* can't be cast|"
         r"expected m1 and m2 to have the same dtype|not implemented for '(Long|Int|Half|BFloat16)",
         "a dtype mismatch: check the .dtype of each tensor on that line (integer class labels, float inputs, "
         "a half-precision tensor outside autocast)."),
        (r"a leaf Variable that requires grad is being used in an in-place operation",
         "an in-place change of a tensor autograd tracks (a parameter): do updates of weights inside "
         "`with torch.no_grad():`."),
        (r"Trying to backward through the graph a second time",
         "backward() ran twice through one graph, whose saved values the first backward freed: compute a new "
         "forward (and loss) for each backward, or detach what you keep from an earlier step."),
        (r"does not require grad and does not have a grad_fn",
         "backward() on a tensor with no graph: the loss was computed under torch.no_grad(), from detached "
         "tensors (.detach(), .item(), numpy), or from parameters with requires_grad=False."),
        (r"modified by an inplace operation",
         "a tensor that backward needs was changed in place after the forward (an optimizer.step(), an `x += ...` "
         "or a `_` method) before backward ran: change the order, or use an out-of-place operation."),
        (r"Can't call numpy\(\) on Tensor that requires grad|can't convert .* to numpy",
         "a tensor went to numpy while it is part of a graph or on a GPU: stay in torch operations (numpy breaks "
         "autograd), or .detach().cpu() it for a value you only read."),
        (r"only one element tensors can be converted|a Tensor with \d+ elements cannot be converted to Scalar",
         "a tensor of several values was used as one number (float(), .item(), `if`): reduce it first "
         "(.sum(), .mean()) or index the element you mean."),
        (r"is not defined",
         "a name the code uses does not exist yet: run the cell that defines it (and the cells above it) first."),
        (r"NotImplementedError",
         "the exercise is not written yet: replace `raise NotImplementedError()` with your code."),
    )
)


def is_students(filename: str) -> bool:
    """Whether code from `filename` is the student's (a notebook cell, a script of theirs, a test's planted
    bug) rather than the harness's, torch's or Python's own."""
    if filename.startswith("<") and not filename.startswith("<ipython-input"):
        return False  # <frozen ...>, <string>: not a line the student can open
    return not str(Path(filename).resolve()).startswith(_NOT_THE_STUDENTS)


def student_line(frame: types.FrameType | None) -> str | None:
    """`function, line N: source` of the innermost frame from `frame` outwards that is the student's."""
    while frame is not None:
        code = frame.f_code
        if is_students(code.co_filename):
            source = linecache.getline(code.co_filename, frame.f_lineno).strip()
            place = f"in {code.co_name}, line {frame.f_lineno}"
            return f"{place}: {source}" if source else place
        frame = frame.f_back
    return None


def caller_line() -> str | None:
    """The student's line that is running right now (for a recorder called from inside their code)."""
    return student_line(sys._getframe(1))


def explain(error: BaseException) -> str:
    """`error` for a student: the exception, the last line of theirs it passed through, and what it usually means.

    Never quotes a line of the check itself: when the error arose in the check's own code (using what the
    student's code returned), it says so.
    """
    text = f"{type(error).__name__}: {error}".strip()
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    theirs = [tb for tb in frames if is_students(tb.tb_frame.f_code.co_filename)]
    if theirs:
        last = theirs[-1]
        code = last.tb_frame.f_code
        source = linecache.getline(code.co_filename, last.tb_lineno).strip()
        where = f"raised at your line {last.tb_lineno} of {code.co_name}: {source}" if source else \
            f"raised at your line {last.tb_lineno} of {code.co_name}"
        if last is not frames[-1]:
            where += " (inside the library call on that line)"
    else:
        where = "raised while the check used what your code returned (not on a line of yours)"
    advice = next((advice for pattern, advice in _TRANSLATIONS if pattern.search(text)), None)
    first_line = text.splitlines()[0] if text else type(error).__name__
    return f"{first_line[:600]}\n    {where}" + (f"\n    What it usually means: {advice}" if advice else "")
