"""Drills on exporting and serving a model: state_dict + config checkpoints loaded with weights_only,
inference mode, parity checks, latency measurement, and explain drills on torch.export, dynamic int8
quantisation, TorchScript and ONNX.

torch.export itself costs about 2 s in a fresh checker process (importing torch._dynamo), over the budget of a
check, so it appears in explain drills, whose experiments run it, not in checks. ONNX export never runs here.
"""

from __future__ import annotations

import os
import tempfile
import time
import timeit
import warnings
from typing import Any

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.errors import explain as explain_error
from harness.drills.core import Drill, add
from harness.drills.support import explain


class _ExportedClassifier(nn.Module):
    """Linear, BatchNorm1d (with "pretrained" statistics), ReLU, Dropout(0.5), Linear."""

    def __init__(self, d_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.5))
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def export_config(case: Case) -> dict[str, int]:
    """The exported classifier's sizes (d_in, hidden, n_out), drawn by the case."""
    gen = torch.Generator().manual_seed(case.seeded(500))
    d_in, hidden, n_out = (int(v) for v in torch.randint(3, 12, (3,), generator=gen))
    return {"d_in": d_in, "hidden": hidden + 4, "n_out": n_out + 1}


def trained_classifier(case: Case, base: int = 501) -> _ExportedClassifier:
    """The case's "trained" classifier (seeded weights, non-default BatchNorm statistics), in train mode."""
    config = export_config(case)
    torch.manual_seed(case.seeded(base))
    model = _ExportedClassifier(**config)
    bn = model.body[1]
    gen = torch.Generator().manual_seed(case.seeded(base + 1))
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(config["hidden"], generator=gen) * 0.5)
        bn.running_var.copy_(torch.rand(config["hidden"], generator=gen) + 0.5)
    return model


def export_inputs(case: Case, base: int, rows: int = 6) -> torch.Tensor:
    """`rows` inputs of the exported classifier's width, seeded from the case and `base`."""
    return torch.randn(rows, export_config(case)["d_in"], generator=torch.Generator().manual_seed(case.seeded(base)))


class _LoadSpy:
    """Records the weights_only argument of every torch.load call (also where the answer imported `load`)."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.calls: list[str] = []

    def __enter__(self) -> _LoadSpy:
        self._real = real = torch.load

        def load(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(repr(kwargs.get("weights_only", "default")))
            return real(*args, **kwargs)

        torch.load = load
        self._patched = [name for name, value in self.namespace.items() if value is real]
        for name in self._patched:
            self.namespace[name] = load
        return self

    def __exit__(self, *exc: object) -> None:
        torch.load = self._real
        for name in self._patched:
            self.namespace[name] = self._real


# --- save a state_dict + config; load it with weights_only ------------------------------------------------------

def _probe_save_load(answer: dict, *, case: Case) -> dict:
    config = export_config(case)
    model = trained_classifier(case)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.pt")
        answer["save_model"](model, dict(config), path)
        try:
            seen["content"] = torch.load(path, weights_only=True)
        except Exception as error:  # a pickled module (or any object) refuses to load with weights_only
            seen["refused"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        torch.manual_seed(case.seeded(777))  # another init: a load that loads nothing shows
        with _LoadSpy(answer) as spy:
            try:
                loaded = answer["load_model"](path, _ExportedClassifier)
            except Exception as error:  # judged after what the file holds
                loaded, seen["load_error"] = None, explain_error(error)
    seen["load_calls"] = spy.calls
    seen["loaded_type"] = type(loaded).__name__
    if isinstance(loaded, nn.Module):
        loaded.eval()
        with torch.inference_mode():
            seen["out"] = loaded(export_inputs(case, 510)).softmax(-1)
    return seen


add(
    Drill(
        id="export-state-dict-config",
        self_check=True,
        title="A checkpoint that loads safely: state_dict + config, weights_only",
        kind="write",
        topics=("export", "checkpointing"),
        difficulty=1,
        prompt="save_model(model, config, path) saves a model built as build(**config) (config: a dict of ints); "
        "load_model(path, build) returns an equal model. The file must load with torch.load(path, "
        "weights_only=True), so it may hold only tensors, numbers, strings and containers: no pickled module. "
        "Never load with weights_only=False.",
        entry="load_model",
        starter="import torch\n\n\ndef save_model(model, config, path):\n    raise NotImplementedError\n\n\n"
        "def load_model(path, build):\n    raise NotImplementedError\n",
        hints=("torch.save(model) pickles the class; what does the loader need instead to rebuild the model?",
               "torch.save({'config': config, 'state_dict': model.state_dict()}, path); load with weights_only=True, "
               "build(**config), load_state_dict."),
        probe=_probe_save_load,
    )
)


# --- inference: eval() and inference_mode -------------------------------------------------------------------

def _probe_predict(answer: dict, *, case: Case) -> dict:
    model = trained_classifier(case)
    records: list[dict[str, bool]] = []

    def record(module: nn.Module, inputs: Any) -> None:
        records.append({"training": module.training, "grad_enabled": torch.is_grad_enabled(),
                        "inference_mode": torch.is_inference_mode_enabled()})

    handle = model.register_forward_pre_hook(record)
    try:
        out = answer["predict"](model, export_inputs(case, 510))
    finally:
        handle.remove()
    return {"records": records, "out": out,
            "requires_grad": isinstance(out, torch.Tensor) and out.requires_grad}


add(
    Drill(
        id="export-predict-inference-mode",
        self_check=True,
        title="Inference done right: eval() and inference_mode",
        kind="write",
        topics=("export", "modules"),
        difficulty=1,
        prompt="predict(model, x) returns the class probabilities (softmax over the last dim) of a trained "
        "classifier that has Dropout and BatchNorm and arrives in train mode. Run it as a deployed model runs: "
        "in eval mode, under torch.inference_mode().",
        entry="predict",
        starter="import torch\n\n\ndef predict(model, x):\n    raise NotImplementedError\n",
        hints=("Two separate switches: one changes what Dropout and BatchNorm do, the other what autograd records.",
               "model.eval(); with torch.inference_mode(): return model(x).softmax(dim=-1)"),
        probe=_probe_predict,
    )
)


# --- a parity checker, eager vs exported ----------------------------------------------------------------------

def parity_scenarios(case: Case) -> tuple[list[dict[str, Any]], float, float]:
    """Each: reference outputs and candidate outputs for three inputs, atol, rtol (the probe wraps them in
    functions; the judge recomputes them)."""
    gen = torch.Generator().manual_seed(case.seeded(600))
    weight = torch.randn(5, 3, generator=gen)
    inputs = [torch.randn(4, 5, generator=gen) for _ in range(3)]
    reference = [x @ weight for x in inputs]
    atol, rtol = 1e-5, 1e-4
    noise = [torch.randn(r.shape, generator=gen) * 2e-6 for r in reference]

    def outs(changes: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        return [changes.get(i, r + n) for i, (r, n) in enumerate(zip(reference, noise, strict=True))]

    outlier = reference[2] + noise[2]
    small = int(reference[2].abs().argmin())  # one element 20x out of tolerance: a mean of the errors hides it
    outlier.view(-1)[small] = reference[2].view(-1)[small] + 20 * (atol + rtol * reference[2].view(-1)[small].abs())
    nan = reference[1].clone()
    nan[0, int(torch.randint(0, 3, (1,), generator=gen))] = float("nan")
    big_ref = [r * 1000 for r in reference]
    big_cand = [r * (1 + 5e-5) for r in big_ref]  # relative error 5e-5 < rtol: within tolerance
    return [
        {"label": "tiny noise", "inputs": inputs, "ref": reference, "cand": outs({})},
        {"label": "one outlier in the third input", "inputs": inputs, "ref": reference, "cand": outs({2: outlier})},
        {"label": "an extra leading dimension", "inputs": inputs, "ref": reference,
         "cand": outs({0: reference[0][None]})},
        {"label": "a nan", "inputs": inputs, "ref": reference, "cand": outs({1: nan})},
        {"label": "large values, small relative error", "inputs": inputs, "ref": big_ref, "cand": big_cand},
    ], atol, rtol


def _probe_parity(answer: dict, *, case: Case) -> dict:
    scenarios, atol, rtol = parity_scenarios(case)
    results = []
    for s in scenarios:
        table_ref = {id(x): y for x, y in zip(s["inputs"], s["ref"], strict=True)}
        table_cand = {id(x): y for x, y in zip(s["inputs"], s["cand"], strict=True)}
        results.append(answer["check_parity"](lambda x, t=table_ref: t[id(x)].clone(),
                                              lambda x, t=table_cand: t[id(x)].clone(), s["inputs"], atol, rtol))
    return {"results": results}


add(
    Drill(
        id="export-parity-check",
        unjudged=("results/2/1", "results/3/1"),  # no max error is defined for a shape mismatch or a nan
        title="A parity check between an eager model and its export",
        kind="write",
        topics=("export", "debugging"),
        difficulty=2,
        prompt="check_parity(reference, candidate, inputs, atol, rtol) compares two callables (an eager model and "
        "its exported twin) on every input and returns (ok, max_abs_error). ok is True iff for every input the "
        "outputs have the same shape and every element satisfies |got - want| <= atol + rtol * |want| (a nan is "
        "never within tolerance). max_abs_error is the largest |got - want| over all inputs of matching shape.",
        entry="check_parity",
        starter="import torch\n\n\ndef check_parity(reference, candidate, inputs, atol, rtol):\n"
        "    raise NotImplementedError\n",
        hints=("Which of these does torch.allclose do silently: broadcast shapes, or check them? And what does "
               "nan > tol evaluate to?",
               "Per input: check shapes; within = |got - want| <= atol + rtol * |want|; ok requires within.all()."),
        probe=_probe_parity,
    )
)


# --- latency: warm-up, then the median ---------------------------------------------------------------------------

def latency_plan(case: Case) -> tuple[int, int, list[float]]:
    """warmup, iters, and the duration in seconds of each call to fn (warm-up calls are slow, a few are outliers)."""
    gen = torch.Generator().manual_seed(case.seeded(700))
    warmup = int(torch.randint(3, 6, (1,), generator=gen))
    iters = 2 * int(torch.randint(4, 8, (1,), generator=gen)) + 1  # odd: one middle value
    slow = (0.05 + 0.03 * torch.rand(warmup, generator=gen)).tolist()
    steady = (0.002 + 0.002 * torch.rand(iters + 10, generator=gen)).tolist()
    for i in torch.randperm(iters, generator=gen)[:2].tolist():
        steady[i] = 0.04 + 0.01 * i  # outliers: a context switch, a GC pause
    return warmup, iters, slow + steady


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def seconds(self) -> float:
        return self.now

    def nanoseconds(self) -> int:
        return int(round(self.now * 1e9))


def _probe_latency(answer: dict, *, case: Case) -> dict:
    warmup, iters, durations = latency_plan(case)
    clock = _FakeClock()
    calls = [0]

    def fn() -> torch.Tensor:
        if calls[0] >= len(durations):
            raise RuntimeError("fn was called far more than warmup + iters times")
        clock.now += durations[calls[0]]
        calls[0] += 1
        return torch.zeros(1)

    fakes = {"perf_counter": clock.seconds, "time": clock.seconds, "monotonic": clock.seconds,
             "perf_counter_ns": clock.nanoseconds, "time_ns": clock.nanoseconds, "monotonic_ns": clock.nanoseconds}
    real = {name: getattr(time, name) for name in fakes}
    real_default = timeit.default_timer
    by_identity = {id(func): fakes[name] for name, func in real.items()}
    rebound = {name: value for name, value in answer.items() if id(value) in by_identity}
    try:
        for name, fake in fakes.items():
            setattr(time, name, fake)
        timeit.default_timer = clock.seconds
        for name, value in rebound.items():
            answer[name] = by_identity[id(value)]
        result = answer["measure_latency"](fn, warmup, iters)
    finally:
        for name, func in real.items():
            setattr(time, name, func)
        timeit.default_timer = real_default
        answer.update(rebound)
    return {"result": result, "calls": calls[0]}


add(
    Drill(
        id="export-latency-median",
        title="Measure latency: warm up, time each call, report the median",
        kind="write",
        topics=("export", "performance"),
        difficulty=2,
        prompt="measure_latency(fn, warmup, iters) calls fn() `warmup` times untimed, then times `iters` calls one "
        "by one with time.perf_counter (synchronising CUDA around each timed call when a GPU is present) and returns "
        "the median latency in milliseconds as a float.",
        entry="measure_latency",
        starter="import time\n\n\ndef measure_latency(fn, warmup, iters):\n    raise NotImplementedError\n",
        hints=("Why are the first calls slower, and what does one 40 ms pause do to a mean of 3 ms calls?",
               "warm-up loop; per call: start = perf_counter(); fn(); append(perf_counter() - start); "
               "statistics.median(times) * 1000."),
        probe=_probe_latency,
    )
)


# --- difficulty 3: a serving script with three bugs --------------------------------------------------------------

def _probe_serving(answer: dict, *, case: Case) -> dict:
    model = trained_classifier(case, 520)
    checkpoint = {"config": export_config(case),
                  "state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}
    seen: dict[str, Any] = {"loaded_states": [], "forwards": []}
    real_load_state_dict = nn.Module.load_state_dict

    def load_state_dict(module: nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_load_state_dict(module, state_dict, *args, **kwargs)
        seen["loaded_states"].append({k: v.detach().clone() for k, v in module.state_dict().items()})
        return result

    def forward_hook(module: nn.Module, inputs: Any) -> None:
        seen["forwards"].append({"module": type(module).__name__, "training": module.training})

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ddp_checkpoint.pt")
        torch.save(checkpoint, path)
        nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]
        handle = torch.nn.modules.module.register_module_forward_pre_hook(forward_hook)
        torch.manual_seed(case.seeded(888))
        try:
            with _LoadSpy(answer) as spy:
                out = answer["load_and_predict"](path, _ExportedClassifier, export_inputs(case, 510))
        finally:
            nn.Module.load_state_dict = real_load_state_dict  # type: ignore[method-assign]
            handle.remove()
    seen["load_calls"] = spy.calls
    seen["out"] = out
    seen["requires_grad"] = isinstance(out, torch.Tensor) and out.requires_grad
    return seen


SERVING_STARTER = '''import torch


def load_and_predict(path, build, x):
    """Load a checkpoint written by a DDP training run and return the class probabilities for x."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    model = build(**checkpoint["config"])
    model.load_state_dict(checkpoint["state_dict"], strict=False)
    with torch.inference_mode():
        return model(x).softmax(dim=-1)
'''


add(
    Drill(
        id="export-serving-three-bugs",
        self_check=True,
        title="Bug hunt: a serving script with three bugs",
        kind="bughunt",
        topics=("export", "checkpointing", "debugging"),
        difficulty=3,
        prompt="load_and_predict(path, build, x) loads a checkpoint {'config', 'state_dict'} written by a DDP "
        "training run (the state_dict was saved from the DDP wrapper) and returns the class probabilities of the "
        "rebuilt model (Dropout, BatchNorm) for x. In service: a security review shows that a crafted checkpoint "
        "file runs its own code the moment this function loads it; the probabilities are those of an untrained "
        "model (accuracy at chance with a checkpoint that scores 95% in training), with no error or warning; and "
        "two calls on the same x return different probabilities. Three bugs cause this; fix all three (the check "
        "reports the first problem it observes).",
        entry="load_and_predict",
        starter=SERVING_STARTER,
        hints=("Ask of each line: is loading safe? did every weight really load (what are the checkpoint's keys)? "
               "in which mode does the model run?",
               "weights_only=True; strip 'module.' from the keys and load strictly; model.eval() before the forward."),
        probe=_probe_serving,
    )
)


# --- explain drills -------------------------------------------------------------------------------------------

def _tiny_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


def _export_batch_one_experiment() -> None:
    from torch.export import Dim, export

    model = _tiny_mlp()
    try:
        export(model, (torch.randn(1, 16),), dynamic_shapes={"input": {0: Dim("batch")}})
        print("example batch 1: exported")
    except Exception as error:  # the constraint violation this drill is about
        print(f"example batch 1 with Dim('batch'): {type(error).__name__}: {str(error).splitlines()[0]}")
    program = export(model, (torch.randn(2, 16),), dynamic_shapes={"input": {0: Dim("batch")}})
    for batch in (1, 7, 64):
        shape = tuple(program.module()(torch.randn(batch, 16)).shape)
        print(f"example batch 2, called with batch {batch}: output {shape}")


add(
    explain(
        id="export-dynamic-batch-example",
        title="torch.export with a dynamic batch and an example of batch 1",
        topics=("export",),
        difficulty=2,
        question="You call torch.export.export(model, (torch.randn(1, 16),), dynamic_shapes={'input': {0: "
        "Dim('batch')}}) on a small MLP, to serve any batch size. What happens?",
        hints=("Which sizes does the tracer treat as special because they broadcast?",
               "Run the experiment: batch 1 vs batch 2 as the example."),
        experiment=_export_batch_one_experiment,
    )
)


def _quantize_experiment() -> None:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    floats = sum(p.numel() * p.element_size() for p in model.parameters())
    int8 = sum(m.weight.numel() for m in model if isinstance(m, nn.Linear)) + sum(
        m.bias.numel() * 4 for m in model if isinstance(m, nn.Linear))
    print(f"float32 weights: {floats / 1024:.0f} KiB; int8 weights + float biases: {int8 / 1024:.0f} KiB "
          f"({floats / int8:.1f}x smaller)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated in favour of torchao
            quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
            x = torch.randn(8, 256)
            error = (quantized(x) - model(x)).abs().max().item()
        print(f"quantize_dynamic: {quantized[0]}; largest output difference {error:.4f}")
    except Exception as problem:  # the deprecated API may be gone in a later PyTorch
        print(f"quantize_dynamic is not available here ({type(problem).__name__}); torchao's quantize_ replaces it")
    print("Weights are stored in int8; activations are quantised on the fly at each call (dynamic), on the CPU.")


add(
    explain(
        id="export-dynamic-int8",
        title="What dynamic int8 quantisation changes",
        topics=("export", "performance"),
        difficulty=2,
        question="You apply dynamic int8 quantisation (torch.ao.quantization.quantize_dynamic with {nn.Linear}, "
        "or torchao's equivalent) to a trained MLP served on a CPU. Which describes the result?",
        hints=("What is quantised once, and what is quantised at every call?",
               "'Dynamic' refers to the activations' scale, computed per call."),
        experiment=_quantize_experiment,
    )
)


def _trace_experiment() -> None:
    def branchy(x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return -x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TracerWarning this drill is about, and jit's deprecation notice
        traced = torch.jit.trace(branchy, torch.ones(3))
    negative = -torch.ones(3)
    print(f"eager  branchy(-1s) = {branchy(negative).tolist()}")
    print(f"traced branchy(-1s) = {traced(negative).tolist()}  (the branch of the example input, baked in)")
    print("TorchScript (trace and script) is in maintenance: new export work goes through torch.export.")


add(
    explain(
        id="export-torchscript-trace",
        title="TorchScript tracing and data-dependent control flow",
        topics=("export", "debugging"),
        difficulty=2,
        question="A legacy deployment uses torch.jit.trace on a function with `if x.sum() > 0: return x * 2` "
        "`else: return -x`, traced with a positive example. In production it receives a negative input. What "
        "does the traced function return, and what is the modern replacement?",
        hints=("Does a trace see the Python `if`, or only the tensor operations that ran?",
               "Run the experiment: eager and traced outputs on a negative input."),
        experiment=_trace_experiment,
    )
)


def _onnx_axes_experiment() -> None:
    from torch.export import export

    model = _tiny_mlp()
    program = export(model, (torch.randn(1, 16),))  # no dynamic shapes: the batch size is part of the graph
    print(f"exported with batch 1, input spec: {program.graph_signature.user_inputs} "
          f"shape {tuple(program.example_inputs[0][0].shape)}")
    try:
        program.module()(torch.randn(8, 16))
        print("called with batch 8: ran")
    except Exception as error:  # the fixed batch this drill is about
        print(f"called with batch 8: {type(error).__name__}: {str(error).splitlines()[0]}")
    print("An ONNX graph exported the same way fixes the input as [1, 16]: an ONNX runtime rejects batch 8 just as "
          "this program does. Declare the batch dynamic (dynamic_axes, or dynamic_shapes with dynamo=True).")


add(
    explain(
        id="export-onnx-dynamic-axes",
        title="ONNX export and the batch dimension",
        topics=("export",),
        difficulty=1,
        question="You export a model with torch.onnx.export(model, (torch.randn(1, 16),), 'model.onnx') and no "
        "dynamic_axes / dynamic_shapes, then run it in ONNX Runtime on a batch of 8. What happens?",
        hints=("Where does the exported graph get its input shapes from when you declare nothing?",
               "The example input's sizes become the graph's, unless marked dynamic."),
        experiment=_onnx_axes_experiment,
    )
)


# --- fold BatchNorm into the preceding Linear for inference -------------------------------------------------------

def fold_setup(case: Case) -> tuple[nn.Linear, nn.BatchNorm1d, torch.Tensor]:
    """A Linear, the BatchNorm1d after it (running statistics, affine and eps drawn by the case) and inputs."""
    gen = torch.Generator().manual_seed(case.seeded(800))
    d_in, d_out = (int(v) for v in torch.randint(3, 10, (2,), generator=gen))
    eps = 0.01 + 0.09 * float(torch.rand(1, generator=gen))  # large enough that forgetting it shows
    torch.manual_seed(case.seeded(801))
    linear, bn = nn.Linear(d_in, d_out), nn.BatchNorm1d(d_out, eps=eps)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(d_out, generator=gen))
        bn.running_var.copy_(torch.rand(d_out, generator=gen) * 0.2 + 0.01)
        bn.weight.copy_(torch.rand(d_out, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(d_out, generator=gen))
    return linear, bn, torch.randn(7, d_in, generator=gen)


def _probe_fold(answer: dict, *, case: Case) -> dict:
    linear, bn, x = fold_setup(case)
    before = {"weight": linear.weight.detach().clone(), "bias": linear.bias.detach().clone()}
    fused = answer["fold_batchnorm"](linear, bn)
    seen: dict[str, Any] = {"type": type(fused).__name__,
                            "linear_changed": not (torch.equal(linear.weight, before["weight"])
                                                   and torch.equal(linear.bias, before["bias"]))}
    if isinstance(fused, nn.Module):
        with torch.inference_mode():
            seen["out"] = fused(x)
    return seen


add(
    Drill(
        id="export-fold-batchnorm",
        self_check=True,
        title="Fold a BatchNorm into the Linear before it",
        kind="write",
        topics=("export", "performance"),
        difficulty=2,
        prompt="fold_batchnorm(linear, bn) returns a new nn.Linear equal to bn(linear(x)) with bn in eval mode "
        "(its running statistics, affine weight and bias, and its eps), so that the deployed model runs one layer "
        "instead of two. Leave linear and bn unchanged.",
        entry="fold_batchnorm",
        starter="import torch\nfrom torch import nn\n\n\ndef fold_batchnorm(linear, bn):\n"
        "    raise NotImplementedError\n",
        hints=("In eval mode BatchNorm is an affine map per feature: y = (z - mean) * s + beta. Substitute "
               "z = W x + b.",
               "s = gamma / sqrt(running_var + eps); W' = W * s[:, None]; b' = (b - running_mean) * s + beta."),
        probe=_probe_fold,
    )
)


# --- torch.export with a dynamic batch dimension ------------------------------------------------------------------

EXPORT_BATCHES = (3, 1, 17)


def _probe_export(answer: dict, *, case: Case) -> dict:
    model = trained_classifier(case, 530)  # arrives in train mode, as it leaves the training loop
    program = answer["export_for_serving"](model, export_inputs(case, 531, rows=4))
    seen: dict[str, Any] = {"type": type(program).__name__, "outputs": []}
    module = program.module() if hasattr(program, "module") else None
    for batch in EXPORT_BATCHES:
        x = export_inputs(case, 532 + batch, rows=batch)
        try:
            seen["outputs"].append(module(x) if module is not None else None)
        except Exception as error:  # a program exported for one batch size refuses the others
            seen["outputs"].append(f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}")
    return seen


add(
    Drill(
        id="export-torch-export-dynamic-batch",
        title="torch.export with a dynamic batch dimension",
        kind="write",
        topics=("export",),
        difficulty=2,
        prompt="export_for_serving(model, example) exports a trained classifier (Dropout, BatchNorm; its forward is "
        "forward(self, x)) with torch.export.export, from an example batch of 4, so that the program's .module() "
        "serves any batch size with the outputs of the model in eval mode. Return the ExportedProgram.",
        entry="export_for_serving",
        starter="import torch\nfrom torch.export import Dim, export\n\n\ndef export_for_serving(model, example):\n"
        "    raise NotImplementedError\n",
        hints=("Two things are fixed at export time unless you say otherwise: the module's mode, and every size of "
               "the example input.",
               "model.eval(); export(model, (example,), dynamic_shapes={'x': {0: Dim('batch')}})."),
        probe=_probe_export,
    )
)
