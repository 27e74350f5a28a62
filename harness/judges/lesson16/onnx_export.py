"""16-onnx-export, the judge.

The file exists, names its input and output as asked, has a dynamic batch axis, was exported in eval mode,
and ONNX Runtime's outputs match eager's within the tolerance at every batch size.
"""

from __future__ import annotations

import re

import torch

from harness.checks.lesson16.common import case_config, case_inputs, case_model
from harness.checks.lesson16.onnx_export import EXPORT_ROWS, onnx_batches
from harness.contract.case import Case
from harness.contract.compare import close_values, type_name
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson16.common import _reference


def _warned(warnings: object) -> str:
    """'; torch warned: "<its first sentence>"' for the first warning the export raised, when that sentence arrived
    whole (the probe keeps 200 characters of each); '' otherwise."""
    if not isinstance(warnings, list) or not warnings or not isinstance(warnings[0], str):
        return ""
    text = warnings[0]
    sentence, end, _ = text.partition(". ")
    if end:
        return f'; torch warned: "{sentence}."'
    return f'; torch warned: "{text}"' if len(text) < 200 else ""


_KEYS = re.compile(r"arg names (\[[^\]]*\]) of `inputs`, but here they are (\[[^\]]*\])")


def _fail_dynamic_shapes(seen: dict, where: str) -> None:
    """Fail with [raised], explained: torch.export refused the dynamic_shapes it was given (its own words, and
    what it matches them against)."""
    refused, raised = seen["dynamic_shapes_refused"], seen.get("raised")
    if not (isinstance(refused, str) and isinstance(raised, str)):
        raise WireError("malformed observation: the refusal is not text")
    keys = _KEYS.search(refused)
    if keys and keys.group(2).startswith("['"):
        cause = (f"dynamic_shapes is a dict keyed by {keys.group(2)}, a name of your choosing (input_names names the "
                 f"inputs of the ONNX file, after the export); torch.export matches dynamic_shapes against the "
                 f"forward's own arguments, here {keys.group(1)}")
    elif keys:
        cause = (f"dynamic_shapes is the axes of one input, keyed by {keys.group(2)}, without the structure around "
                 f"it: torch.export takes one entry per input of the example tuple (a tuple), or a dict keyed by "
                 f"the forward's argument names, here {keys.group(1)}")
    else:
        cause = "torch.export refused the dynamic_shapes given, in its words above"
    first = re.sub(r"\x1b\[[0-9;]*m", "", raised.splitlines()[0] if raised else "").partition(". ")[0][:160]
    fail("raised", observed=f"your code raised {first}; torch.export, step 1 of the ONNX "
         f"export, refused dynamic_shapes: \"{refused[:400]}\"",
         expected="dynamic_shapes in the structure of the example inputs: ({0: torch.export.Dim('batch')},), one "
         "entry per input with its dynamic axes",
         cause=cause, where=where,
         hint="Print inspect.signature(model.forward): dynamic_shapes follows these arguments (or the tuple of "
         "inputs you pass), not input_names.")


@judges(
    "16-onnx-export",
    hints=Hints(
        nudge="torch.onnx.export(model, (example,), path, dynamo=True, ...) in eval mode, with the names the "
        "exercise gives and the batch axis declared dynamic (torch.export.Dim).",
        concept="The exporter traces the model on the example: every shape it sees becomes a constant unless "
        "declared dynamic, and the mode it runs in (train or eval) is frozen into the graph. Serving code feeds "
        "ONNX Runtime by input name.",
        solution='model.eval()\ntorch.onnx.export(model, (example,), path, dynamo=True, verbose=False, '
        'input_names=["features"], output_names=["logits"], '
        'dynamic_shapes=({0: torch.export.Dim("batch")},))',
        section="3. torch.export, ONNX and ONNX Runtime",
    ),
    requires={
        "no-file": Requirement(
            "writes the .onnx file to `path`",
            hint="What does torch.onnx.export(..., dynamo=True) return, and does it save anything when it is "
            "given no file?"),
        "torchscript-exporter": Requirement(
            "exports with torch.onnx.export(..., dynamo=True), the torch.export-based exporter",
            hint="Which exporter runs when you pass dynamo=False (or an old torch's default)? The TorchScript one "
            "traces with torch.jit and is deprecated."),
        "wrong-names": Requirement(
            'the input is named "features" and the output "logits"',
            hint="Print [i.name for i in session.get_inputs()] for your file: which exporter argument names them?"),
        "static-batch": Requirement(
            "the batch axis is dynamic: the file runs at batch sizes other than the example's",
            hint="Print session.get_inputs()[0].shape: a number where the batch size goes means it was frozen at "
            "export. Which argument declares an axis dynamic?"),
        "train-mode": Requirement(
            "exports the model in eval mode",
            hint="In which mode is the model when it arrives, and what does the exporter freeze into the graph?"),
        "wrong-output": Requirement(
            "ONNX Runtime computes the model's logits (atol 1e-4, rtol 1e-3)",
            hint="Compare session.run(...) with model(x) in eval mode on a few rows: is something added to the "
            "exported computation?"),
    },
)
def judge_onnx_export(seen: dict, *, case: Case) -> str:
    """The file exists, names its input and output as asked, has a dynamic batch axis, was exported in eval mode,
    and ONNX Runtime's outputs match eager's within the tolerance at every batch size."""
    where = "the torch.onnx.export(...) call of export_onnx"
    if "dynamic_shapes_refused" in seen:
        _fail_dynamic_shapes(seen, where)
    if seen.get("written") is not True:
        program = seen.get("returned") == "ONNXProgram"
        fail("no-file", observed="no file at path" + (f"; export_onnx returned an {seen.get('returned')}" if program
                                                        else f"; the folder holds {seen.get('files') or 'nothing'}"),
             expected="the .onnx file written at exactly the path given",
             cause="torch.onnx.export(..., dynamo=True) was given no file: it returns an ONNXProgram that you must "
             "save (program.save(path)) or pass path as its third argument" if program else
             "another file name (a suffix added to path) or nothing saved", where=where)
    modes = seen.get("modes")
    if not isinstance(modes, list) or not all(isinstance(m, bool) for m in modes):
        raise WireError("malformed observation: modes is not a list of flags")
    if any(modes):
        fail("train-mode", observed="the exporter traced the model in training mode"
             + _warned(seen.get("warnings")),
             expected="model.eval() before exporting: the graph keeps Dropout and BatchNorm as they ran",
             cause="the model arrives in training mode (as after training) and model.eval() is missing",
             where="before the export call in export_onnx")
    jit = seen.get("jit")
    if not isinstance(jit, list) or len(jit) != len(modes) or not all(isinstance(j, bool) for j in jit):
        raise WireError("malformed observation: jit is not one flag per forward")
    if any(jit):
        fail("torchscript-exporter", observed="the model's forward was traced by torch.jit (the TorchScript exporter)"
             + _warned(seen.get("warnings")),
             expected="torch.onnx.export(..., dynamo=True): torch.export traces the model, not torch.jit",
             cause="dynamo=False selects the legacy TorchScript exporter (deprecated, and slated for removal)",
             where=where)
    inputs, outputs = seen.get("inputs"), seen.get("outputs")
    if not (isinstance(inputs, list) and inputs and isinstance(outputs, list) and outputs
            and all(isinstance(i, tuple) and len(i) == 2 and isinstance(i[1], list) for i in inputs)):
        raise WireError("malformed observation: no input or output description")
    names = ([i[0] for i in inputs], outputs)
    if names != (["features"], ["logits"]):
        fail("wrong-names", observed=f"inputs {names[0]}, outputs {names[1]}",
             expected="one input named 'features' and one output named 'logits'",
             cause="input_names and output_names are missing (the exporter then uses the forward's argument name "
             "and an internal node name) or spelled differently", where=where)
    shape = inputs[0][1]
    features = case_config(case)["features"]
    if not shape or isinstance(shape[0], int) or shape[1:] != [features]:
        fail("static-batch", observed=f"the input's shape in the file is {shape}",
             expected=f"['batch', {features}]: a named, dynamic first axis",
             cause="no dynamic_shapes (torch.export.Dim) for axis 0: the exporter froze the example's batch size "
             f"({EXPORT_ROWS})" if shape and shape[0] == EXPORT_ROWS else
             "the dynamic axis is declared on the wrong dimension", where=where)
    runs, batches = seen.get("runs"), onnx_batches(case)
    if not isinstance(runs, list) or len(runs) != len(batches):
        raise WireError("malformed observation: not one run per batch size")
    model = case_model(case, salt=30)
    for rows, run in zip(batches, runs, strict=True):
        if not isinstance(run, dict):
            raise WireError("malformed observation: a run is not a record")
        want = _reference(model, case_inputs(case, rows, salt=40))
        got = run.get("output")
        if not close_values(got, want, rtol=1e-3, atol=1e-4):
            observed = (f"ONNX Runtime raised at batch {rows}: {run.get('error', '')[:200]}" if "error" in run else
                        f"at batch {rows}, output of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor)
                        and got.shape != want.shape else
                        f"at batch {rows}, output of dtype {got.dtype}" if isinstance(got, torch.Tensor)
                        and got.dtype != want.dtype else
                        f"at batch {rows}, largest difference {float((got.float() - want).abs().max()):.3g} from eager"
                        if isinstance(got, torch.Tensor) else f"at batch {rows}, {type_name(got)}")
            fail("wrong-output", observed=observed, expected=f"eager's logits within atol 1e-4, rtol 1e-3, shape "
                 f"{tuple(want.shape)}",
                 cause="the exported computation is not the model's forward (a softmax or another function "
                 "wrapped around it, other weights, or another dtype)", where=where)
    return (f"an .onnx file with input 'features' ['batch', {features}] and output 'logits', exported in eval mode; "
            f"ONNX Runtime matches eager at batch sizes {batches}")
