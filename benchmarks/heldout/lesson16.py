"""Lesson 16 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import copy
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path
import torch
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
workdir = Path(tempfile.mkdtemp(prefix="lesson16-"))
'''

SA = "def save_artefact(model, config, path):\n"
LA = "def load_artefact(path, build_model):\n"
PR = "def predict(model, inputs, batch_size):\n"
EX = "def export_onnx(model, example, path):\n"
QP = "def quantize_per_channel(weight):\n"
TK = "def top_k(model, inputs, k):\n"

ENTRIES = [
    Entry("16-save-artefact", "mistake", "saved the whole model object",
          "pickles the nn.Module: the file does not load with weights_only=True", SA + '''
    torch.save({"config": config, "state_dict": model.state_dict(), "model": model}, path)
''', ("save_artefact",)),
    Entry("16-save-artefact", "mistake", "halved the model to make the file smaller",
          "model.half() converts the caller's model in place and saves float16 tensors", SA + '''
    torch.save({"config": config, "state_dict": model.half().state_dict()}, path)
''', ("save_artefact",)),
    Entry("16-save-artefact", "mistake", "put the model in eval mode before saving",
          "model.eval() changes the caller's mode and is not undone", SA + '''
    model.eval()
    torch.save({"config": config, "state_dict": model.state_dict()}, path)
''', ("save_artefact",)),
    Entry("16-save-artefact", "mistake", "saved named_parameters",
          "parameters only: BatchNorm's buffers are missing", SA + '''
    torch.save({"config": config, "state_dict": {n: p.detach() for n, p in model.named_parameters()}}, path)
''', ("save_artefact",)),
    Entry("16-load-artefact", "mistake", "strict=False to be tolerant",
          "a name that does not match leaves a layer at its random initialisation, silently", LA + '''
    artefact = torch.load(path, weights_only=True, map_location="cpu")
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"], strict=False)
    return model.eval()
''', ("load_artefact",)),
    Entry("16-load-artefact", "mistake", "no map_location",
          "a file saved on a GPU fails to load on a machine without one", LA + '''
    artefact = torch.load(path, weights_only=True)
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"])
    return model.eval()
''', ("load_artefact",)),
    Entry("16-load-artefact", "mistake", "fell back to weights_only=False when the safe load fails",
          "catches the refusal and loads the file unsafely (its code runs)", LA + '''
    try:
        artefact = torch.load(path, weights_only=True, map_location="cpu")
    except Exception:
        artefact = torch.load(path, weights_only=False, map_location="cpu")
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"])
    return model.eval()
''', ("load_artefact",)),
    Entry("16-load-artefact", "mistake", "returned the model in train mode",
          "eval() never called", LA + '''
    artefact = torch.load(path, weights_only=True, map_location="cpu")
    model = build_model(**artefact["config"])
    model.load_state_dict(artefact["state_dict"])
    return model
''', ("load_artefact",)),
    Entry("16-predict", "mistake", "left the model in eval mode",
          "the caller's mode is not restored: a training model comes back in eval mode", PR + '''
    model.eval()
    with torch.inference_mode():
        out = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]
    return torch.cat(out).cpu()
''', ("predict",)),
    Entry("16-predict", "mistake", "torch.no_grad instead of inference_mode",
          "the forward runs under no_grad, not inference_mode", PR + '''
    was = model.training
    model.eval()
    with torch.no_grad():
        out = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]
    model.train(was)
    return torch.cat(out).cpu()
''', ("predict",)),
    Entry("16-predict", "mistake", "full batches only",
          "range(len // batch_size) drops the last partial batch: fewer rows than requests", PR + '''
    was = model.training
    model.eval()
    with torch.inference_mode():
        out = [model(torch.stack(inputs[i * batch_size:(i + 1) * batch_size]))
               for i in range(len(inputs) // batch_size)]
    model.train(was)
    return torch.cat(out).cpu()
''', ("predict",)),
    Entry("16-predict", "mistake", "one forward on everything",
          "ignores batch_size: one forward on all requests at once", PR + '''
    was = model.training
    model.eval()
    with torch.inference_mode():
        out = model(torch.stack(inputs))
    model.train(was)
    return out.cpu()
''', ("predict",)),
    Entry("16-onnx-export", "mistake", "no dynamic_shapes",
          "the batch axis is fixed at 4: the file fails at batch 1 and 17", EX + '''
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,
                      input_names=["features"], output_names=["logits"])
''', ("export_onnx",)),
    Entry("16-onnx-export", "mistake", "dynamic_shapes keyed by the input name",
          "dynamic_shapes keyed by the ONNX name 'features' instead of forward's argument name (or position)", EX + '''
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,
                      input_names=["features"], output_names=["logits"],
                      dynamic_shapes={"features": {0: torch.export.Dim("batch")}})
''', ("export_onnx",)),
    Entry("16-onnx-export", "mistake", "exported in training mode",
          "model.eval() missing: exported from training mode", EX + '''
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,
                      input_names=["features"], output_names=["logits"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},))
''', ("export_onnx",)),
    Entry("16-onnx-export", "mistake", "TorchScript exporter with dynamic_axes",
          "dynamo=False selects the deprecated TorchScript exporter", EX + '''
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=False, input_names=["features"], output_names=["logits"],
                      dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}})
''', ("export_onnx",)),
    Entry("16-onnx-export", "mistake", "dynamic axis 1",
          "the feature axis (1) declared dynamic instead of the batch axis (0)", EX + '''
    model.eval()
    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,
                      input_names=["features"], output_names=["logits"],
                      dynamic_shapes=({1: torch.export.Dim("features")},))
''', ("export_onnx",)),
    Entry("16-int8-weights", "mistake", "no guard for zero rows",
          "a row of zeros gives scale 0 and 0/0 = nan", QP + '''
    scale = weight.abs().amax(dim=1, keepdim=True) / 127
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale
''', ("quantize_per_channel",)),
    Entry("16-int8-weights", "mistake", "one scale for the whole tensor",
          "per-tensor max instead of per row: scale is not per output channel", QP + '''
    scale = (weight.abs().max().clamp(min=1e-12) / 127).expand(weight.shape[0], 1).clone()
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale
''', ("quantize_per_channel",)),
    Entry("16-int8-weights", "mistake", "scale without keepdim",
          "scale has shape (out,): it broadcasts over the columns, and has the wrong shape", QP + '''
    scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale
''', ("quantize_per_channel",)),
    Entry("16-int8-weights", "mistake", "cast without rounding",
          ".to(int8) truncates toward zero instead of rounding", QP + '''
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return (weight / scale).to(torch.int8), scale
''', ("quantize_per_channel",)),
    Entry("16-int8-weights", "mistake", "scale computed in float32",
          "the weight is upcast: scale is float32, not the weight's dtype (bf16/half/double)", QP + '''
    w = weight.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale
''', ("quantize_per_channel",)),
    Entry("16-top-k", "mistake", "softmax over dim=0",
          "softmax over the batch instead of each row's classes", TK + '''
    model.eval()
    with torch.inference_mode():
        p = model(inputs).softmax(dim=0)
    v, c = p.topk(k, dim=-1)
    return c, v
''', ("top_k",)),
    Entry("16-top-k", "mistake", "softmax over the kept top-k logits",
          "the probabilities are renormalised over the k kept classes instead of all classes", TK + '''
    model.eval()
    with torch.inference_mode():
        logits = model(inputs)
    values, classes = logits.topk(k, dim=-1)
    return classes, values.softmax(dim=-1)
''', ("top_k",)),
    Entry("16-top-k", "mistake", "class ids as int32",
          "classes converted to int32 instead of int64", TK + '''
    model.eval()
    with torch.inference_mode():
        p = model(inputs).softmax(dim=-1)
    v, c = p.topk(k, dim=-1)
    return c.int(), v
''', ("top_k",)),
    Entry("16-top-k", "mistake", "no eval mode",
          "the forward runs in the mode the model came in (dropout/BatchNorm in training mode)", TK + '''
    with torch.inference_mode():
        p = model(inputs).softmax(dim=-1)
    v, c = p.topk(k, dim=-1)
    return c, v
''', ("top_k",)),
    Entry("16-top-k", "mistake", "returned the logits",
          "the values are raw logits, not probabilities", TK + '''
    model.eval()
    with torch.inference_mode():
        v, c = model(inputs).topk(k, dim=-1)
    return c, v
''', ("top_k",)),
    Entry("16-save-artefact", "correct", "OrderedDict of detached clones", "", SA + '''
    sd = OrderedDict((name, t.detach().clone()) for name, t in model.state_dict().items())
    with open(path, "wb") as f:
        torch.save(dict(config={**config}, state_dict=sd), f)
''', ("save_artefact",)),
    Entry("16-predict", "correct", "torch.split and a context manager restoring the mode", "", '''
import contextlib


@contextlib.contextmanager
def evaluating(model):
    mode = model.training
    model.train(False)
    try:
        yield model
    finally:
        model.train(mode)


def predict(model, inputs, batch_size):
    dev = next(model.parameters()).device
    stacked = torch.stack(inputs)
    with evaluating(model), torch.inference_mode():
        return torch.cat([model(chunk.to(dev)) for chunk in stacked.split(batch_size)]).cpu()
''', ("predict",)),
    Entry("16-onnx-export", "correct", "Dim.DYNAMIC in a tuple", "", EX + '''
    model.train(False)
    torch.onnx.export(model, args=(example,), f=str(path), dynamo=True, verbose=False,
                      input_names=["features"], output_names=["logits"],
                      dynamic_shapes=[{0: torch.export.Dim.DYNAMIC}])
''', ("export_onnx",)),
    Entry("16-int8-weights", "correct", "torch.where for zero rows", "", QP + '''
    peak = weight.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(peak > 0, peak / 127, torch.ones_like(peak))
    q = (weight / scale).round().clamp(-127, 127).to(torch.int8)
    return q, scale
''', ("quantize_per_channel",)),
    Entry("16-top-k", "correct", "sort descending and slice", "", TK + '''
    model.eval()
    with torch.inference_mode():
        probs = torch.softmax(model(inputs).float(), dim=1)
    values, order = probs.sort(dim=1, descending=True, stable=True)
    return order[:, :k].to(torch.int64), values[:, :k]
''', ("top_k",)),
]
