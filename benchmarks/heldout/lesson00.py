"""Lesson 00 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = """
import torch
from torch import nn
from harness.checks import check, hint
from harness.env import select_device
device = select_device()
"""

ENTRIES = [
    Entry("00-make-batch", "mistake", "forgot to pass device to torch.zeros",
          "the batch is always created on the CPU, device ignored",
          "def make_batch(n, device):\n    return torch.zeros(n, 3, 8, 8)\n", ("make_batch",)),
    Entry("00-make-batch", "mistake", "built the batch on the CPU then moved it with .to(device)",
          "created on the CPU and copied to device (a transfer) instead of created directly on device",
          "def make_batch(n, device):\n    return torch.zeros(n, 3, 8, 8).to(device)\n", ("make_batch",)),
    Entry("00-make-batch", "mistake", "used channels-last shape (n, 8, 8, 3)",
          "wrong shape: channels placed last, (n, 8, 8, 3) instead of (n, 3, 8, 8)",
          "def make_batch(n, device):\n    return torch.zeros(n, 8, 8, 3, device=device)\n", ("make_batch",)),
    Entry("00-make-batch", "mistake", "asked for double precision to be safe",
          "dtype float64 instead of float32",
          "def make_batch(n, device):\n    return torch.zeros(n, 3, 8, 8, dtype=torch.float64, device=device)\n",
          ("make_batch",)),
    Entry("00-count-params", "mistake", "counted the state_dict's tensors' elements",
          "state_dict includes buffers (BatchNorm running stats) and frozen parameters",
          "def count_trainable_parameters(model):\n"
          "    return sum(t.numel() for t in model.state_dict().values())\n", ("count_trainable_parameters",)),
    Entry("00-count-params", "mistake", "summed parameters over every submodule",
          "a shared weight is counted once per module that holds it (named_modules each recurse its parameters"
          " with recurse=False, so sharing double counts)",
          "def count_trainable_parameters(model):\n"
          "    return sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False)"
          " if p.requires_grad)\n", ("count_trainable_parameters",)),
    Entry("00-count-params", "mistake", "counted the parameter tensors, not their scalars",
          "len() of the parameter list counts tensors, not scalar elements (numel)",
          "def count_trainable_parameters(model):\n"
          "    return len([p for p in model.parameters() if p.requires_grad])\n", ("count_trainable_parameters",)),
    Entry("00-count-params", "mistake", "forgot the requires_grad filter",
          "frozen parameters (requires_grad=False) are counted",
          "def count_trainable_parameters(model):\n    return sum(p.numel() for p in model.parameters())\n",
          ("count_trainable_parameters",)),
    Entry("00-accuracy", "mistake", "returned the mean tensor without .item()",
          "returns a 0-dim tensor where a Python float is asked",
          "def accuracy(logits, targets):\n    return (logits.argmax(dim=1) == targets).float().mean()\n",
          ("accuracy",)),
    Entry("00-accuracy", "mistake", "integer division of correct count by batch size",
          "floor division // gives 0 (or 1) instead of the fraction",
          "def accuracy(logits, targets):\n"
          "    return float((logits.argmax(dim=1) == targets).sum().item() // len(targets))\n", ("accuracy",)),
    Entry("00-accuracy", "mistake", "argmax over dim=0",
          "argmax over the batch dimension instead of the class dimension",
          "def accuracy(logits, targets):\n    return (logits.argmax(dim=0) == targets).float().mean().item()\n",
          ("accuracy",)),
    Entry("00-accuracy", "correct", "count correct with torch.eq and divide by numel",
          "", "def accuracy(logits, targets):\n"
          "    return torch.eq(logits.max(1).indices, targets).sum().item() / targets.numel()\n", ("accuracy",)),
    Entry("00-count-params", "correct", "dedupe parameters by id explicitly",
          "", "def count_trainable_parameters(model):\n"
          "    unique = {id(p): p for p in model.parameters(recurse=True)}\n"
          "    return int(sum(p.numel() for p in unique.values() if p.requires_grad))\n",
          ("count_trainable_parameters",)),
    Entry("00-make-batch", "correct", "torch.full with a tuple shape", "",
          "def make_batch(n, device):\n    return torch.full((n, 3, 8, 8), 0.0, device=device)\n", ("make_batch",)),
]
