"""Lesson 12 checks reject plausible mistakes with the right code and message, and accept correct variants.

MISTAKES and CORRECT are data (tests/test_requirements.py reads them); the two parametrized tests run them.
The LR range test's variants are built by one factory, `sweep(...)`, each with one flaw switched on.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.checks.testing import (
    DRAWN_CASE,
    Correct,
    Mistake,
    assert_forgeries_refused,
    solution_cell,
)
from harness.diagnose import lr_range_test as harness_lr_range_test
from tests.exercises import notebook_namespace


# ---------------------------------------------------------------- 12-init-loss
def init_loss(*, log=math.log, loss=F.cross_entropy, eval_mode=True, no_grad=True, restore="keep"):
    """A loss_at_init with one thing changed."""
    def loss_at_init(model, inputs, targets, num_classes):
        was_training = model.training
        if eval_mode:
            model.eval()
        with torch.no_grad() if no_grad else torch.enable_grad():
            measured = loss(model(inputs), targets)
        if restore == "keep":
            model.train(was_training)
        elif restore == "train":
            model.train()
        return measured, log(num_classes)
    return loss_at_init


def init_loss_inference_mode(model, inputs, targets, num_classes):
    mode = model.training
    model.eval()
    try:
        with torch.inference_mode():
            logits = model(inputs)
            per_example = -logits.log_softmax(dim=1).gather(1, targets[:, None]).squeeze(1)
            measured = per_example.mean().item()
    finally:
        model.train(mode)
    return measured, -math.log(1.0 / num_classes)


class InitLossMeter:
    """A callable class: nn.CrossEntropyLoss, torch.no_grad as a decorator, the mode restored in a finally."""

    def __init__(self):
        self.criterion = nn.CrossEntropyLoss()

    @torch.no_grad()
    def __call__(self, model, inputs, targets, num_classes):
        was_training = model.training
        model.eval()
        try:
            measured = self.criterion(model(inputs), targets)
        finally:
            model.train(was_training)
        return [measured, -math.log(1 / num_classes)]


def init_loss_nll_context(model, inputs, targets, num_classes):
    """log_softmax then nll_loss, the modes set through a context manager, ln C as np.log."""
    import contextlib

    import numpy as np

    @contextlib.contextmanager
    def evaluating(module):
        previous = module.training
        module.eval()
        yield module
        module.train(previous)

    with evaluating(model), torch.no_grad():
        measured = F.nll_loss(F.log_softmax(model(inputs), dim=-1), targets)
    return measured, float(np.log(num_classes))


def init_loss_train_first(model, inputs, targets, num_classes):
    """model.train() 'to be safe' before the measurement, the mode restored after."""
    was_training = model.training
    model.train()
    with torch.no_grad():
        measured = F.cross_entropy(model(inputs), targets)
    model.train(was_training)
    return measured, math.log(num_classes)


# ---------------------------------------------------------------- 12-grad-norms
def norms_solution(model):
    return {name: p.grad.detach().norm() for name, p in model.named_parameters() if p.grad is not None}


def norms_by_hand(model):
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        out[name] = p.grad.detach().double().pow(2).sum().sqrt().float()
    return out


def norms_foreach(model):
    """torch._foreach_norm over the gradients, as clip_grad_norm_ computes them, zipped back to their names."""
    named = [(name, p.grad) for name, p in model.named_parameters() if p.grad is not None]
    names, grads = zip(*named, strict=True)
    return dict(zip(names, torch._foreach_norm(list(grads)), strict=True))


def norms_einsum(model):
    """The dot product of each flattened gradient with itself, by einsum, then its square root."""
    out = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad.detach().reshape(-1)
            out[name] = torch.einsum("i,i->", g, g).sqrt()
    return out


def norms_linalg_filter(model):
    """torch.linalg.vector_norm over a filtered generator."""
    with_grad = filter(lambda item: item[1].grad is not None, model.named_parameters())
    return {name: torch.linalg.vector_norm(p.grad, ord=2) for name, p in with_grad}


def norms_state_dict_names(model):
    """Names from state_dict() zipped with parameters(): a buffer registered first shifts every name."""
    names = list(model.state_dict().keys())
    return {name: p.grad.norm() for name, p in zip(names, model.parameters(), strict=False) if p.grad is not None}


def norms_state_dict_parameters(model):
    """state_dict(keep_vars=True) filtered to the parameters with a gradient: the same names, another way."""
    return {name: value.grad.norm() for name, value in model.state_dict(keep_vars=True).items()
            if isinstance(value, nn.Parameter) and value.grad is not None}


def norms_then_zero_grad(model):
    norms = {name: p.grad.norm() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return norms


def norms_as_list(model):
    return [p.grad.norm() for p in model.parameters() if p.grad is not None]


def norms_by_module(model):
    return {name: m.weight.grad.norm() for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and m.weight.grad is not None}


def norms_squared(model):
    return {name: p.grad.pow(2).sum() for name, p in model.named_parameters() if p.grad is not None}


def norms_mean_abs(model):
    return {name: p.grad.abs().mean() for name, p in model.named_parameters() if p.grad is not None}


def norms_of_weights(model):
    return {name: p.detach().norm() for name, p in model.named_parameters() if p.grad is not None}


def norms_with_zeros(model):
    return {name: p.grad.norm() if p.grad is not None else torch.zeros(()) for name, p in model.named_parameters()}


def norms_item(model):
    return {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}


def norms_in_place(model):
    return {name: p.grad.pow_(2).sum().sqrt() for name, p in model.named_parameters() if p.grad is not None}


# ---------------------------------------------------------------- 12-first-nonfinite
def locator(*, modules="all", keep="first", test="isfinite", remove="finally", order="execution", answer="name"):
    """A first_nonfinite_module with one thing changed."""
    def first_nonfinite_module(model, inputs):
        found = []
        chosen = {"all": model.named_modules, "children": model.named_children}[
            modules if modules not in ("leaves", "not-root") else "all"]()
        if modules == "leaves":
            chosen = [(n, m) for n, m in chosen if not list(m.children())]
        if modules == "not-root":  # "if name:" skips the entry named "", the model itself
            chosen = [(n, m) for n, m in chosen if n]

        def make_hook(name):
            def hook(module, args, output):
                if test == "isfinite":
                    bad = not torch.isfinite(output).all()
                elif test == "isnan":
                    bad = bool(torch.isnan(output).any())
                else:  # a method without its parentheses is always true
                    bad = torch.isnan(output).any() or torch.isinf(output).any
                if bad:
                    found.append((name, module))
            return hook

        handles = [m.register_forward_hook(make_hook(n)) for n, m in chosen]
        if remove == "finally":
            try:
                with torch.no_grad():
                    model(inputs)
            finally:
                for handle in handles:
                    handle.remove()
        else:
            with torch.no_grad():
                model(inputs)
            if remove == "after":
                for handle in handles:
                    handle.remove()
        if not found:
            return None
        if order == "definition":
            names = {n for n, _ in found}
            return next(n for n, _ in model.named_modules() if n in names)
        name, module = found[0] if keep == "first" else found[-1]
        return name if answer == "name" else module
    return first_nonfinite_module


def locator_pre_hooks(model, inputs):
    """Forward pre-hooks that test what each module receives: the first module given a NaN, not its maker."""
    found = []

    def look(name):
        def hook(_module, args):
            if not found and any(not torch.isfinite(a).all() for a in args if isinstance(a, torch.Tensor)):
                found.append(name)
        return hook

    handles = [m.register_forward_pre_hook(look(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


def locator_with_a_flag(model, inputs):
    """Hooks that stop looking once something was found; a list of handles removed in a finally."""
    state = {"name": None}

    def hook_for(name):
        def hook(_module, _args, out):
            if state["name"] is None and not bool(torch.isfinite(out).all()):
                state["name"] = name
        return hook

    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_hook(hook_for(name)))
        model.eval()
        with torch.inference_mode():
            model(inputs)
    finally:
        while handles:
            handles.pop().remove()
    return state["name"]


def locator_swallows_errors(model, inputs):
    """The solution with an except clause that turns any error of the forward into 'nothing found'."""
    found = []
    handles = [m.register_forward_hook(lambda _m, _a, out, name=name: found.append(name)
                                       if not found and not torch.isfinite(out).all() else None)
               for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(inputs)
    except Exception:
        return None
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


class _Found(Exception):
    pass


def locator_stops_at_first(model, inputs):
    """Hooks entered in an ExitStack (a handle is a context manager); the first non-finite output raises to stop."""
    import contextlib

    def hook_for(name):
        def hook(_module, _args, out):
            if not torch.isfinite(out).all():
                raise _Found(name)
        return hook

    with contextlib.ExitStack() as stack:
        for name, module in model.named_modules():
            stack.enter_context(module.register_forward_hook(hook_for(name)))
        try:
            with torch.no_grad():
                model(inputs)
        except _Found as found:
            return found.args[0]
    return None


def locator_global_hook(model, inputs):
    """One global forward hook (register_module_forward_hook) and a name looked up by module identity."""
    names = {id(module): name for name, module in model.named_modules()}
    found = []

    def hook(module, _args, out):
        if not found and id(module) in names and not torch.isfinite(out).all():
            found.append(names[id(module)])

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        handle.remove()
    return found[0] if found else None


def locator_from_harness(model, inputs):
    from harness.diagnose import first_nonfinite

    found = first_nonfinite(model, inputs)
    return None if found is None else found.module


# ---------------------------------------------------------------- 12-lr-range
def sweep(*, spacing="exp", groups="all", zero_grad=True, batch="cycle", record="raw", stop="best",
          restore="deep"):
    """An lr_range_test with one thing changed."""
    def lr_range_test(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
        saved_model = model.state_dict() if restore == "shallow-model" else copy.deepcopy(model.state_dict())
        saved_optimizer = optimizer.state_dict() if restore == "shallow-optimizer" else \
            copy.deepcopy(optimizer.state_dict())
        lrs, losses, best, running = [], [], math.inf, None
        steps = zip(range(num_steps), batches, strict=False) if batch == "no-cycle" else \
            ((i, batches[0] if batch == "first" else batches[i % len(batches)]) for i in range(num_steps))
        model.train()
        for i, (inputs, targets) in steps:
            exponent = i / (num_steps if spacing == "off-by-one" else num_steps - 1)
            lr = start_lr + (end_lr - start_lr) * exponent if spacing == "linear" else \
                start_lr * (end_lr / start_lr) ** exponent
            for group in optimizer.param_groups[:1] if groups == "first" else optimizer.param_groups:
                group["lr"] = lr
            if zero_grad:
                optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), targets)
            value = loss.item()
            if stop == "before-record" and (not math.isfinite(value) or value > diverge * best):
                break
            loss.backward()
            optimizer.step()
            if record == "after-step":
                with torch.no_grad():
                    value = loss_fn(model(inputs), targets).item()
            running = value if running is None else 0.98 * running + 0.02 * value
            lrs.append(lr)
            losses.append(running if record == "smoothed" else value)
            reference = {"best": min(best, value), "first": losses[0], "previous": losses[-2] if i else value,
                         "before-record": min(best, value), "ratio-only": min(best, value)}.get(stop)
            best = min(best, value)
            if stop == "ratio-only":  # no test for NaN or inf: NaN > anything is False
                if value > diverge * reference:
                    break
            elif stop != "never" and (not math.isfinite(value) or value > diverge * reference):
                break
        if restore in ("deep", "shallow-model", "shallow-optimizer", "model-only"):
            model.load_state_dict(saved_model)
        if restore in ("deep", "shallow-model", "shallow-optimizer"):
            optimizer.load_state_dict(saved_optimizer)
        return lrs, losses
    return lr_range_test


def sweep_with_harness(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    result = harness_lr_range_test(model, optimizer, loss_fn, batches, start_lr=start_lr, end_lr=end_lr,
                                   num_steps=num_steps, diverge=diverge)
    return result.lrs, result.losses


def sweep_multiplicative(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """The LR multiplied by a constant factor each step; parameters and optimizer saved by hand."""
    params = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(optimizer.state_dict())
    factor = (end_lr / start_lr) ** (1 / (num_steps - 1))
    lr, lrs, losses = start_lr, [], []
    for i in range(num_steps):
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = batches[i % len(batches)]
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        lrs.append(lr)
        losses.append(float(loss.detach()))
        if math.isnan(losses[-1]) or math.isinf(losses[-1]) or losses[-1] > diverge * min(losses):
            break
        lr *= factor
    with torch.no_grad():
        for p, saved in zip(model.parameters(), params, strict=False):
            p.copy_(saved)
    optimizer.load_state_dict(state)
    return lrs, losses


def sweep_not_below(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """The stop test written as 'not (loss <= diverge * best)', which is also true for NaN; no restore in a
    finally, the states copied with copy.deepcopy into one dict."""
    saved = {"model": copy.deepcopy(model.state_dict()), "optimizer": copy.deepcopy(optimizer.state_dict())}
    lrs, losses, best = [], [], math.inf
    for i in range(num_steps):
        lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = batches[i % len(batches)]
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
        best = min(best, losses[-1])
        if not losses[-1] <= diverge * best:
            break
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    return lrs, losses


def sweep_logspace(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """torch.logspace for the schedule, itertools.cycle for the batches, state restored through deepcopy."""
    import itertools

    saved = copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    schedule = torch.logspace(math.log10(start_lr), math.log10(end_lr), num_steps, dtype=torch.float64).tolist()
    lrs, losses = [], []
    try:
        for lr, (x, y) in zip(schedule, itertools.cycle(batches)):
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            lrs.append(lr)
            losses.append(loss.item())
            if not math.isfinite(losses[-1]) or losses[-1] > diverge * min(losses):
                break
    finally:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    return lrs, losses


# ---------------------------------------------------------------- 12-dead-units
def dead_counter(*, reduce="units", combine="or", keys="relu", as_tensor=True, remove=True):
    """A dead_units with one thing changed."""
    def dead_units(model, batches):
        seen = {}
        kind = nn.ReLU if keys == "relu" else nn.Linear

        def make_hook(name):
            def hook(module, args, out):
                if reduce == "values":
                    seen.setdefault(name, []).append(out == 0)
                    return
                active = (out > 0).any(dim=0) if reduce == "units" else (out <= 0).any(dim=0) if reduce == "any" \
                    else (out < 0).all(dim=0)
                if combine == "replace" or name not in seen:
                    seen[name] = active
                else:
                    seen[name] = seen[name] | active
            return hook

        handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules() if isinstance(m, kind)]
        try:
            with torch.no_grad():
                for x in batches:
                    model(x)
        finally:
            if remove:
                for handle in handles:
                    handle.remove()
        if reduce == "values":
            result = {n: torch.cat(v).float().mean() for n, v in seen.items()}
        elif reduce in ("any", "negative"):
            result = {n: mask.float().mean() for n, mask in seen.items()}
        else:
            result = {n: 1 - mask.float().mean() for n, mask in seen.items()}
        return result if as_tensor else {n: v.item() for n, v in result.items()}
    return dead_units


def dead_late_binding(model, batches):
    # the lambda reads `name` when it runs: every hook records under the last ReLU's name
    alive, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, a, out: alive.__setitem__(name, alive.get(name, False) | (out > 0).any(0))))  # noqa: B023
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: 1 - m.float().mean() for n, m in alive.items()}


def dead_default_argument(model, batches):
    """Right: the same lambda with the name bound as a default argument when it is made."""
    alive, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, a, out, name=name: alive.__setitem__(name, alive.get(name, False) | (out > 0).any(0))))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: 1 - m.float().mean() for n, m in alive.items()}


def dead_per_batch_averaged(model, batches):
    """The dead fraction of each batch, from the solution's mask, averaged over the batches."""
    fractions = [dead_counter()(model, [x]) for x in batches]
    return {name: torch.stack([f[name] for f in fractions]).mean() for name in fractions[0]}


def dead_from_one_big_batch(model, batches):
    """All batches in one forward (the model has no batch statistics), measured with harness.diagnose."""
    from harness.diagnose import capture_activations, dead_fraction

    return {name: dead_fraction(a) for name, a in capture_activations(model, torch.cat(batches), (nn.ReLU,)).items()}


def dead_by_counting(model, batches):
    counts, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda _m, _a, out, name=name: counts.__setitem__(name, counts.get(name, 0) + (out > 0).sum(dim=0))))
    try:
        for x in batches:
            with torch.inference_mode():
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {name: (c == 0).double().mean().float() for name, c in counts.items()}


def dead_by_max(model, batches):
    """The largest output of each unit over every example, kept with torch.maximum; hooks in an ExitStack."""
    import contextlib

    peaks = {}

    def hook_for(name):
        def hook(_module, _args, out):
            peak = out.amax(dim=0)
            peaks[name] = peak if name not in peaks else torch.maximum(peaks[name], peak)
        return hook

    with contextlib.ExitStack() as stack, torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.ReLU):
                stack.enter_context(module.register_forward_hook(hook_for(name)))
        for x in batches:
            model(x)
    return {name: (peak <= 0).float().mean() for name, peak in peaks.items()}


def sweep_loss_tensors(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """The solution recording each loss as a detached tensor instead of a float."""
    lrs, losses = sweep()(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge)
    return lrs, [torch.tensor(v) for v in losses]


def sweep_tensor_lrs(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """The schedule from torch.logspace, its elements appended to lrs as they are: 0-dim tensors."""
    saved = copy.deepcopy((model.state_dict(), optimizer.state_dict()))
    schedule = torch.logspace(math.log10(start_lr), math.log10(end_lr), num_steps, dtype=torch.float64)
    lrs, losses = [], []
    for i, lr in enumerate(schedule):
        for group in optimizer.param_groups:
            group["lr"] = float(lr)
        x, y = batches[i % len(batches)]
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]) or losses[-1] > diverge * min(losses):
            break
    model.load_state_dict(saved[0])
    optimizer.load_state_dict(saved[1])
    return lrs, losses


def sweep_next_batch(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    """The solution with batches[(i + 1) % len(batches)]: each step trains on the next batch."""
    shifted = batches[1:] + batches[:1]
    return sweep()(model, optimizer, loss_fn, shifted, start_lr, end_lr, num_steps, diverge)


# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("12_debugging")

MISTAKES = [
    # 12-init-loss
    Mistake("12-init-loss", "wrong-expected", "log10(C)", (init_loss(log=math.log10),),
            story="math.log10 taken for 'the log' of the cross-entropy"),
    Mistake("12-init-loss", "wrong-expected", "1/C", (init_loss(log=lambda c: 1 / c),),
            story="the chance accuracy 1/C reported as the chance loss"),
    Mistake("12-init-loss", "wrong-expected", "0-dim tensor",
            (init_loss(log=lambda c: torch.log(torch.tensor(float(c)))),),
            story="torch.log(torch.tensor(C)) for the expected loss, as the measured one is a tensor"),
    Mistake("12-init-loss", "wrong-loss", "summed",
            (init_loss(loss=lambda z, y: F.cross_entropy(z, y, reduction="sum")),),
            story="reduction='sum' copied from a loop that divides later"),
    Mistake("12-init-loss", "wrong-loss", "softmax was applied",
            (init_loss(loss=lambda z, y: F.cross_entropy(z.softmax(-1), y)),),
            story="softmax before F.cross_entropy, the classic double softmax"),
    Mistake("12-init-loss", "wrong-loss", "nll_loss", (init_loss(loss=F.nll_loss),),
            story="F.nll_loss on raw logits"),
    Mistake("12-init-loss", "train-mode", "training mode", (init_loss(eval_mode=False),),
            story="measured in the mode the model came in, dropout on"),
    Mistake("12-init-loss", "train-mode", "or model.train() was called", (init_loss_train_first,),
            story="model.train() 'to be safe' before measuring"),
    Mistake("12-init-loss", "graph-built", "gradients enabled", (init_loss(no_grad=False),),
            story="no torch.no_grad around a measurement"),
    Mistake("12-init-loss", "mode-not-restored", "came back in eval mode", (init_loss(restore="none"),),
            story="model.eval() and never back: the next training run has dropout off"),
    Mistake("12-init-loss", "mode-not-restored", "came back in train mode", (init_loss(restore="train"),),
            story="model.train() at the end whatever the mode was"),
    Mistake("12-init-loss", "train-mode", "training mode", solution_cell(
        "def loss_at_init(model, inputs, targets, num_classes):\n"
        "    with torch.no_grad():\n"
        "        measured = F.cross_entropy(model(inputs), targets)\n"
        "    return measured, math.log(num_classes)\n",
        "loss_at_init", given=NOTEBOOK),
        story="measured in the mode the model came in: dropout is on in training mode", planted=True),
    # 12-grad-norms
    Mistake("12-grad-norms", "wrong-keys", "the names are lost", (norms_as_list,), story="a list of norms, names lost"),
    Mistake("12-grad-norms", "wrong-keys", "named_parameters", (norms_by_module,),
            story="keyed by module name, weights only"),
    Mistake("12-grad-norms", "wrong-keys", "zipped with model.parameters()", (norms_state_dict_names,),
            story="names from list(model.state_dict()), zipped with model.parameters()"),
    Mistake("12-grad-norms", "wrong-norm", "squared norm", (norms_squared,), story="sum of squares, no sqrt"),
    Mistake("12-grad-norms", "wrong-norm", "mean absolute", (norms_mean_abs,), story="mean |g| as the 'size'"),
    Mistake("12-grad-norms", "wrong-norm", "norm of the parameter itself", (norms_of_weights,),
            story="p.norm() where p.grad.norm() was meant"),
    Mistake("12-grad-norms", "none-included", "without a gradient", (norms_with_zeros,),
            story="a zero for frozen parameters, as if their gradient vanished"),
    Mistake("12-grad-norms", "not-a-tensor", ".item()", (norms_item,), story=".item() per layer for printing"),
    Mistake("12-grad-norms", "grads-modified", "changed during the call", (norms_in_place,),
            story="pow_ squares the gradient in place"),
    Mistake("12-grad-norms", "grads-modified", "was set to None", (norms_then_zero_grad,),
            story="model.zero_grad() at the end 'to clean up'"),
    Mistake("12-grad-norms", "not-a-tensor", ".item()", solution_cell(
        "def grad_norms_per_layer(model):\n"
        "    return {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}\n",
        "grad_norms_per_layer"),
        story=".item() per parameter: one host sync per layer", planted=True),
    # 12-first-nonfinite
    Mistake("12-first-nonfinite", "wrong-module", "last non-finite", (locator(keep="last"),),
            story="found = name in the hook: each later module overwrites it"),
    Mistake("12-first-nonfinite", "wrong-module", "leaf modules", (locator(modules="leaves"),),
            story="hooks on leaf modules only, a common 'optimisation'"),
    Mistake("12-first-nonfinite", "wrong-module", "direct children", (locator(modules="children"),),
            story="model.named_children() instead of named_modules()"),
    Mistake("12-first-nonfinite", "wrong-module", "definition order", (locator(order="definition"),),
            story="scans named_modules() for the first flagged name"),
    Mistake("12-first-nonfinite", "wrong-module", "no hook on the model itself", (locator(modules="not-root"),),
            story="'if name:' in the loop over named_modules() skips the model itself, whose name is ''"),
    Mistake("12-first-nonfinite", "wrong-module", "forward pre-hooks", (locator_pre_hooks,),
            story="register_forward_pre_hook, testing each module's inputs: one module too late"),
    Mistake("12-first-nonfinite", "missed-inf", "misses inf", (locator(test="isnan"),),
            story="torch.isnan only: an overflow to inf goes unseen"),
    Mistake("12-first-nonfinite", "false-alarm", "None", (locator(test="typo"),),
            story="torch.isinf(output).any without parentheses is always true"),
    Mistake("12-first-nonfinite", "not-a-name", "module object", (locator(answer="module"),),
            story="returns the module it found, not its name"),
    Mistake("12-first-nonfinite", "hooks-left", "hooks still on the model", (locator(remove="never"),),
            story="handles never removed: the model keeps the hooks"),
    Mistake("12-first-nonfinite", "hooks-left-on-error", "finally", (locator(remove="after"),),
            story="handles removed after the forward, skipped when it raises"),
    Mistake("12-first-nonfinite", "error-swallowed", "returned normally", (locator_swallows_errors,),
            story="except Exception: return None, so that a diagnostic never crashes"),
    Mistake("12-first-nonfinite", "missed-inf", "misses inf", solution_cell(
        "def first_nonfinite_module(model, inputs):\n"
        "    found = []\n"
        "    def make_hook(name):\n"
        "        def hook(module, args, output):\n"
        "            if not found and torch.isnan(output).any():\n"
        "                found.append(name)\n"
        "        return hook\n"
        "    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules()]\n"
        "    try:\n"
        "        with torch.no_grad():\n"
        "            model(inputs)\n"
        "    finally:\n"
        "        for handle in handles:\n"
        "            handle.remove()\n"
        "    return found[0] if found else None\n",
        "first_nonfinite_module"),
        story="torch.isnan misses an overflow to inf", planted=True),
    # 12-lr-range
    Mistake("12-lr-range", "wrong-lrs", "linearly", (sweep(spacing="linear"),), story="torch.linspace thinking"),
    Mistake("12-lr-range", "wrong-lrs", "i / num_steps", (sweep(spacing="off-by-one"),),
            story="exponent i / num_steps never reaches end_lr"),
    Mistake("12-lr-range", "wrong-lrs", "only some param groups", (sweep(groups="first"),),
            story="optimizer.param_groups[0]['lr'] = lr"),
    Mistake("12-lr-range", "missing-zero-grad", "previous step's", (sweep(zero_grad=False),),
            story="zero_grad forgotten in a hand-written sweep"),
    Mistake("12-lr-range", "wrong-batch", "same batch", (sweep(batch="first"),), story="always batches[0]"),
    Mistake("12-lr-range", "wrong-batch", "took batches[1]", (sweep_next_batch,),
            story="batches[(i + 1) % len(batches)], an index off by one"),
    Mistake("12-lr-range", "batches-not-cycled", "one per batch", (sweep(batch="no-cycle"),),
            story="for i, (x, y) in zip(range(num_steps), batches)"),
    Mistake("12-lr-range", "wrong-losses", "smoothed", (sweep(record="smoothed"),),
            story="fastai's smoothed loss returned as the loss"),
    Mistake("12-lr-range", "wrong-losses", "losses[0] is Tensor", (sweep_loss_tensors,),
            story="losses.append(loss.detach()): tensors, not floats"),
    Mistake("12-lr-range", "wrong-losses", "lrs[0] is Tensor", (sweep_tensor_lrs,),
            story="lrs.append(lr) over the elements of torch.logspace: 0-dim tensors"),
    Mistake("12-lr-range", "wrong-losses", "after optimizer.step()", (sweep(record="after-step"),),
            story="re-evaluated after the step"),
    Mistake("12-lr-range", "no-divergence-stop", "no divergence test", (sweep(stop="never"),),
            story="the sweep always runs to end_lr"),
    Mistake("12-lr-range", "no-divergence-stop", "every comparison with NaN is False", (sweep(stop="ratio-only"),),
            story="if loss > diverge * best: break, without a test for NaN"),
    Mistake("12-lr-range", "wrong-stop", "so far: the first loss", (sweep(stop="first"),),
            story="diverge * the first loss instead of the best"),
    Mistake("12-lr-range", "wrong-stop", "so far: the previous loss", (sweep(stop="previous"),),
            story="diverge * the previous loss"),
    Mistake("12-lr-range", "wrong-stop", "left before appending it", (sweep(stop="before-record"),),
            story="breaks before the diverging step is taken and recorded"),
    Mistake("12-lr-range", "model-not-restored", "copy.deepcopy", (sweep(restore="none"),),
            story="no restore at all"),
    Mistake("12-lr-range", "model-not-restored", "live", (sweep(restore="shallow-model"),),
            story="saved = model.state_dict() without a deep copy"),
    Mistake("12-lr-range", "optimizer-not-restored", "momentum buffers", (sweep(restore="model-only"),),
            story="the model restored, the optimizer forgotten"),
    Mistake("12-lr-range", "optimizer-not-restored", "deepcopy", (sweep(restore="shallow-optimizer"),),
            story="optimizer.state_dict() saved without a deep copy"),
    Mistake("12-lr-range", "model-not-restored", "copy.deepcopy", solution_cell(
        "def lr_range_test(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):\n"
        "    saved_model, saved_optimizer = model.state_dict(), optimizer.state_dict()\n"
        "    lrs, losses, best = [], [], math.inf\n"
        "    model.train()\n"
        "    for i in range(num_steps):\n"
        "        lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))\n"
        "        for group in optimizer.param_groups:\n"
        "            group['lr'] = lr\n"
        "        inputs, targets = batches[i % len(batches)]\n"
        "        optimizer.zero_grad(set_to_none=True)\n"
        "        loss = loss_fn(model(inputs), targets)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        lrs.append(lr)\n"
        "        losses.append(loss.item())\n"
        "        best = min(best, losses[-1])\n"
        "        if not math.isfinite(losses[-1]) or losses[-1] > diverge * best:\n"
        "            break\n"
        "    model.load_state_dict(saved_model)\n"
        "    optimizer.load_state_dict(saved_optimizer)\n"
        "    return lrs, losses\n",
        "lr_range_test", given=NOTEBOOK),
        story="saved without deep copies: state_dict() holds the live tensors, so nothing is restored", planted=True),
    # 12-dead-units
    Mistake("12-dead-units", "wrong-fraction", "fraction of zero values", (dead_counter(reduce="values"),),
            story="(out == 0).float().mean(): zero activations, not dead units"),
    Mistake("12-dead-units", "wrong-fraction", "at least one example", (dead_counter(reduce="any"),),
            story="a unit called dead as soon as one example gives 0"),
    Mistake("12-dead-units", "wrong-fraction", "negative outputs", (dead_counter(reduce="negative"),),
            story="out < 0 for 'inactive': a ReLU never outputs a negative"),
    Mistake("12-dead-units", "wrong-fraction", "averaged over the batches", (dead_per_batch_averaged,),
            story="the dead fraction of each batch, then the mean over the batches"),
    Mistake("12-dead-units", "last-batch-only", "only the last batch", (dead_counter(combine="replace"),),
            story="the hook overwrites its record at each batch"),
    Mistake("12-dead-units", "wrong-keys", "hooks went on nn.Linear", (dead_counter(keys="linear"),),
            story="hooks on the Linear layers, 'the layers with units'"),
    Mistake("12-dead-units", "not-a-tensor", ".item()", (dead_counter(as_tensor=False),),
            story=".item() per layer to print a table"),
    Mistake("12-dead-units", "hooks-left", "hooks still on the model", (dead_counter(remove=False),),
            story="handles never removed"),
    Mistake("12-dead-units", "wrong-keys", "late binding: the hook reads the loop variable 'name'",
            (dead_late_binding,), story="a lambda hook made in the loop reads `name` late: it raises on act1"),
    Mistake("12-dead-units", "last-batch-only", "only the last batch", solution_cell(
        "def dead_units(model, batches):\n"
        "    alive = {}\n"
        "    def make_hook(name):\n"
        "        def hook(module, args, output):\n"
        "            alive[name] = (output > 0).any(dim=0)\n"
        "        return hook\n"
        "    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules()\n"
        "               if isinstance(m, nn.ReLU)]\n"
        "    try:\n"
        "        with torch.no_grad():\n"
        "            for inputs in batches:\n"
        "                model(inputs)\n"
        "    finally:\n"
        "        for handle in handles:\n"
        "            handle.remove()\n"
        "    return {name: 1 - mask.float().mean() for name, mask in alive.items()}\n",
        "dead_units"),
        story="the hook overwrites its record at each batch: only the last batch decides", planted=True),
]

CORRECT = [
    Correct("12-init-loss", (init_loss(),), story="the solution"),
    Correct("12-init-loss", (init_loss_inference_mode,), story="inference_mode, log_softmax by hand, a float"),
    Correct("12-grad-norms", (norms_solution,), story="the solution"),
    Correct("12-init-loss", (InitLossMeter(),), story="a callable class, no_grad as a decorator, a list back"),
    Correct("12-init-loss", (init_loss_nll_context,), story="log_softmax + nll_loss, a context manager, np.log"),
    Correct("12-grad-norms", (norms_by_hand,), story="sqrt of the sum of squares in float64"),
    Correct("12-grad-norms", (norms_foreach,), story="torch._foreach_norm, names zipped back"),
    Correct("12-grad-norms", (norms_einsum,), story="einsum dot product, then sqrt"),
    Correct("12-grad-norms", (norms_linalg_filter,), story="linalg.vector_norm over filter()"),
    Correct("12-grad-norms", (norms_state_dict_parameters,), story="state_dict(keep_vars=True), parameters only"),
    Correct("12-first-nonfinite", (locator(),), story="the solution"),
    Correct("12-first-nonfinite", (locator_with_a_flag,), story="a flag, handles popped in a finally"),
    Correct("12-first-nonfinite", (locator_from_harness,), story="harness.diagnose.first_nonfinite"),
    Correct("12-first-nonfinite", (locator_global_hook,), story="one global module hook, names by identity"),
    Correct("12-first-nonfinite", (locator_stops_at_first,), story="ExitStack of handles, raises at the first"),
    Correct("12-lr-range", (sweep(),), story="the solution"),
    Correct("12-lr-range", (sweep_with_harness,), story="harness.diagnose.lr_range_test"),
    Correct("12-lr-range", (sweep_multiplicative,), story="lr *= factor, parameters copied back by hand"),
    Correct("12-lr-range", (sweep_logspace,), story="torch.logspace, itertools.cycle, restore in a finally"),
    Correct("12-lr-range", (sweep_not_below,), story="stops on not (loss <= diverge * best), true for NaN too"),
    Correct("12-init-loss", (init_loss(log=np.log),), story="np.log(C): a numpy float64, a float subclass"),
    Correct("12-dead-units", (dead_counter(),), story="the solution"),
    Correct("12-dead-units", (dead_default_argument,), story="a lambda hook with name=name bound when made"),
    Correct("12-dead-units", (dead_from_one_big_batch,), story="one big batch through diagnose.capture_activations"),
    Correct("12-dead-units", (dead_by_counting,), story="counts positive outputs per unit, inference_mode"),
    Correct("12-dead-units", (dead_by_max,), story="per-unit maximum with torch.maximum, ExitStack of hooks"),
]


@pytest.mark.parametrize("correct", [c for c in CORRECT if c.story == "the solution" and c.task != "12-dead-units"],
                         ids=str)
def test_judges_refuse_shortened_observations(correct):
    assert_forgeries_refused(correct.task, *correct.objects, case=DRAWN_CASE)


# The first hint after a failure follows the cause the judge found, where the requirement's own hint does not fit it.
CAUSE_HINTS = [
    ("12-first-nonfinite", locator(modules="not-root"), "wrong-module", "is the model itself among the modules"),
    ("12-first-nonfinite", locator(modules="leaves"), "wrong-module", "Which modules carry your hooks?"),
    ("12-first-nonfinite", locator(modules="children"), "wrong-module", "only the model's direct children?"),
    ("12-first-nonfinite", locator_pre_hooks, "wrong-module", "what a module returns, or at what it receives?"),
    ("12-grad-norms", norms_state_dict_names, "wrong-keys", "list(model.state_dict())[:3]"),
    ("12-grad-norms", norms_of_weights, "wrong-norm", "the parameter, or the gradient stored on it?"),
    ("12-grad-norms", norms_then_zero_grad, "grads-modified", "clear the gradients"),
    ("12-lr-range", sweep(stop="ratio-only"), "no-divergence-stop", "float('nan') > 4.0 * 1.5"),
    ("12-lr-range", sweep_loss_tensors, "wrong-losses", "into a Python float"),
    ("12-lr-range", sweep_tensor_lrs, "wrong-losses", "an element of a tensor?"),
    ("12-init-loss", init_loss(log=lambda c: torch.log(torch.tensor(float(c)))), "wrong-expected", "math module"),
    ("12-dead-units", dead_counter(reduce="negative"), "wrong-fraction", "a negative number, or 0?"),
    ("12-dead-units", dead_per_batch_averaged, "wrong-fraction", "once over all the batches together?"),
    ("12-init-loss", init_loss(loss=F.nll_loss), "wrong-loss", "logits, probabilities or log-probabilities?"),
    ("12-init-loss", init_loss(log=lambda c: 1 / c), "wrong-expected", "what does cross-entropy do"),
]


@pytest.mark.parametrize(("task", "answer", "code", "phrase"), CAUSE_HINTS, ids=[f"{t}:{c}:{p[:20]}" for t, _, c, p
                                                                                   in CAUSE_HINTS])
def test_the_first_hint_follows_the_cause(task, answer, code, phrase):
    from harness.checks import check
    from harness.contract.failure import CheckFailed
    from harness.contract.registry import get

    with pytest.raises(CheckFailed) as failure:
        check(task, answer)
    assert failure.value.code == code, str(failure.value)
    assert failure.value.hint and phrase in failure.value.hint, failure.value.hint
    assert failure.value.hint != get(task).requires[code].hint


def test_the_visible_cases_separate_each_stated_mistake():
    """The visible case holds the input each of issue 43's misses needs: a model whose root makes the first NaN
    (and one whose output stays finite), a sweep whose loss turns NaN while it is far below diverge x best, a
    buffer registered before a parameter."""
    from harness.checks.lesson12.first_nonfinite import SCENARIOS, scenario_setup
    from harness.checks.lesson12.grad_norms import grad_model
    from harness.checks.lesson12.lr_range import sweep_setup, sweeps
    from harness.contract.case import Case
    from harness.diagnose import first_nonfinite

    for case in (Case(hidden=False), Case(hidden=True)):
        roots = [first_nonfinite(*scenario_setup(name, case, i)) for i, name in enumerate(SCENARIOS) if name != "error"]
        assert any(found is not None and found.module == "" for found in roots)
        model, inputs = scenario_setup("cleaned", case, SCENARIOS.index("cleaned"))  # keeping the last one differs
        with torch.no_grad():  # from scanning in definition order only where the model's output is finite
            assert torch.isfinite(model(inputs)).all() and first_nonfinite(model, inputs) is not None
        poisoned = [item for item in sweeps(case) if item["poisoned"] is not None]
        assert poisoned
        for item in poisoned:
            model, optimizer, batches = sweep_setup(item)
            _, losses = sweep()(model, optimizer, F.cross_entropy, batches, item["start_lr"], item["end_lr"],
                                item["num_steps"], item["diverge"])
            assert math.isnan(losses[-1]) and max(losses[:-1]) <= item["diverge"] * min(losses[:-1])
        model, _ = grad_model(case)
        assert next(iter(model.state_dict())) in dict(model.named_buffers())
