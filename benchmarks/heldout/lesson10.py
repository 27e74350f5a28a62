"""Lesson 10 held-out entries (written from the exercise text only)."""

from entry import Entry

PRELUDE = '''
import math
import tempfile
from pathlib import Path
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler
from harness.budget import budget, is_grading
from harness.checkpoint import load_checkpoint
from harness.checks import check, hint
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, normalization_stats, shapes
from harness.distributed import distributed_loader, get_rank, get_world_size
from harness.env import environment_report, select_device, supported_precisions
from harness.metrics import accuracy
from harness.models import capstone_cnn
from harness.repro import seed_everything
from harness.train import EarlyStopping, evaluate, fit
seed_everything(0)
torch.set_num_threads(1)
device = select_device()
workdir = Path(tempfile.mkdtemp(prefix="lesson10-"))
train_set = shapes(budget(full=3000, grading=2000), seed=0)
val_set, test_set = shapes(500, seed=1), shapes(1000, seed=2)


def choose_precision(device_type, precisions):
    if device_type == "cpu":
        return "fp32"
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"


precision = choose_precision(device.type, supported_precisions(device))


def make_optimizer(model, *, lr, weight_decay, warmup_steps, total_steps):
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)

    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_loader(dataset, batch_size, *, seed):
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


class Standardize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, images):
        return (images - self.mean) / self.std
'''

CP = "def choose_precision(device_type, precisions):\n"
MO = "def make_optimizer(model, *, lr, weight_decay, warmup_steps, total_steps):\n"
FACTOR = '''
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
'''
TL = "def train_loader(dataset, batch_size, *, seed):\n"


def train_capstone(stats: str, val: str, load_best: bool = True) -> str:
    """The solution's train_capstone with the statistics' source, the validation set and the final load varied."""
    return f'''
def train_capstone(train_set, val_set, out_dir, config, *, resume=False, device=None, on_epoch_end=None,
                   progress=False):
    device = select_device(device)
    seed_everything(config["seed"])
    model = nn.Sequential(Standardize(*normalization_stats({stats})),
                          capstone_cnn(len(train_set.classes), config["width"])).to(device)
    loader = train_loader(train_set, config["batch_size"], seed=config["seed"])
    val_loader = distributed_loader({val}, 256, shuffle=False)
    total_steps = config["epochs"] * len(loader)
    optimizer, scheduler = make_optimizer(model, lr=config["lr"], weight_decay=config["weight_decay"],
                                          warmup_steps=round(config["warmup_fraction"] * total_steps),
                                          total_steps=total_steps)
    precision = config["precision"]
    history = fit(model, loader, val_loader, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer,
                  epochs=config["epochs"], precision=precision, max_grad_norm=config["max_grad_norm"],
                  scheduler=scheduler, scheduler_interval="step", metrics={{"accuracy": accuracy}},
                  early_stopping=EarlyStopping("val_accuracy", mode="max", patience=config["patience"]),
                  checkpoint_dir=out_dir, resume=resume, on_epoch_end=on_epoch_end, progress=progress)
    {"load_checkpoint(Path(out_dir) / 'best.pt', model=model)" if load_best else "pass"}
    return {{"model": model, "history": history, "precision": precision, "checkpoint_dir": Path(out_dir)}}
'''


HELD_OUT = '''
CONFIG = dict(epochs=budget(full=8, grading=6), batch_size=32, lr=1e-2, weight_decay=0.05, warmup_fraction=0.1,
              max_grad_norm=1.0, patience=3, width=budget(full=16, grading=8), seed=0, precision=precision)
run = None
run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
'''

ENTRIES = [
    Entry("10-precision", "mistake", "bf16 wherever bf16 autocast runs, CPU included",
          "returns bf16 on a CPU whose bf16 autocast is emulated; the text says fp32 on a CPU", CP + '''
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"
''', ("choose_precision",)),
    Entry("10-precision", "mistake", "fp16 on any GPU with fp16 autocast",
          "fp16 also on an Apple GPU (mps), where the text allows it only on CUDA", CP + '''
    if device_type == "cpu":
        return "fp32"
    if precisions["bf16_autocast"]:
        return "bf16"
    if precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    return "fp32"
''', ("choose_precision",)),
    Entry("10-precision", "mistake", "fp16 checked before bf16",
          "prefers fp16 over bf16 on a GPU that supports both (an H100)", CP + '''
    if device_type == "cpu":
        return "fp32"
    if device_type == "cuda" and precisions["fp16_autocast"] and precisions["grad_scaler"]:
        return "fp16"
    if precisions["bf16_autocast"]:
        return "bf16"
    return "fp32"
''', ("choose_precision",)),
    Entry("10-precision", "mistake", "did not require the GradScaler for fp16",
          "fp16 chosen where the GradScaler does not work", CP + '''
    if device_type == "cpu":
        return "fp32"
    if precisions["bf16_autocast"]:
        return "bf16"
    if device_type == "cuda" and precisions["fp16_autocast"]:
        return "fp16"
    return "fp32"
''', ("choose_precision",)),
    Entry("10-optimizer", "mistake", "frozen parameters put in the groups",
          "no requires_grad filter: frozen parameters are in the optimizer", MO + '''
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
''' + FACTOR, ("make_optimizer",)),
    Entry("10-optimizer", "mistake", "no decay only for parameters named bias",
          "norm scales (ndim 1, not named bias) are decayed", MO + '''
    decay = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith("bias")]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and n.endswith("bias")]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
''' + FACTOR, ("make_optimizer",)),
    Entry("10-optimizer", "mistake", "Adam with weight_decay",
          "torch.optim.Adam instead of AdamW (L2 added to the gradient, not decoupled decay)", MO + '''
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    optimizer = torch.optim.Adam([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=lr)
''' + FACTOR, ("make_optimizer",)),
    Entry("10-optimizer", "mistake", "warm-up ramp with min((s + 1) / W, 1)",
          "ZeroDivisionError when warmup_steps is 0 (no warm-up at all)", MO + '''
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)

    def factor(step):
        ramp = min(1.0, (step + 1) / warmup_steps)
        progress = min(1.0, max(0, step - warmup_steps) / max(1, total_steps - warmup_steps))
        return ramp * 0.5 * (1.0 + math.cos(math.pi * progress))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
''', ("make_optimizer",)),
    Entry("10-optimizer", "mistake", "cosine without the clamp",
          "no min(1, progress): after total_steps the lr climbs back up", MO + '''
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)

    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / max(1, total_steps - warmup_steps)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
''', ("make_optimizer",)),
    Entry("10-train-loader", "mistake", "kept the last partial batch",
          "drop_last not set: the last incomplete batch is kept", TL + '''
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
''', ("train_loader",)),
    Entry("10-train-loader", "mistake", "plain shuffling loader",
          "no DistributedSampler: every rank reads the whole dataset, and the order comes from the global RNG", TL + '''
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
''', ("train_loader",)),
    Entry("10-train-loader", "mistake", "workers for speed",
          "num_workers=2: worker processes where the text says none", TL + '''
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, num_workers=2)
''', ("train_loader",)),
    Entry("10-train-loader", "mistake", "seed forgotten in the sampler",
          "DistributedSampler's default seed 0: the order ignores seed", TL + '''
    sampler = DistributedSampler(dataset, num_replicas=get_world_size(), rank=get_rank(), shuffle=True)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
''', ("train_loader",)),
    Entry("10-train", "mistake", "normalisation statistics over train and validation images",
          "leakage: validation images pooled into the Standardize statistics",
          train_capstone("torch.cat([train_set.tensors[0], val_set.tensors[0]])", "val_set"), ("train_capstone",)),
    Entry("10-train", "mistake", "validated on the notebook's test_set",
          "name resolution: the function reads the notebook global test_set instead of its val_set argument",
          train_capstone("train_set.tensors[0]", "test_set"), ("train_capstone",)),
    Entry("10-train", "mistake", "returned the last epoch's model",
          "best.pt is never loaded: the model returned has the last epoch's weights",
          train_capstone("train_set.tensors[0]", "val_set", load_best=False), ("train_capstone",)),
    Entry("10-held-out", "mistake", "validated on the test set while tuning",
          "test set used for choosing: the run validates (early stopping, best.pt) on test_set",
          train_capstone("train_set.tensors[0]", "val_set") + HELD_OUT
          + "run = train_capstone(train_set, test_set, run_dir, CONFIG)\n", ("run",)),
    Entry("10-precision", "correct", "lookup table of rules", "", CP + '''
    rules = [(device_type != "cpu" and precisions.get("bf16_autocast", False), "bf16"),
             (device_type == "cuda" and precisions.get("fp16_autocast") and precisions.get("grad_scaler"), "fp16")]
    return next((name for ok, name in rules if ok), "fp32")
''', ("choose_precision",)),
    Entry("10-optimizer", "correct", "LambdaLR with a functools.partial factor and filter()", "", '''
import functools


def _factor(step, warmup, total):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def make_optimizer(model, *, lr, weight_decay, warmup_steps, total_steps):
    trainable = list(filter(lambda p: p.requires_grad, model.parameters()))
    groups = [dict(params=[p for p in trainable if p.dim() > 1], weight_decay=weight_decay),
              dict(params=[p for p in trainable if p.dim() <= 1], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=lr)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, functools.partial(_factor, warmup=warmup_steps,
                                                                        total=total_steps))
''', ("make_optimizer",)),
]
