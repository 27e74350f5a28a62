"""Lesson 13 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import contextlib
import os
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from harness.checks import check, hint
from harness.env import select_device
from harness.repro import seed_everything
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
seed_everything(0)
device = select_device()
'''

TM = "def training_memory(model, optimizer):\n"
AF = "def activation_formula(batch_size, widths, dtype):\n"
AS = "def accumulation_step(model, batch, loss_fn, optimizer, micro_batch_size):\n"
CF = "def checkpointed_forward(blocks, x):\n"
DT = "@contextlib.contextmanager\ndef deterministic():\n"
DT_BEFORE = '''
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
'''

ENTRIES = [
    Entry("13-memory-formula", "mistake", "params counted over trainable ones only",
          "frozen parameters left out of params", TM + '''
    trained = [p for p in model.parameters() if p.requires_grad]
    size = sum(p.numel() * p.element_size() for p in trained)
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    return {"params": size, "grads": size, "optimizer": copies * size, "total": (2 + copies) * size}
''', ("training_memory",)),
    Entry("13-memory-formula", "mistake", "4 bytes per element everywhere",
          "assumes float32: a bfloat16 parameter is counted at 4 bytes instead of 2", TM + '''
    params = list(model.parameters())
    trained = [p for p in params if p.requires_grad]
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    m = {"params": 4 * sum(p.numel() for p in params), "grads": 4 * sum(p.numel() for p in trained)}
    m["optimizer"] = copies * m["grads"]
    m["total"] = sum(m.values())
    return m
''', ("training_memory",)),
    Entry("13-memory-formula", "mistake", "walked every module's own parameters",
          "a tied weight is counted once per module holding it", TM + '''
    params = [p for m in model.modules() for p in m.parameters(recurse=False)]
    trained = [p for p in params if p.requires_grad]
    size = lambda ts: sum(p.numel() * p.element_size() for p in ts)
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    m = {"params": size(params), "grads": size(trained), "optimizer": copies * size(trained)}
    m["total"] = sum(m.values())
    return m
''', ("training_memory",)),
    Entry("13-memory-formula", "mistake", "optimizer state over every parameter",
          "optimizer state counted for frozen parameters too", TM + '''
    params = list(model.parameters())
    trained = [p for p in params if p.requires_grad]
    size = lambda ts: sum(p.numel() * p.element_size() for p in ts)
    copies = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    m = {"params": size(params), "grads": size(trained), "optimizer": copies * size(params)}
    m["total"] = sum(m.values())
    return m
''', ("training_memory",)),
    Entry("13-activation-formula", "mistake", "counted the last Linear's output too",
          "sum(widths) instead of sum(widths[:-1]): the final output is not saved", AF + '''
    return batch_size * sum(widths) * torch.empty((), dtype=dtype).element_size()
''', ("activation_formula",)),
    Entry("13-activation-formula", "mistake", "ReLU output and next Linear input counted separately",
          "a tensor saved by two operations (ReLU's output = next Linear's input) counted twice", AF + '''
    element = torch.empty((), dtype=dtype).element_size()
    return batch_size * (sum(widths[:-1]) + sum(widths[1:-1])) * element
''', ("activation_formula",)),
    Entry("13-activation-formula", "mistake", "bits / 8 from finfo",
          "returns a float (bits / 8 is true division), not an int", AF + '''
    return batch_size * sum(widths[:-1]) * torch.finfo(dtype).bits / 8
''', ("activation_formula",)),
    Entry("13-activation-formula", "mistake", "hard-coded 4 bytes",
          "element size fixed at float32's 4 bytes whatever the dtype", AF + '''
    return 4 * batch_size * sum(widths[:-1])
''', ("activation_formula",)),
    Entry("13-accumulate", "mistake", "divided each loss by the number of micro-batches",
          "equal weights: a smaller last micro-batch is over-weighted", AS + '''
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    xs, ys = inputs.split(micro_batch_size), targets.split(micro_batch_size)
    total = torch.zeros(())
    for x, y in zip(xs, ys):
        loss = loss_fn(model(x), y) / len(xs)
        loss.backward()
        total += loss.detach()
    optimizer.step()
    return total
''', ("accumulation_step",)),
    Entry("13-accumulate", "mistake", "torch.chunk with micro_batch_size",
          "chunk(n) makes n pieces, not pieces of n rows: forwards on more rows than micro_batch_size", AS + '''
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for x, y in zip(inputs.chunk(micro_batch_size), targets.chunk(micro_batch_size)):
        loss = loss_fn(model(x), y) * (len(x) / len(inputs))
        loss.backward()
        total += loss.detach()
    optimizer.step()
    return total
''', ("accumulation_step",)),
    Entry("13-accumulate", "mistake", "returned .item()",
          "returns a Python float instead of a detached 0-dim tensor", AS + '''
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):
        loss = loss_fn(model(x), y) * (len(x) / len(inputs))
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
''', ("accumulation_step",)),
    Entry("13-accumulate", "mistake", "step inside the loop",
          "optimizer.step() after every micro-batch instead of once", AS + '''
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):
        loss = loss_fn(model(x), y) * (len(x) / len(inputs))
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total
''', ("accumulation_step",)),
    Entry("13-accumulate", "mistake", "returned the mean of micro-batch means",
          "the gradient is weighted right, but the returned loss averages micro-batch means equally", AS + '''
    inputs, targets = batch
    model.train()
    optimizer.zero_grad(set_to_none=True)
    means = []
    for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)):
        loss = loss_fn(model(x), y)
        (loss * (len(x) / len(inputs))).backward()
        means.append(loss.detach())
    optimizer.step()
    return torch.stack(means).mean()
''', ("accumulation_step",)),
    Entry("13-checkpoint", "mistake", "one checkpoint around the loop",
          "a single checkpoint for all blocks: backward rebuilds every activation at once", CF + '''
    def run_all(h):
        for block in blocks:
            h = block(h)
        return h
    return checkpoint(run_all, x, use_reentrant=False)
''', ("checkpointed_forward",)),
    Entry("13-checkpoint", "mistake", "use_reentrant=True",
          "reentrant checkpoint with an input that does not require grad: the parameters get no gradients", CF + '''
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=True)
    return x
''', ("checkpointed_forward",)),
    Entry("13-checkpoint", "mistake", "preserve_rng_state=False for speed",
          "the recomputation draws new dropout masks: gradients differ from the plain loop", CF + '''
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
    return x
''', ("checkpointed_forward",)),
    Entry("13-checkpoint", "mistake", "lambda wrapper in the loop",
          "late binding: the lambda reads `block` at backward time, so every recomputation runs the last block",
          CF + '''
    for block in blocks:
        x = checkpoint(lambda h: block(h), x, use_reentrant=False)
    return x
''', ("checkpointed_forward",)),
    Entry("13-deterministic", "mistake", "no try/finally",
          "flags not restored when the block raises", DT + DT_BEFORE + '''
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
''', ("deterministic",)),
    Entry("13-deterministic", "mistake", "warn_only not restored",
          "use_deterministic_algorithms(before) without warn_only: warn_only reset to False", DT + DT_BEFORE + '''
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
''', ("deterministic",)),
    Entry("13-deterministic", "mistake", "reset to PyTorch's defaults",
          "restores hard-coded defaults (False) instead of the values before the block", DT + '''
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = False
''', ("deterministic",)),
    Entry("13-deterministic", "mistake", "caught the exception to restore",
          "the exception is swallowed (except without re-raise)", DT + DT_BEFORE + '''
    try:
        yield
    except Exception:
        pass
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
''', ("deterministic",)),
    Entry("13-deterministic", "mistake", "warn_only=True inside",
          "inside the block determinism only warns (warn_only=True) instead of raising", DT + '''
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]
''', ("deterministic",)),
    Entry("13-memory-formula", "correct", "dtype.itemsize and an id-keyed dict", "", TM + '''
    unique = {id(p): p for p in model.parameters()}.values()
    nbytes = lambda ps: int(sum(p.numel() * p.dtype.itemsize for p in ps))
    trainable = [p for p in unique if p.requires_grad]
    per = dict(sgd=0, momentum=1, adam=2, adamw=2)
    out = dict(params=nbytes(unique), grads=nbytes(trainable), optimizer=per[optimizer] * nbytes(trainable))
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out
''', ("training_memory",)),
    Entry("13-accumulate", "correct", "index ranges and reduction by shape", "", AS + '''
    inputs, targets = batch
    n = inputs.shape[0]
    model.train()
    optimizer.zero_grad()
    acc = None
    for start in range(0, n, micro_batch_size):
        sl = slice(start, min(start + micro_batch_size, n))
        part = loss_fn(model(inputs[sl]), targets[sl]) * (inputs[sl].shape[0] / n)
        part.backward()
        acc = part.detach() if acc is None else acc + part.detach()
    optimizer.step()
    return acc
''', ("accumulation_step",)),
    Entry("13-checkpoint", "correct", "bound __call__ and functools.partial", "", '''
import functools
checkpoint_block = functools.partial(checkpoint, use_reentrant=False)


def checkpointed_forward(blocks, x):
    for block in blocks:
        x = checkpoint_block(block.__call__, x)
    return x
''', ("checkpointed_forward",)),
    Entry("13-deterministic", "correct", "ExitStack callbacks", "", DT + '''
    with contextlib.ExitStack() as stack:
        stack.callback(torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled(),
                       warn_only=torch.is_deterministic_algorithms_warn_only_enabled())
        stack.callback(setattr, torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
        stack.callback(setattr, torch.backends.cudnn, "deterministic", torch.backends.cudnn.deterministic)
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
        yield
''', ("deterministic",)),
]
