"""Lesson 16 checks reject plausible mistakes with the right code and message, and accept correct variants.

MISTAKES and CORRECT are data (tests/test_requirements.py reads them); the two parametrized tests run them.
The export mistakes each run one real ONNX export (about a second each on a CPU).
"""

from __future__ import annotations

import copy
import io
import json
import os
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.checks.testing import Correct, Mistake, solution_cell


# ---------------------------------------------------------------- 16-save-artefact
def save_solution(model, config, path):
    torch.save({"config": dict(config), "state_dict": model.state_dict()}, path)


def save_copied(model, config, path):
    state = {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}
    artefact = {"state_dict": state, "config": {key: config[key] for key in config}}
    with open(path, "wb") as file:
        torch.save(artefact, file)


def save_using(*, whole_module=False, namespace=False, state_only=False, suffix="", json_config=False,
               parameters_only=False, half=False, eval_first=False, half_model=False, keys=("config", "state_dict")):
    def save_artefact(model, config, path):
        if whole_module:
            torch.save(model, path)
            return
        if eval_first:
            model.eval()
        if half_model:
            model.half()
        state = dict(model.named_parameters()) if parameters_only else model.state_dict()
        if half:
            state = {k: v.half() for k, v in state.items()}
        if state_only:
            torch.save(state, path + suffix)
            return
        cfg = types.SimpleNamespace(**config) if namespace else json.dumps(config) if json_config else config
        torch.save({keys[0]: cfg, keys[1]: state}, path + suffix)

    return save_artefact


def save_through_buffer(model, config, path):
    buffer = io.BytesIO()
    torch.save(dict(config=dict(**config), state_dict={k: v for k, v in model.state_dict().items()}), buffer)
    Path(path).write_bytes(buffer.getvalue())


# ---------------------------------------------------------------- 16-load-artefact
def load_solution(path, build_model):
    artefact = torch.load(path, weights_only=True, map_location="cpu")
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"])
    return model.eval()


def load_default(path, build_model):
    artefact = torch.load(path, map_location="cpu")  # weights_only=True is the default since torch 2.6
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"], strict=True)
    model.train(False)
    return model


def load_from_open_file(path, build_model):
    with open(path, "rb") as file:
        artefact = torch.load(file, map_location=lambda storage, location: storage, weights_only=True)
    model = build_model(**artefact["config"]).eval()
    incompatible = model.load_state_dict(artefact["state_dict"], strict=True)
    assert not incompatible.missing_keys
    return model


def load_using(*, weights_only=True, fallback=False, swallow=False, strict=True, evaluate=True, load=True,
               return_keys=False, return_artefact=False, map_location="cpu"):
    def load_artefact(path, build_model):
        try:
            artefact = torch.load(path, weights_only=weights_only, map_location=map_location)
        except Exception:
            if swallow:
                return None
            if not fallback:
                raise
            artefact = torch.load(path, weights_only=False, map_location=map_location)
        if return_artefact:
            return artefact
        model = build_model(**artefact["config"])
        if return_keys:
            return model.load_state_dict(artefact["state_dict"])
        if load:
            model.load_state_dict(artefact["state_dict"], strict=strict)
        return model.eval() if evaluate else model

    return load_artefact


# ---------------------------------------------------------------- 16-predict
def predict_solution(model, inputs, batch_size):
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            outputs = [model(torch.stack(inputs[i:i + batch_size]).to(device))
                       for i in range(0, len(inputs), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outputs).cpu()


def predict_split(model, inputs, batch_size):
    mode = model.training
    model.train(False)
    chunks = []
    with torch.inference_mode():
        for batch in torch.stack(inputs).split(batch_size):
            chunks.append(model(batch))
    model.train(mode)
    return torch.cat(chunks, dim=0)


def predict_loader(model, inputs, batch_size):
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return torch.cat([model(batch) for batch in torch.utils.data.DataLoader(inputs, batch_size=batch_size)])
    finally:
        model.train(was_training)


def predict_using(*, evaluate=True, context="inference", batching="batches", join="cat", head=None, restore=True,
                  back_to_train=False):
    def predict(model, inputs, batch_size):
        was_training = model.training
        if evaluate:
            model.eval()
        if batching == "one":
            groups = [[x] for x in inputs]
        elif batching == "all":
            groups = [inputs]
        elif batching == "drop-last":
            groups = [inputs[i:i + batch_size] for i in range(0, len(inputs) - batch_size, batch_size)]
        else:
            groups = [inputs[i:i + batch_size] for i in range(0, len(inputs), batch_size)]
        block = torch.inference_mode() if context == "inference" else torch.no_grad() if context == "no_grad" \
            else torch.enable_grad()
        with block:
            outputs = [model(torch.stack(group)) for group in groups]
        if back_to_train:
            model.train()
        elif restore:
            model.train(was_training)
        if join == "list":
            return outputs
        joined = torch.cat(outputs)
        return head(joined) if head else joined

    return predict


# ---------------------------------------------------------------- 16-onnx-export
def export_solution(model, example, path):
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False, input_names=["features"],
                      output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},))


def export_through_torch_export(model, example, path):
    was_training = model.training
    model.eval()
    program = torch.export.export(model, (example,), dynamic_shapes={"x": {0: torch.export.Dim("rows", min=1)}})
    model.train(was_training)
    onnx_program = torch.onnx.export(program, dynamo=True, verbose=False, input_names=["features"],
                                     output_names=["logits"])
    onnx_program.save(path)


def export_copy_saved(model, example, path):
    program = torch.onnx.export(copy.deepcopy(model).eval(), (example,), dynamo=True, verbose=False,
                                input_names=["features"], output_names=["logits"],
                                dynamic_shapes={"x": {0: torch.export.Dim("rows", min=1, max=4096)}})
    program.save(path)


def export_shapes_by_input_name(model, example, path):
    # dynamic_shapes keyed by the ONNX input name: torch.export matches the keys against forward's arguments
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False, input_names=["features"],
                      output_names=["logits"], dynamic_shapes={"features": {0: torch.export.Dim("batch")}})


def export_shapes_without_tuple(model, example, path):
    # the axes of the one input, without the tuple around them (one entry per input)
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False, input_names=["features"],
                      output_names=["logits"], dynamic_shapes={0: torch.export.Dim("batch")})


def export_using(*, evaluate=True, dynamic=True, names=True, save=True, wrap=None, dynamo=True):
    def export_onnx(model, example, path):
        if evaluate:
            model.eval()
        module = nn.Sequential(model, wrap) if wrap is not None else model
        extra = {"input_names": ["features"], "output_names": ["logits"]} if names else {}
        if dynamic and dynamo:
            extra["dynamic_shapes"] = ({0: torch.export.Dim("batch")},)
        elif dynamic:
            extra["dynamic_axes"] = {"features": {0: "batch"}, "logits": {0: "batch"}}
        if save:
            torch.onnx.export(module, (example,), path, dynamo=dynamo, verbose=False, **extra)
            return None
        return torch.onnx.export(module, (example,), dynamo=True, verbose=False, **extra)

    return export_onnx


# ---------------------------------------------------------------- 16-int8-weights
def quantize_solution(weight):
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale


def quantize_where(weight):
    largest = weight.abs().max(dim=1, keepdim=True).values
    scale = torch.where(largest > 0, largest / 127.0, torch.ones_like(largest))
    q = (weight / scale).round().to(torch.int8)
    return q, scale


def quantize_inf_norm(weight):
    scale = torch.linalg.vector_norm(weight, ord=float("inf"), dim=1, keepdim=True) / 127
    scale = scale.masked_fill(scale == 0, 1.0)
    return torch.clamp(torch.round(weight / scale), min=-127, max=127).to(dtype=torch.int8), scale


def quantize_no_keepdim(weight):
    scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale


def quantize_upcast(weight):
    w = weight.float()  # float32 for the arithmetic, whatever the weight's dtype
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def quantize_upcast_cast_back(weight):
    w = weight.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale.to(weight.dtype)


def quantize_asymmetric(weight):
    low, high = weight.amin(dim=1, keepdim=True), weight.amax(dim=1, keepdim=True)
    scale = (high - low).clamp(min=1e-12) / 255
    zero_point = torch.round(-low / scale) - 128
    return torch.clamp(torch.round(weight / scale) + zero_point, -128, 127).to(torch.int8), scale


def quantize_using(*, cast=True, per_row=True, expand=False, divisor=127.0, use_abs=True, rounding="round",
                   floor=1e-12, in_place=False):
    def quantize_per_channel(weight):
        magnitude = weight.abs() if use_abs else weight
        if per_row:
            scale = magnitude.amax(dim=1, keepdim=True)
        else:
            scale = magnitude.amax()
            if expand:
                scale = scale.expand(weight.shape[0], 1).clone()
        if floor:
            scale = scale.clamp(min=floor)
        scale = scale / divisor
        if in_place:
            scaled = weight.div_(scale)
        else:
            scaled = weight / scale
        q = scaled.round() if rounding == "round" else scaled
        q = q.clamp(-127, 127)
        return (q.to(torch.int8) if cast else q), scale

    return quantize_per_channel


# ---------------------------------------------------------------- 16-top-k
TOP_K_NO_GRAD = solution_cell(  # the planted bug: torch.no_grad(), the older habit, where inference_mode was asked
    "def top_k(model, inputs, k):\n"
    "    model.eval()\n"
    "    with torch.no_grad():\n"
    "        probabilities = model(inputs).softmax(dim=-1)\n"
    "    values, classes = probabilities.topk(k, dim=-1)\n"
    "    return classes, values\n",
    "top_k")


def top_k_using(*, evaluate=True, context=torch.inference_mode, dim=-1, softmax=True, descending=True,
                ids=torch.int64):
    def top_k(model, inputs, k):
        model.train(not evaluate)
        with context():
            logits = model(inputs)
        scores = logits.softmax(dim) if softmax else logits
        probabilities, classes = scores.sort(dim=-1, descending=descending)
        return classes[:, :k].to(ids), probabilities[:, :k]

    return top_k


def top_k_renormalised(model, inputs, k):
    # topk on the logits, then softmax over the kept k: the probabilities sum to 1 over the top k only
    model.eval()
    with torch.inference_mode():
        values, classes = model(inputs).topk(k, dim=-1)
    return classes, values.softmax(dim=-1)


def top_k_gathered(model, inputs, k):
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        logits = model(inputs)
    model.train(was_training)
    classes = logits.topk(k, dim=1).indices
    return classes, logits.log_softmax(dim=1).exp().gather(1, classes)


MISTAKES = [
    # 16-save-artefact
    Mistake("16-save-artefact", "not-weights-only", "common.Classifier, and weights_only",
            (save_using(whole_module=True),),
            story="torch.save(model, path): the tutorial one-liner, which pickles the class"),
    Mistake("16-save-artefact", "not-weights-only", "of the class types.SimpleNamespace", (save_using(namespace=True),),
            story="keeps the config as a SimpleNamespace, an object of a class"),
    Mistake("16-save-artefact", "wrong-layout", "the state_dict alone", (save_using(state_only=True),),
            story="saves model.state_dict() alone, as most tutorials do, so the config is lost"),
    Mistake("16-save-artefact", "wrong-layout", "keys ['cfg', 'weights']", (save_using(keys=("cfg", "weights")),),
            story="picks its own key names"),
    Mistake("16-save-artefact", "no-file", "classifier.pt.pt", (save_using(suffix=".pt"),),
            story="adds a .pt suffix to a path that already has one"),
    Mistake("16-save-artefact", "wrong-config", "is str", (save_using(json_config=True),),
            story="stores the config as a JSON string to keep it 'portable'"),
    Mistake("16-save-artefact", "missing-buffers", "running_mean", (save_using(parameters_only=True),),
            story="saves dict(model.named_parameters()), forgetting BatchNorm's buffers"),
    Mistake("16-save-artefact", "wrong-weights", "torch.float16", (save_using(half=True),),
            story="halves every tensor to make the file smaller"),
    Mistake("16-save-artefact", "model-changed", "now eval", (save_using(eval_first=True),),
            story="calls model.eval() before saving and leaves it there"),
    Mistake("16-save-artefact", "model-changed", "weights or dtype", (save_using(half_model=True),),
            story="model.half() before saving: converts the caller's model in place"),
    Mistake("16-save-artefact", "not-weights-only", "common.Classifier, and weights_only", solution_cell(
        "def save_artefact(model, config, path):\n"
        "    torch.save(model, path)\n",
        "save_artefact"),
        story="the tutorial one-liner: the pickled module, which a weights-only load refuses", planted=True),
    # 16-load-artefact
    Mistake("16-load-artefact", "not-a-module", "_IncompatibleKeys", (load_using(return_keys=True),),
            story="return model.load_state_dict(...), which returns the keys, not the model"),
    Mistake("16-load-artefact", "not-a-module", "the artefact or its state_dict", (load_using(return_artefact=True),),
            story="returns what torch.load read"),
    Mistake("16-load-artefact", "unsafe-load", "ran the code", (load_using(weights_only=False),),
            story="weights_only=False, copied from an old answer to make a warning go away"),
    Mistake("16-load-artefact", "unsafe-load", "ran the code", (load_using(fallback=True),),
            story="falls back to weights_only=False when the safe load fails"),
    Mistake("16-load-artefact", "unsafe-load", "loaded without an error", (load_using(swallow=True),),
            story="catches every exception and returns None"),
    Mistake("16-load-artefact", "not-strict", "strict=False", (load_using(strict=False),),
            story="strict=False to get past a key error"),
    Mistake("16-load-artefact", "no-map-location", "without map_location", (load_using(map_location=None),),
            story="torch.load(path, weights_only=True): fine on the training machine, fails on a CPU server"),
    Mistake("16-load-artefact", "train-mode", "model.eval() is missing", (load_using(evaluate=False),),
            story="returns the freshly built model without eval()"),
    Mistake("16-load-artefact", "wrong-weights", "never loaded", (load_using(load=False),),
            story="builds the model from the config and forgets load_state_dict"),
    Mistake("16-load-artefact", "not-strict", "strict=False", solution_cell(
        "def load_artefact(path, build_model):\n"
        "    artefact = torch.load(path, weights_only=True, map_location='cpu')\n"
        "    model = build_model(**artefact['config'])\n"
        "    model.load_state_dict(artefact['state_dict'], strict=False)\n"
        "    return model.eval()\n",
        "load_artefact"),
        story="strict=False: an artefact whose names do not match loads silently, leaving a layer random",
        planted=True),
    # 16-predict
    Mistake("16-predict", "train-mode", "training mode", (predict_using(evaluate=False),),
            story="forgets model.eval(): Dropout and batch statistics stay on"),
    Mistake("16-predict", "no-inference-mode", "torch.no_grad()", (predict_using(context="no_grad"),),
            story="uses torch.no_grad(), the older habit"),
    Mistake("16-predict", "no-inference-mode", "grad mode on", (predict_using(context="none"),),
            story="no grad context at all"),
    Mistake("16-predict", "wrong-batches", "one request at a time", (predict_using(batching="one"),),
            story="loops over the requests one by one"),
    Mistake("16-predict", "wrong-batches", "ignoring batch_size", (predict_using(batching="all"),),
            story="stacks everything into one batch"),
    Mistake("16-predict", "wrong-batches", "drops or repeats", (predict_using(batching="drop-last"),),
            story="range(0, len(inputs) - batch_size, batch_size) drops the last batches"),
    Mistake("16-predict", "not-a-tensor", "torch.cat", (predict_using(join="list"),),
            story="returns the list of batch outputs"),
    Mistake("16-predict", "wrong-output", "softmax", (predict_using(head=lambda y: y.softmax(-1)),),
            story="returns probabilities instead of logits"),
    Mistake("16-predict", "wrong-output", "shape (10,)", (predict_using(head=lambda y: y.argmax(-1)),),
            story="returns the predicted classes"),
    Mistake("16-predict", "flag-not-restored", "left in eval mode", (predict_using(restore=False),),
            story="switches to eval and never switches back"),
    Mistake("16-predict", "flag-not-restored", "model.train() at the end", (predict_using(back_to_train=True),),
            story="calls model.train() at the end, sure that every model arrives from training"),
    Mistake("16-predict", "no-inference-mode", "torch.no_grad()", solution_cell(
        "def predict(model, inputs, batch_size):\n"
        "    was_training = model.training\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        outputs = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]\n"
        "    model.train(was_training)\n"
        "    return torch.cat(outputs).cpu()\n",
        "predict"),
        story="torch.no_grad() where inference_mode was asked", planted=True),
    # 16-onnx-export
    Mistake("16-onnx-export", "train-mode", "training mode", (export_using(evaluate=False),),
            story="exports right after training, in training mode"),
    Mistake("16-onnx-export", "torchscript-exporter", "traced by torch.jit",
            (export_using(dynamo=False),), story="dynamo=False with dynamic_axes, from a pre-2.9 tutorial"),
    Mistake("16-onnx-export", "static-batch", "froze the example's batch size", (export_using(dynamic=False),),
            story="no dynamic_shapes: the batch size of the example is baked in"),
    Mistake("16-onnx-export", "wrong-names", "outputs ['linear_1']", (export_using(names=False),),
            story="leaves the names to the exporter"),
    Mistake("16-onnx-export", "no-file", "ONNXProgram", (export_using(save=False),),
            story="torch.onnx.export without a path returns the program and writes nothing"),
    Mistake("16-onnx-export", "raised", "dict keyed by ['features'], a name of your choosing",
            (export_shapes_by_input_name,), story="dynamic_shapes={'features': {0: Dim('batch')}}, by input name"),
    Mistake("16-onnx-export", "raised", "without the structure around it", (export_shapes_without_tuple,),
            story="dynamic_shapes={0: Dim('batch')}, the outer tuple missing"),
    Mistake("16-onnx-export", "wrong-output", "largest difference", (export_using(wrap=nn.Softmax(-1)),),
            story="adds a softmax to serve probabilities"),
    Mistake("16-onnx-export", "static-batch", "froze the example's batch size", solution_cell(
        "def export_onnx(model, example, path):\n"
        "    model.eval()\n"
        "    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,\n"
        "                      input_names=['features'], output_names=['logits'])\n",
        "export_onnx"),
        story="no dynamic_shapes: the example's batch size (4) is frozen into the file", planted=True),
    # 16-int8-weights
    Mistake("16-int8-weights", "not-int8", "missing .to(torch.int8)", (quantize_using(cast=False),),
            story="rounds but keeps float32"),
    Mistake("16-int8-weights", "per-tensor", "shape ()", (quantize_using(per_row=False),),
            story="amax() without dim: one scale for the whole matrix"),
    Mistake("16-int8-weights", "per-tensor", "every row has the same scale",
            (quantize_using(per_row=False, expand=True),), story="one global scale, broadcast to the row shape"),
    Mistake("16-int8-weights", "wrong-scale", "0.9922 times", (quantize_using(divisor=128.0),),
            story="divides by 128, the size of the negative range"),
    Mistake("16-int8-weights", "wrong-scale", "torch.float64",
            (lambda weight: (quantize_solution(weight)[0], quantize_solution(weight.double())[1]),),
            story="computes the scales in float64 for precision and returns them so"),
    Mistake("16-int8-weights", "per-tensor", "keepdim=True is missing: amax(dim=1) gives shape (6,)",
            (quantize_no_keepdim,), story="amax(dim=1) without keepdim: the scale has shape (out,)"),
    Mistake("16-int8-weights", "wrong-scale", "computed in float32 (an upcast such as weight.float()",
            (quantize_upcast,), story="weight.float() first for the arithmetic; the float32 scale returned"),
    Mistake("16-int8-weights", "wrong-scale", "without abs()", (quantize_using(use_abs=False),),
            story="takes the row's largest weight, not its largest magnitude"),
    Mistake("16-int8-weights", "not-rounded", "truncated", (quantize_using(rounding="truncate"),),
            story=".to(torch.int8) straight away, which truncates toward zero"),
    Mistake("16-int8-weights", "zero-row", "give the scale a floor", (quantize_using(floor=0.0),),
            story="divides by max|w| / 127 even for a row of zeros"),
    Mistake("16-int8-weights", "zero-point", "zero point", (quantize_asymmetric,),
            story="asymmetric int8 (range / 255 and a zero point), as in the quantisation papers"),
    Mistake("16-int8-weights", "weight-modified", "weight changed", (quantize_using(in_place=True),),
            story="weight.div_(scale) to save memory"),
    Mistake("16-int8-weights", "per-tensor", "shape ()", solution_cell(
        "def quantize_per_channel(weight):\n"
        "    scale = weight.abs().amax().clamp(min=1e-12) / 127\n"
        "    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale\n",
        "quantize_per_channel"),
        story="one scale for the whole matrix: the rows of small weights round to zero", planted=True),
    # 16-top-k
    Mistake("16-top-k", "no-inference-mode", "torch.no_grad()", TOP_K_NO_GRAD, story="the older habit", planted=True),
    Mistake("16-top-k", "train-mode", "training mode", (top_k_using(evaluate=False),), story="forgets model.eval()"),
    Mistake("16-top-k", "not-probabilities", "over the batch", (top_k_using(dim=0),),
            story="softmax(dim=0): the probabilities of each class across the batch"),
    Mistake("16-top-k", "not-probabilities", "a softmax over the 2 kept logits only", (top_k_renormalised,),
            story="topk on the logits, then softmax over the kept k"),
    Mistake("16-top-k", "not-probabilities", "the logits", (top_k_using(softmax=False),),
            story="ranks the logits and returns them as the scores"),
    Mistake("16-top-k", "wrong-classes", "ascending", (top_k_using(descending=False),),
            story="sort() ascends by default: the least probable classes"),
    Mistake("16-top-k", "wrong-dtype", "torch.int32", (top_k_using(ids=torch.int32),),
            story=".int() on the ids to halve the response"),
]

CORRECT = [
    Correct("16-save-artefact", (save_solution,), story="the solution"),
    Correct("16-save-artefact", (save_copied,), story="CPU copies of each tensor, written through an open file"),
    Correct("16-save-artefact", (save_through_buffer,), story="saved to a BytesIO, written with Path.write_bytes"),
    Correct("16-load-artefact", (load_solution,), story="the solution"),
    Correct("16-load-artefact", (load_default,), story="relies on the weights_only=True default, train(False)"),
    Correct("16-load-artefact", (load_from_open_file,), story="an open file, a map_location function, eval first"),
    Correct("16-predict", (predict_solution,), story="the solution"),
    Correct("16-predict", (predict_split,), story="one stacked tensor split into batches"),
    Correct("16-predict", (predict_loader,), story="a DataLoader over the requests, mode restored in finally"),
    Correct("16-onnx-export", (export_solution,), story="the solution"),
    Correct("16-onnx-export", (export_through_torch_export,), story="torch.export first, then ONNX, mode restored"),
    Correct("16-onnx-export", (export_copy_saved,), story="an eval copy exported, ONNXProgram.save, a bounded Dim"),
    Correct("16-int8-weights", (quantize_solution,), story="the solution"),
    Correct("16-int8-weights", (quantize_where,), story="scale 1 for zero rows, no clamp of q"),
    Correct("16-int8-weights", (quantize_inf_norm,), story="the inf-norm of each row, masked_fill for zero rows"),
    Correct("16-int8-weights", (quantize_upcast_cast_back,), story="float32 arithmetic, the scale cast back"),
    Correct("16-top-k", solution_cell(TOP_K_NO_GRAD.source.replace("no_grad", "inference_mode"), "top_k"),
            story="the solution, without the planted bug"),
    Correct("16-top-k", (top_k_using(),), story="sorts every class, then keeps the first k"),
    Correct("16-top-k", (top_k_gathered,), story="topk on the logits, log_softmax().exp() gathered, mode restored"),
]


def test_the_trap_artefact_never_runs_its_code_in_a_safe_loader(tmp_path):
    """The load check's trap is refused by weights_only=True, and runs (harmlessly) without it."""
    from harness.checks.lesson16 import load_artefact as lesson16

    path = os.fspath(tmp_path / "trap.pt")
    torch.save({"note": lesson16._Trap()}, path)
    lesson16._SPRUNG.clear()
    with pytest.raises(Exception, match="Unsupported global"):
        torch.load(path, weights_only=True)
    assert lesson16._SPRUNG == []
    torch.load(path, weights_only=False)
    assert lesson16._SPRUNG == ["ran"]
    lesson16._SPRUNG.clear()
