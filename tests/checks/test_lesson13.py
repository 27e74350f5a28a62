"""Lesson 13's checks against planted mistakes (each must fail with its code and message) and correct variants
written differently from the solution (each must pass the visible, hidden and a drawn hidden case)."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from harness.checks.testing import Correct, Mistake, assert_mistake, solution_cell
from tests.exercises import notebook_namespace

COPIES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}


# ---------------------------------------------------------------------------------------------------- 13-memory-formula
def memory_using(*, size=lambda p: p.numel() * p.element_size(), params=lambda m: list(m.parameters()),
                 frozen_params=True, frozen_grads=False, copies=COPIES, total=None, keys=("params", "grads",
                                                                                          "optimizer", "total"),
                 cast=int, state_on_all=False):
    def training_memory(model, optimizer):
        ps = params(model)
        all_params = ps if frozen_params else [p for p in ps if p.requires_grad]
        trained = ps if frozen_grads else [p for p in ps if p.requires_grad]
        sizes = [cast(sum(size(p) for p in all_params)), cast(sum(size(p) for p in trained))]
        sizes.append(copies[optimizer] * (sizes[0] if state_on_all else sizes[1]))
        sizes.append(total(sizes) if total else sum(sizes))
        return dict(zip(keys, sizes, strict=True))
    return training_memory


def memory_by_modules(model, optimizer):
    """Walks every module's own parameters: a tied weight is met twice."""
    params = [p for module in model.modules() for p in module.parameters(recurse=False)]
    size = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = COPIES[optimizer] * grads
    return {"params": size, "grads": grads, "optimizer": state, "total": size + grads + state}


def memory_by_nbytes(model, optimizer):
    """Uses Tensor.nbytes and a running dict of seen ids: another correct answer."""
    seen, params, grads = set(), 0, 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        params += p.nbytes
        grads += p.nbytes if p.requires_grad else 0
    state = grads * {"sgd": 0, "momentum": 1}.get(optimizer, 2)
    return {"total": params + grads + state, "optimizer": state, "grads": grads, "params": params}


def memory_by_match(model, optimizer):
    """A match statement for the optimizer, every parameter name (a tied weight under both) keyed by the tensor's
    id, so each tensor counts once: another correct answer."""
    unique = {id(p): p for _, p in model.named_parameters(remove_duplicate=False)}
    params = sum(p.numel() * p.element_size() for p in unique.values())
    grads = sum(p.numel() * p.element_size() for p in unique.values() if p.requires_grad)
    match optimizer:
        case "sgd":
            state = 0
        case "momentum":
            state = grads
        case "adam" | "adamw":
            state = 2 * grads
    return {"params": params, "grads": grads, "optimizer": state, "total": params + grads + state}


def memory_from_state_dict(model, optimizer):
    """Counts the state_dict: a tied weight appears under both names."""
    params = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = COPIES[optimizer] * grads
    return {"params": params, "grads": grads, "optimizer": state, "total": params + grads + state}


# ------------------------------------------------------------------------------------------------ 13-activation-formula
def activations_using(*, element=lambda dtype: torch.empty((), dtype=dtype).element_size(), twice=False,
                      with_output=False, without_input=False, weights=False, cast=int, batch=True):
    def activation_formula(batch_size, widths, dtype):
        size = element(dtype)
        batch_size = batch_size if batch else 1
        widths_saved = list(widths[:-1]) + (list(widths[1:-1]) if twice else []) + ([widths[-1]] if with_output else [])
        if without_input:
            widths_saved = widths_saved[1:]
        total = batch_size * sum(widths_saved) * size
        if weights:
            total += sum(a * b for a, b in zip(widths[1:-1], widths[2:], strict=True)) * size
        return cast(total)
    return activation_formula


def activations_of_outputs(batch_size, widths, dtype):
    """Counts what each Linear produces instead of what it takes."""
    return batch_size * sum(widths[1:]) * torch.empty((), dtype=dtype).element_size()


def activations_by_layers(batch_size, widths, dtype):
    """Walks the layers and adds the input of each Linear: another correct answer."""
    size = torch.finfo(dtype).bits // 8
    return sum(batch_size * fan_in * size for fan_in in widths[:-1])


def activations_by_itemsize(batch_size, widths, dtype):
    """dtype.itemsize and a generator over the Linear inputs: another correct answer."""
    return sum(batch_size * width * dtype.itemsize for width in widths[:-1])


# ---------------------------------------------------------------------------------------------------- 13-accumulate
def accum_using(*, train=True, split=True, zero="before", weight="share", step="after", ret="mean", detach=True):
    def accumulation_step(model, batch, loss_fn, optimizer, micro_batch_size):
        inputs, targets = batch
        if train:
            model.train()
        if zero == "before":
            optimizer.zero_grad(set_to_none=True)
        size = micro_batch_size if split else len(inputs)
        cut = (lambda t: t.chunk(size)) if split == "chunk" else (lambda t: t.split(size))
        chunks = list(zip(cut(inputs), cut(targets), strict=True))
        total, losses = torch.zeros(()), []
        for x, y in chunks:
            if zero == "inside":
                optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            factor = {"share": len(x) / len(inputs), "count": 1 / len(chunks), "none": 1.0,
                      "size": 1 / micro_batch_size}[weight]
            (loss * factor).backward()
            total = total + (loss * len(x) / len(inputs)).detach()
            losses.append(loss.detach())
            if step == "inside":
                optimizer.step()
        if step == "after":
            optimizer.step()
        if ret == "item":
            return total.item()
        if ret == "last":
            return losses[-1]
        if ret == "mean-of-means":
            return torch.stack(losses).mean()
        return total if detach else total.requires_grad_()
    return accumulation_step


def accum_sum_reduction(model, batch, loss_fn, optimizer, micro_batch_size):
    """Sums per-row losses and divides by the batch size once: another correct weighting."""
    model.train()
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    total = inputs.new_zeros(())
    for start in range(0, len(inputs), micro_batch_size):
        x, y = inputs[start:start + micro_batch_size], targets[start:start + micro_batch_size]
        loss = nn.functional.mse_loss(model(x), y, reduction="sum") / targets.numel()
        loss.backward()
        total += loss.detach()
    optimizer.step()
    return total


def accum_tensor_split(model, batch, loss_fn, optimizer, micro_batch_size):
    """tensor_split at the multiples of micro_batch_size, each loss scaled by its rows over the batch's rows."""
    model.train()
    inputs, targets = batch
    optimizer.zero_grad()
    cuts = list(range(micro_batch_size, len(inputs), micro_batch_size))
    total = torch.zeros(())
    for x, y in zip(inputs.tensor_split(cuts), targets.tensor_split(cuts), strict=True):
        loss = loss_fn(model(x), y) * x.size(0) / inputs.size(0)
        loss.backward()
        total += loss.detach()
    optimizer.step()
    return total


def accum_zero_at_end(model, batch, loss_fn, optimizer, micro_batch_size):
    """Clears the gradients after the step instead of before: correct when every call does it (the model
    starts without gradients)."""
    model.train()
    inputs, targets = batch
    losses = []
    for x, y in zip(torch.split(inputs, micro_batch_size), torch.split(targets, micro_batch_size), strict=True):
        loss = loss_fn(model(x), y) * x.shape[0] / inputs.shape[0]
        loss.backward()
        losses.append(loss.detach())
    optimizer.step()
    optimizer.zero_grad()
    return torch.stack(losses).sum()


# ---------------------------------------------------------------------------------------------------- 13-checkpoint
def checkpoint_using(*, reentrant=False, preserve=True, skip_first=False, last_plain=False, return_input=False):
    def checkpointed_forward(blocks, x):
        h = x
        for index, block in enumerate(blocks):
            if index == 0 and skip_first:
                continue
            if last_plain and index == len(blocks) - 1 and len(blocks) > 1:
                h = block(h)
            else:
                h = checkpoint(block, h, use_reentrant=reentrant, preserve_rng_state=preserve)
        return x if return_input else h
    return checkpointed_forward


def checkpoint_no_grad(blocks, x):
    """Runs the blocks under no_grad 'to save memory'."""
    with torch.no_grad():
        h = x
        for block in blocks:
            h = block(h)
    return h


def checkpoint_reentrant_with_grad_input(blocks, x):
    """Makes the input require grad so that the reentrant variant gives gradients: still the reentrant one."""
    h = x.requires_grad_()
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=True)
    return h


class Checkpointed(nn.Module):
    """Wraps a module so that its forward is checkpointed: another correct answer."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, h):
        return checkpoint(self.inner, h, use_reentrant=False)


def checkpoint_wrapped(blocks, x):
    return nn.Sequential(*(Checkpointed(block) for block in blocks))(x)


def checkpoint_whole_stack(blocks, x):
    """Checkpoints the whole stack as one function: keeps only the input, but backward rebuilds every block's
    activations at once (issue 29: this passed, with a message saying it kept each block's input)."""
    def run(h):
        for block in blocks:
            h = block(h)
        return h
    return checkpoint(run, x, use_reentrant=False)


def checkpoint_detached(blocks, x):
    """Detaches between blocks 'so that each checkpoint stands alone': the earlier blocks get no gradient
    (issue 29: this was blamed on preserve_rng_state)."""
    h = x
    for block in blocks:
        h = checkpoint(block, h.detach(), use_reentrant=False)
    return h


def checkpoint_late_binding(blocks, x):
    """A lambda per block without binding the block: the recomputation in backward runs the last block."""
    h = x
    for block in blocks:
        h = checkpoint(lambda t: block(t), h, use_reentrant=False)  # noqa: B023 (the planted late binding)
    return h


def checkpoint_sequential_default(blocks, x):
    """checkpoint_sequential with one segment per block: it leaves the last segment unchecked."""
    return torch.utils.checkpoint.checkpoint_sequential(nn.Sequential(*blocks), len(blocks), x, use_reentrant=False)


def checkpoint_reduce(blocks, x):
    """functools.reduce over the blocks: another correct answer."""
    return functools.reduce(lambda h, block: checkpoint(block, h, use_reentrant=False, preserve_rng_state=True),
                            blocks, x)


def checkpoint_bound_lambda(blocks, x):
    """A lambda per block with the block bound as a default argument, and a while loop: another correct answer."""
    h, index = x, 0
    while index < len(blocks):
        h = checkpoint(lambda t, block=blocks[index]: block(t), h, use_reentrant=False)
        index += 1
    return h


# ---------------------------------------------------------------------------------------------------- 13-deterministic
def flags():
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)


def restore(before):
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]


def deterministic_using(*, enable=True, warn_only=False, benchmark=False, cudnn_det=True, finally_=True,
                        swallow=False, restore_fn=restore, read=flags):
    @contextlib.contextmanager
    def deterministic():
        before = read()
        torch.use_deterministic_algorithms(enable, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark
        torch.backends.cudnn.deterministic = cudnn_det
        if finally_:
            try:
                yield
            except Exception:
                if not swallow:
                    raise
            finally:
                restore_fn(before)
        else:
            yield
            restore_fn(before)
    return deterministic


def restore_without_warn_only(before):
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]


def read_after_setting():
    """A reader that enables the flags first, so that what it 'saves' is the block's own settings."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
    return flags()


def restore_swapped(before):
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[3], before[2]


def restore_defaults(before):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, False


class DeterministicClass:
    """A class with __enter__ and __exit__: another correct answer."""

    def __enter__(self):
        self.saved = flags()
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        return self

    def __exit__(self, *exc):
        restore(self.saved)
        return False


@contextlib.contextmanager
def deterministic_exit_stack():
    """Saves through an ExitStack callback: another correct answer."""
    with contextlib.ExitStack() as stack:
        stack.callback(restore, flags())
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        yield


# What the notebook's other cells define, for the planted cells that use it
NOTEBOOK = notebook_namespace("13_performance_memory")

MISTAKES = [
    # 13-memory-formula
    Mistake("13-memory-formula", "wrong-params", "elements were counted, not bytes",
            (memory_using(size=lambda p: p.numel()),), story="sums numel(): parameters, not bytes"),
    Mistake("13-memory-formula", "wrong-params", "4 bytes were assumed",
            (memory_using(size=lambda p: 4 * p.numel()),), story="assumes float32 everywhere"),
    Mistake("13-memory-formula", "wrong-params", "tied) weight was counted twice", (memory_by_modules,),
            story="walks model.modules(): the tied embedding counts twice"),
    Mistake("13-memory-formula", "wrong-params", "counted twice", (memory_from_state_dict,),
            story="sums the state_dict, where a tied weight has two names"),
    Mistake("13-memory-formula", "wrong-params", "frozen parameters were left out",
            (memory_using(frozen_params=False),), story="thinks frozen layers cost nothing"),
    Mistake("13-memory-formula", "wrong-grads", "frozen parameters were counted", (memory_using(frozen_grads=True),),
            story="gives every parameter a gradient"),
    Mistake("13-memory-formula", "wrong-optimizer-state", "'momentum'",
            (memory_using(copies={"sgd": 0, "momentum": 0, "adam": 2, "adamw": 2}),),
            story="forgets the momentum buffer"),
    Mistake("13-memory-formula", "wrong-optimizer-state", "'adam'",
            (memory_using(copies={"sgd": 0, "momentum": 1, "adam": 1, "adamw": 1}),),
            story="counts one Adam moment instead of two"),
    Mistake("13-memory-formula", "wrong-optimizer-state", "'sgd'",
            (memory_using(copies={"sgd": 1, "momentum": 1, "adam": 2, "adamw": 2}),),
            story="gives plain SGD a buffer"),
    Mistake("13-memory-formula", "wrong-optimizer-state", "state was counted for the frozen parameters",
            (memory_using(copies={"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}, state_on_all=True),),
            story="multiplies the copies by all the parameters' bytes"),
    Mistake("13-memory-formula", "wrong-total", "params + grads + optimizer",
            (memory_using(total=lambda s: s[0] + s[2]),), story="leaves the gradients out of the total"),
    Mistake("13-memory-formula", "not-an-int", "float", (memory_using(cast=float),),
            story="divides by 1 or converts to float for printing"),
    Mistake("13-memory-formula", "not-an-int", "a tensor: the bytes were added up", (memory_using(cast=torch.tensor),),
            story="sums into a tensor"),
    Mistake("13-memory-formula", "missing-key", "keys", (memory_using(keys=("params", "grads", "optim", "total")),),
            story="spells the optimizer key 'optim'"),
    Mistake("13-memory-formula", "wrong-params", "4 bytes were assumed", solution_cell(
        "def training_memory(model, optimizer):\n"
        "    params = list(model.parameters())\n"
        "    trained = [p for p in params if p.requires_grad]\n"
        "    copies = {'sgd': 0, 'momentum': 1, 'adam': 2, 'adamw': 2}[optimizer]\n"
        "    memory = {'params': 4 * sum(p.numel() for p in params), 'grads': 4 * sum(p.numel() for p in trained)}\n"
        "    memory['optimizer'] = copies * memory['grads']\n"
        "    return {**memory, 'total': sum(memory.values())}\n",
        "training_memory"),
        story="every parameter taken as 4 bytes: wrong for the bfloat16 layer", planted=True),
    # 13-activation-formula
    Mistake("13-activation-formula", "counted-twice", "counted twice", (activations_using(twice=True),),
            story="counts what ReLU saves and what the next Linear saves as two tensors"),
    Mistake("13-activation-formula", "wrong-element-size", "4 bytes were assumed",
            (activations_using(element=lambda dtype: 4),), story="assumes float32"),
    Mistake("13-activation-formula", "wrong-element-size", "elements were counted",
            (activations_using(element=lambda dtype: 1),), story="counts values, not bytes"),
    Mistake("13-activation-formula", "weights-counted", "weights that Linear layers save",
            (activations_using(weights=True),), story="adds the weights linear layers save"),
    Mistake("13-activation-formula", "wrong-bytes", "last Linear's output was counted",
            (activations_using(with_output=True),), story="counts the model's output too"),
    Mistake("13-activation-formula", "wrong-bytes", "first Linear's input was left out",
            (activations_using(without_input=True),), story="thinks the input batch is not the model's memory"),
    Mistake("13-activation-formula", "missing-batch", "exactly 5 times too few, the batch size",
            (activations_using(batch=False),), story="counts one example's activations (issue 29: this was blamed "
            "on which layers were counted, and by the hidden check on 4-byte elements)"),
    Mistake("13-activation-formula", "wrong-bytes", "output was counted instead of its input",
            (activations_of_outputs,), story="counts each layer's output, as a diagram of the network suggests"),
    Mistake("13-activation-formula", "not-an-int", "a float: a division", (activations_using(cast=float),),
            story="returns a float from a division"),
    Mistake("13-activation-formula", "not-an-int", "a tensor: the count was computed with torch",
            (activations_using(cast=torch.tensor),), story="returns torch.tensor(total), a 0-dim tensor"),
    Mistake("13-activation-formula", "counted-twice", "counted twice", solution_cell(
        "def activation_formula(batch_size, widths, dtype):\n"
        "    element = torch.empty((), dtype=dtype).element_size()\n"
        "    return batch_size * (widths[0] + 2 * sum(widths[1:-1])) * element\n",
        "activation_formula"),
        story="the ReLU output counted again as the next Linear's input: one tensor counted twice", planted=True),
    # 13-accumulate
    Mistake("13-accumulate", "wrong-weighting", "divided by the number of micro-batches",
            (accum_using(weight="count"),), story="divides by k as with equal micro-batches (lesson 06)"),
    Mistake("13-accumulate", "wrong-weighting", "divided by micro_batch_size (4)", (accum_using(weight="size"),),
            story="divides each micro-batch's loss by micro_batch_size, the rows of a full micro-batch"),
    Mistake("13-accumulate", "wrong-weighting", "summed without weighting", (accum_using(weight="none"),),
            story="backpropagates each micro-batch loss undivided"),
    Mistake("13-accumulate", "micro-batch-too-large", "x.chunk(micro_batch_size) cuts the batch",
            (accum_using(split="chunk"),), story="chunk(micro_batch_size) taken for split(micro_batch_size)"),
    Mistake("13-accumulate", "micro-batch-too-large", "at once", (accum_using(split=False),),
            story="runs the whole batch in one forward"),
    Mistake("13-accumulate", "missing-zero-grad", "previous call", (accum_using(zero="never"),),
            story="never clears the gradients"),
    Mistake("13-accumulate", "only-last-micro-batch", "zero_grad inside the micro-batch loop",
            (accum_using(zero="inside"),), story="zero_grad inside the loop"),
    Mistake("13-accumulate", "steps-per-micro-batch", "inside the micro-batch loop", (accum_using(step="inside"),),
            story="steps after every micro-batch"),
    Mistake("13-accumulate", "no-step", "never ran", (accum_using(step="never"),), story="forgets the step"),
    Mistake("13-accumulate", "eval-mode", "model.train()", (accum_using(train=False),),
            story="leaves the model in eval mode after validation"),
    Mistake("13-accumulate", "wrong-return", "Python number", (accum_using(ret="item"),),
            story="returns total.item() to log it"),
    Mistake("13-accumulate", "wrong-return", "the last micro-batch's loss", (accum_using(ret="last"),),
            story="returns the last micro-batch's loss"),
    Mistake("13-accumulate", "wrong-return", "unweighted", (accum_using(ret="mean-of-means"),),
            story="returns the mean of micro-batch means"),
    Mistake("13-accumulate", "wrong-return", "requires_grad=True", (accum_using(detach=False),),
            story="returns a loss attached to the graph"),
    Mistake("13-accumulate", "wrong-weighting", "divided by the number of micro-batches", solution_cell(
        "def accumulation_step(model, batch, loss_fn, optimizer, micro_batch_size):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    chunks = list(zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)))\n"
        "    total = torch.zeros(())\n"
        "    for x, y in chunks:\n"
        "        loss = loss_fn(model(x), y) / len(chunks)\n"
        "        loss.backward()\n"
        "        total += loss.detach()\n"
        "    optimizer.step()\n"
        "    return total\n",
        "accumulation_step"),
        story="each micro-batch divided by the number of micro-batches: the smaller last one weighs too much",
        planted=True),
    # 13-checkpoint
    Mistake("13-checkpoint", "no-param-grads", "use_reentrant=True", (checkpoint_using(reentrant=True),),
            story="the old default use_reentrant=True with data that does not require grad"),
    Mistake("13-checkpoint", "no-param-grads", "torch.no_grad()", (checkpoint_no_grad,),
            story="runs the forward under no_grad to save memory"),
    Mistake("13-checkpoint", "reentrant", "CheckpointFunction", (checkpoint_reentrant_with_grad_input,),
            story="makes the input require grad to get the reentrant variant working"),
    Mistake("13-checkpoint", "wrong-grads", "exactly those of a checkpointed forward with preserve_rng_state=False",
            (checkpoint_using(preserve=False),), story="turns off RNG preservation to save time"),
    Mistake("13-checkpoint", "wrong-grads", "ran block", (checkpoint_late_binding,),
            story="a lambda in the loop that binds the block late"),
    Mistake("13-checkpoint", "no-param-grads", "the graph is cut after block 2", (checkpoint_detached,),
            story="detaches h between the checkpointed blocks"),
    Mistake("13-checkpoint", "one-checkpoint", "blocks [0, 1, 2, 3] all ran again", (checkpoint_whole_stack,),
            story="one checkpoint around the whole stack"),
    Mistake("13-checkpoint", "not-checkpointed", "block(s) [3] run outside checkpoint",
            (checkpoint_sequential_default,), story="checkpoint_sequential with a segment per block"),
    Mistake("13-checkpoint", "not-checkpointed", "block(s) [3] run outside checkpoint",
            (checkpoint_using(last_plain=True),), story="leaves the last block out of the checkpoint loop"),
    Mistake("13-checkpoint", "wrong-output", "the first block was left out", (checkpoint_using(skip_first=True),),
            story="starts the loop at blocks[1:] by an off-by-one"),
    Mistake("13-checkpoint", "wrong-output", "the input x was returned", (checkpoint_using(return_input=True),),
            story="returns x instead of h"),
    Mistake("13-checkpoint", "wrong-grads", "exactly those of a checkpointed forward with preserve_rng_state=False",
            solution_cell(
        "def checkpointed_forward(blocks, x):\n"
        "    h = x\n"
        "    for block in blocks:\n"
        "        h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)\n"
        "    return h\n",
        "checkpointed_forward", given=NOTEBOOK),
        story="preserve_rng_state=False: the recomputation draws new dropout masks", planted=True),
    # 13-deterministic
    Mistake("13-deterministic", "not-deterministic", "use_deterministic_algorithms(True) is missing",
            (deterministic_using(enable=False),), story="sets the cuDNN flags only"),
    Mistake("13-deterministic", "not-deterministic", "warn_only=True", (deterministic_using(warn_only=True),),
            story="passes warn_only=True to avoid errors"),
    Mistake("13-deterministic", "benchmark-on", "cudnn.benchmark", (deterministic_using(benchmark=True),),
            story="keeps benchmark=True for speed"),
    Mistake("13-deterministic", "cudnn-not-deterministic", "cudnn.deterministic",
            (deterministic_using(cudnn_det=False),), story="forgets cudnn.deterministic"),
    Mistake("13-deterministic", "not-restored", "warn_only=:",
            (deterministic_using(restore_fn=restore_without_warn_only),),
            story="restores the flag with use_deterministic_algorithms(previous), losing warn_only"),
    Mistake("13-deterministic", "not-restored", "defaults (all False) were written back",
            (deterministic_using(restore_fn=restore_defaults),),
            story="writes the defaults back instead of the old values"),
    Mistake("13-deterministic", "not-restored", "read after they were changed",
            (deterministic_using(read=read_after_setting),), story="saves the flags after setting them"),
    Mistake("13-deterministic", "not-restored", "written back to the wrong flags",
            (deterministic_using(restore_fn=restore_swapped),), story="unpacks benchmark and deterministic swapped"),
    Mistake("13-deterministic", "not-restored-on-error", "finally", (deterministic_using(finally_=False),),
            story="restores after the yield without try/finally"),
    Mistake("13-deterministic", "exception-swallowed", "did not come out", (deterministic_using(swallow=True),),
            story="catches everything around the yield"),
    Mistake("13-deterministic", "not-restored-on-error", "finally", solution_cell(
        "@contextlib.contextmanager\n"
        "def deterministic():\n"
        "    before = (torch.are_deterministic_algorithms_enabled(),\n"
        "              torch.is_deterministic_algorithms_warn_only_enabled(),\n"
        "              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)\n"
        "    torch.use_deterministic_algorithms(True)\n"
        "    torch.backends.cudnn.benchmark = False\n"
        "    torch.backends.cudnn.deterministic = True\n"
        "    yield\n"
        "    torch.use_deterministic_algorithms(before[0], warn_only=before[1])\n"
        "    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]\n",
        "deterministic", given=NOTEBOOK),
        story="the flags are restored after the yield but not in a finally: an exception skips it", planted=True),
]

CORRECT = [
    Correct("13-memory-formula", (memory_using(),), story="the solution"),
    Correct("13-memory-formula", (memory_by_nbytes,), story="Tensor.nbytes with an id set"),
    Correct("13-memory-formula", (memory_by_match,), story="a match statement, named_parameters keyed by id"),
    Correct("13-activation-formula", (activations_using(),), story="the solution"),
    Correct("13-activation-formula", (activations_by_layers,), story="a sum over layers with finfo bits"),
    Correct("13-activation-formula", (activations_by_itemsize,), story="dtype.itemsize in a generator"),
    Correct("13-accumulate", (accum_using(),), story="the solution"),
    Correct("13-accumulate", (accum_sum_reduction,), story="sum reduction divided by the batch"),
    Correct("13-accumulate", (accum_zero_at_end,), story="zero_grad after the step"),
    Correct("13-accumulate", (accum_tensor_split,), story="tensor_split at multiples of micro_batch_size"),
    Correct("13-checkpoint", (checkpoint_using(),), story="the solution"),
    Correct("13-checkpoint", (checkpoint_wrapped,), story="a wrapper module per block"),
    Correct("13-checkpoint", (checkpoint_reduce,), story="functools.reduce, preserve_rng_state=True spelled out"),
    Correct("13-checkpoint", (checkpoint_bound_lambda,), story="a bound lambda per block in a while loop"),
    Correct("13-deterministic", (deterministic_using(),), story="the solution"),
    Correct("13-deterministic", (DeterministicClass,), story="a class with __enter__/__exit__"),
    Correct("13-deterministic", (deterministic_exit_stack,), story="an ExitStack callback"),
]


def test_the_check_leaves_the_global_flags_as_it_found_them():
    before = flags()
    try:
        restore((True, True, True, False))
        assert_mistake(Mistake("13-deterministic", "not-restored", "defaults",
                               (deterministic_using(restore_fn=restore_defaults),), story="defaults"))
        assert flags() == (True, True, True, False)
    finally:
        restore(before)


# The first hint after a failure follows the cause the judge found, where the requirement's own hint does not fit it.
CAUSE_HINTS = [
    ("13-checkpoint", checkpoint_late_binding, "wrong-grads", "after the loop has ended"),
    ("13-checkpoint", checkpoint_detached, "no-param-grads", "Which blocks got no gradient?"),
    ("13-accumulate", accum_using(weight="size"), "wrong-weighting", "do they make 1?"),
    ("13-accumulate", accum_using(weight="none"), "wrong-weighting", "already a mean over its rows"),
    ("13-accumulate", accum_using(split="chunk"), "micro-batch-too-large", "chunk(4)] and the same with .split(4)"),
    ("13-accumulate", accum_using(detach=False), "wrong-return", "requires_grad"),
    ("13-accumulate", accum_using(ret="last"), "wrong-return", "or replace it?"),
    ("13-memory-formula", memory_by_modules, "wrong-params", "how many times does your loop meet it?"),
    ("13-memory-formula", memory_using(size=lambda p: p.numel()), "wrong-params", "numel() counts values"),
    ("13-memory-formula", memory_using(frozen_params=False), "wrong-params", "Does a frozen parameter still sit"),
    ("13-memory-formula", memory_using(state_on_all=True), "wrong-optimizer-state", "never updates?"),
    ("13-deterministic", deterministic_using(warn_only=True), "not-deterministic", "warn_only=True turn"),
    ("13-deterministic", deterministic_using(restore_fn=restore_without_warn_only), "not-restored",
     "when you leave it out?"),
    ("13-deterministic", deterministic_using(read=read_after_setting), "not-restored", "before or after it changes"),
    ("13-deterministic", deterministic_using(restore_fn=restore_defaults), "not-restored", "or fixed ones?"),
    ("13-deterministic", deterministic_using(restore_fn=restore_swapped), "not-restored", "does each go home?"),
]


@pytest.mark.parametrize(("task", "answer", "code", "phrase"), CAUSE_HINTS,
                         ids=[f"{t}:{c}:{p[:20]}" for t, _, c, p in CAUSE_HINTS])
def test_the_first_hint_follows_the_cause(task, answer, code, phrase):
    from harness.checks import check
    from harness.contract.failure import CheckFailed
    from harness.contract.registry import get

    before = flags()
    try:
        with pytest.raises(CheckFailed) as failure:
            check(task, answer)
    finally:
        restore(before)
    assert failure.value.code == code, str(failure.value)
    assert failure.value.hint and phrase in failure.value.hint, failure.value.hint
    assert failure.value.hint != get(task).requires[code].hint


def test_the_visible_accumulation_separates_the_divisors():
    """In every visible run the micro-batch size differs from the number of micro-batches and the last
    micro-batch is smaller, so dividing by either instead of weighting by the rows fails, each with its cause."""
    from harness.checks.lesson13.accumulate import accum_cases
    from harness.contract.case import Case

    for _, size, micro in accum_cases(Case(hidden=False)):
        count = -(-size // micro)
        assert count != micro and size % micro != 0
