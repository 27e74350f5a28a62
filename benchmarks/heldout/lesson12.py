"""Lesson 12 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import copy
import math
from contextlib import ExitStack
import torch
import torch.nn.functional as F
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
seed_everything(0)
device = select_device()
'''

IL = "def loss_at_init(model, inputs, targets, num_classes):\n"
FN = "def first_nonfinite_module(model, inputs):\n"
LR = "def lr_range_test(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):\n"
LR_LOOP = '''
    saved_model = copy.deepcopy(model.state_dict())
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    lrs, losses, best = [], [], math.inf
    model.train()
    for i in range(num_steps):
        lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
'''
LR_END = '''
    model.load_state_dict(saved_model)
    optimizer.load_state_dict(saved_optimizer)
    return lrs, losses
'''
DU = "def dead_units(model, batches):\n"

ENTRIES = [
    Entry("12-init-loss", "mistake", "left the model in eval mode",
          "the mode is not restored: a model in train mode comes back in eval mode", IL + '''
    model.eval()
    with torch.no_grad():
        measured = F.cross_entropy(model(inputs), targets)
    return measured, math.log(num_classes)
''', ("loss_at_init",)),
    Entry("12-init-loss", "mistake", "no torch.no_grad",
          "the forward builds an autograd graph", IL + '''
    was = model.training
    model.eval()
    measured = F.cross_entropy(model(inputs), targets)
    model.train(was)
    return measured, math.log(num_classes)
''', ("loss_at_init",)),
    Entry("12-init-loss", "mistake", "expected computed with torch.log",
          "expected is a 0-dim tensor where a float is asked", IL + '''
    was = model.training
    model.eval()
    with torch.no_grad():
        measured = F.cross_entropy(model(inputs), targets)
    model.train(was)
    return measured, torch.log(torch.tensor(float(num_classes)))
''', ("loss_at_init",)),
    Entry("12-init-loss", "mistake", "log base 2",
          "expected uses log2 instead of the natural log", IL + '''
    was = model.training
    model.eval()
    with torch.no_grad():
        measured = F.cross_entropy(model(inputs), targets)
    model.train(was)
    return measured, math.log2(num_classes)
''', ("loss_at_init",)),
    Entry("12-init-loss", "mistake", "set train mode back at the end",
          "always calls model.train() afterwards: a model that was in eval mode comes back in train mode", IL + '''
    model.eval()
    with torch.no_grad():
        measured = F.cross_entropy(model(inputs), targets)
    model.train()
    return measured, math.log(num_classes)
''', ("loss_at_init",)),
    Entry("12-grad-norms", "mistake", "float() per layer",
          "values converted with .item(): a host sync per layer, floats not tensors", '''
def grad_norms_per_layer(model):
    return {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}
''', ("grad_norms_per_layer",)),
    Entry("12-grad-norms", "mistake", "names zipped from state_dict keys",
          "state_dict keys include buffers: names shift against the parameters", '''
def grad_norms_per_layer(model):
    params = [p for p in model.parameters()]
    return {name: p.grad.norm() for name, p in zip(model.state_dict().keys(), params) if p.grad is not None}
''', ("grad_norms_per_layer",)),
    Entry("12-grad-norms", "mistake", "zero for missing gradients",
          "parameters with grad None are included (as 0) instead of left out", '''
def grad_norms_per_layer(model):
    return {n: (p.grad.norm() if p.grad is not None else torch.zeros(())) for n, p in model.named_parameters()}
''', ("grad_norms_per_layer",)),
    Entry("12-grad-norms", "mistake", "squared the gradient in place",
          "pow_ modifies the gradients in place", '''
def grad_norms_per_layer(model):
    return {n: p.grad.pow_(2).sum().sqrt() for n, p in model.named_parameters() if p.grad is not None}
''', ("grad_norms_per_layer",)),
    Entry("12-first-nonfinite", "mistake", "looked for NaN only",
          "isnan misses inf outputs", FN + '''
    found, handles = [], []
    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(
            lambda m, a, out, name=name: found.append(name) if torch.isnan(out).any() else None))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None
''', ("first_nonfinite_module",)),
    Entry("12-first-nonfinite", "mistake", "hooked leaf modules only",
          "only modules without children are hooked: a culprit in a container's (or the root's) own forward is missed",
          FN + '''
    found, handles = [], []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, a, out, name=name: found.append(name) if not torch.isfinite(out).all() else None))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None
''', ("first_nonfinite_module",)),
    Entry("12-first-nonfinite", "mistake", "removed hooks after the forward, no finally",
          "hooks stay registered when the forward raises", FN + '''
    found = []
    handles = [m.register_forward_hook(
        lambda mod, a, out, name=name: found.append(name) if not torch.isfinite(out).all() else None)
        for name, m in model.named_modules()]
    with torch.no_grad():
        model(inputs)
    for h in handles:
        h.remove()
    return found[0] if found else None
''', ("first_nonfinite_module",)),
    Entry("12-first-nonfinite", "mistake", "kept the last module seen",
          "each non-finite output overwrites the answer: returns the last (outermost) module, not the first", FN + '''
    found = {"name": None}
    handles = []
    for name, module in model.named_modules():
        def hook(m, a, out, name=name):
            if not torch.isfinite(out).all():
                found["name"] = name
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return found["name"]
''', ("first_nonfinite_module",)),
    Entry("12-first-nonfinite", "mistake", "checked inputs with a pre-hook",
          "forward pre-hooks test each module's inputs: names the module after the culprit", FN + '''
    found, handles = [], []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(
            lambda m, args, name=name: found.append(name) if not torch.isfinite(args[0]).all() else None))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None
''', ("first_nonfinite_module",)),
    Entry("12-lr-range", "mistake", "restored the model only",
          "the optimizer's state (momentum buffers, lrs) is not restored", LR + LR_LOOP + '''
        lrs.append(lr)
        losses.append(loss.item())
        best = min(best, losses[-1])
        if not math.isfinite(losses[-1]) or losses[-1] > diverge * best:
            break
    model.load_state_dict(saved_model)
    return lrs, losses
''', ("lr_range_test",)),
    Entry("12-lr-range", "mistake", "bare state_dict() as the backup",
          "no deepcopy: the saved state is the live tensors, so nothing is restored", LR + '''
    saved_model = model.state_dict()
    saved_optimizer = optimizer.state_dict()
    lrs, losses, best = [], [], math.inf
    model.train()
    for i in range(num_steps):
        lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
        best = min(best, losses[-1])
        if not math.isfinite(losses[-1]) or losses[-1] > diverge * best:
            break
''' + LR_END, ("lr_range_test",)),
    Entry("12-lr-range", "mistake", "exponent i / num_steps",
          "off-by-one: the sweep never reaches end_lr (i / num_steps instead of i / (num_steps - 1))", LR + '''
    saved_model = copy.deepcopy(model.state_dict())
    saved_optimizer = copy.deepcopy(optimizer.state_dict())
    lrs, losses, best = [], [], math.inf
    model.train()
    for i in range(num_steps):
        lr = start_lr * (end_lr / start_lr) ** (i / num_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
        best = min(best, losses[-1])
        if not math.isfinite(losses[-1]) or losses[-1] > diverge * best:
            break
''' + LR_END, ("lr_range_test",)),
    Entry("12-lr-range", "mistake", "losses kept as tensors",
          "each recorded loss is a 0-dim tensor (detached), not a float", LR + LR_LOOP + '''
        lrs.append(lr)
        losses.append(loss.detach())
        best = min(best, float(loss))
        if not math.isfinite(float(loss)) or float(loss) > diverge * best:
            break
''' + LR_END, ("lr_range_test",)),
    Entry("12-lr-range", "mistake", "divergence measured against the first loss",
          "compares with the first step's loss instead of the lowest so far", LR + LR_LOOP + '''
        lrs.append(lr)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]) or losses[-1] > diverge * losses[0]:
            break
''' + LR_END, ("lr_range_test",)),
    Entry("12-lr-range", "mistake", "inf check forgotten",
          "only the diverge ratio is tested: a nan loss compares False and the sweep goes on", LR + LR_LOOP + '''
        lrs.append(lr)
        losses.append(loss.item())
        best = min(best, losses[-1])
        if losses[-1] > diverge * best:
            break
''' + LR_END, ("lr_range_test",)),
    Entry("12-dead-units", "mistake", "averaged the per-batch dead fractions",
          "deadness decided per batch and averaged: a unit silent on one batch counts as partly dead", DU + '''
    fractions, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, a, out, name=name: fractions.setdefault(name, []).append((out <= 0).all(0).float().mean())))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {name: torch.stack(v).mean() for name, v in fractions.items()}
''', ("dead_units",)),
    Entry("12-dead-units", "mistake", "any zero means dead",
          "a unit that outputs 0 on any example is counted dead (any instead of all)", DU + '''
    dead, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            def hook(m, a, out, name=name):
                d = (out == 0).any(0)
                dead[name] = d if name not in dead else dead[name] | d
            handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {name: d.float().mean() for name, d in dead.items()}
''', ("dead_units",)),
    Entry("12-dead-units", "mistake", "hook lambda closes over the loop variable",
          "late binding: every hook writes under the last ReLU's name", DU + '''
    alive, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, a, out: alive.__setitem__(name, alive.get(name, False) | (out > 0).any(0))))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: 1 - m.float().mean() for n, m in alive.items()}
''', ("dead_units",)),
    Entry("12-dead-units", "mistake", "only the last batch counts",
          "the alive mask is overwritten by each batch instead of combined", DU + '''
    alive, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, a, out, name=name: alive.__setitem__(name, (out > 0).any(0))))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: 1 - m.float().mean() for n, m in alive.items()}
''', ("dead_units",)),
    Entry("12-init-loss", "correct", "inference_mode and try/finally", "", IL + '''
    mode = model.training
    try:
        model.train(False)
        with torch.inference_mode():
            logits = model(inputs)
        return F.nll_loss(logits.log_softmax(-1), targets).item(), float(math.log(num_classes))
    finally:
        model.train(mode)
''', ("loss_at_init",)),
    Entry("12-first-nonfinite", "correct", "ExitStack of handles and a flag list", "", FN + '''
    order = []
    with ExitStack() as stack:
        for name, module in model.named_modules():
            h = module.register_forward_hook(
                lambda m, a, out, name=name: order.append(name) if not bool(out.isfinite().all()) else None)
            stack.callback(h.remove)
        with torch.no_grad():
            model(inputs)
    return next(iter(order), None)
''', ("first_nonfinite_module",)),
    Entry("12-lr-range", "correct", "float64 logspace and try/finally restore", "", '''
def lr_range_test(model, optimizer, loss_fn, batches, start_lr, end_lr, num_steps, diverge=4.0):
    model_backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt_backup = copy.deepcopy(optimizer.state_dict())
    grid = torch.logspace(math.log10(start_lr), math.log10(end_lr), num_steps, dtype=torch.float64).tolist()
    lrs, losses = [], []
    try:
        model.train()
        for i, lr in enumerate(grid):
            for g in optimizer.param_groups:
                g["lr"] = lr
            x, y = batches[i % len(batches)]
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            lrs.append(lr)
            losses.append(float(loss))
            if not math.isfinite(losses[-1]) or losses[-1] > diverge * min(losses):
                break
    finally:
        model.load_state_dict(model_backup)
        optimizer.load_state_dict(opt_backup)
    return lrs, losses
''', ("lr_range_test",)),
    Entry("12-dead-units", "correct", "count of firing examples summed over batches", "", DU + '''
    fires, handles = {}, []
    relus = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ReLU)]
    for name, module in relus:
        def hook(m, a, out, name=name):
            fires[name] = fires.get(name, 0) + out.gt(0).sum(dim=0)
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for x in batches:
                model(x)
    finally:
        for h in handles:
            h.remove()
    return {name: (count == 0).float().mean() for name, count in fires.items()}
''', ("dead_units",)),
]
