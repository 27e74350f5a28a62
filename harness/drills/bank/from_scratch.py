"""Drills that rebuild a PyTorch piece from scratch and are checked against it: LayerNorm (values and gradients,
eps inside the square root, the biased variance, the normalized dimensions) and AdamW (bias correction, decay
decoupled from the gradient and scaled by the learning rate)."""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness.contract.case import Case
from harness.contract.forbidden import CallRecorder
from harness.drills.core import Drill, add
from harness.drills.support import explain

# --- LayerNorm from scratch --------------------------------------------------------------------------------------

_LN_SPECS = (  # (x shape, normalized_shape, x scale, eps)
    ((4, 6), (6,), 2.0, 1e-5),
    ((2, 3, 4, 5), (4, 5), 1.0, 1e-5),
    ((3, 8), (8,), 0.01, 1e-3),  # a small variance: where eps sits matters
)


def ln_inputs(case: Case) -> list[tuple[torch.Tensor, tuple[int, ...], torch.Tensor, torch.Tensor, float,
                                         torch.Tensor]]:
    """(x, normalized_shape, weight, bias, eps, upstream gradient) for each spec (probe and judge alike)."""
    inputs = []
    for base, (shape, normalized, scale, eps) in enumerate(_LN_SPECS):
        gen = torch.Generator().manual_seed(case.seeded(10 + base))
        x = torch.randn(shape, generator=gen) * scale + torch.randn((), generator=gen)
        weight = 1 + 0.5 * torch.randn(normalized, generator=gen)
        bias = torch.randn(normalized, generator=gen)
        inputs.append((x, normalized, weight, bias, eps, torch.randn(shape, generator=gen)))
    return inputs


def _probe_layer_norm(answer: dict, *, case: Case) -> dict:
    results, calls_seen = [], {}
    for x, normalized, weight, bias, eps, upstream in ln_inputs(case):
        leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]
        with CallRecorder() as calls:
            y = answer["layer_norm"](leaves[0], normalized, leaves[1], leaves[2], eps)
        calls_seen.update(calls.seen)
        if isinstance(y, torch.Tensor) and y.requires_grad and y.shape == upstream.shape:
            y.backward(upstream)
        results.append({"y": y, "grads": [t.grad for t in leaves]})
    return {"results": results, "calls": calls_seen}


LN_STARTER = (
    "import torch\n\n\n"
    "def layer_norm(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor, bias: torch.Tensor,\n"
    "               eps: float = 1e-5) -> torch.Tensor:\n"
    "    raise NotImplementedError\n"
)


add(
    Drill(
        id="modules-layer-norm-from-scratch",
        title="LayerNorm from scratch",
        kind="write",
        topics=("modules", "autograd"),
        difficulty=2,
        prompt="Write layer_norm(x, normalized_shape, weight, bias, eps) with the values and gradients of "
        "F.layer_norm: normalize over the last len(normalized_shape) dimensions, then scale by weight and shift by "
        "bias (both of shape normalized_shape). Use torch operations that autograd differentiates; do not call "
        "F.layer_norm, nn.LayerNorm or group_norm. (A self-check: the calls are "
        "recorded inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="layer_norm",
        starter=LN_STARTER,
        hints=("Which dimensions, which variance (divided by n or by n - 1), and where does eps go?",
               "dims = the last len(normalized_shape) dims; mean and the biased variance over them with "
               "keepdim=True; (x - mean) / sqrt(var + eps) * weight + bias."),
        probe=_probe_layer_norm,
        self_check=True,
    )
)


# --- AdamW from scratch ------------------------------------------------------------------------------------------

ADAMW_STEPS = 4
BETAS = (0.9, 0.999)
EPS = 1e-8


def adamw_setup(case: Case) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], float, float]:
    """Initial parameters, each step's gradients (one parameter's gradients are tiny, where eps matters), the
    learning rate and the weight decay (probe and judge alike)."""
    gen = torch.Generator().manual_seed(case.seeded(20))
    params = [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen)]
    grads = [[torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen) * 1e-4] for _ in range(ADAMW_STEPS)]
    lr = 0.01 * (1 + int(torch.randint(0, 4, (), generator=gen)))
    return params, grads, lr, 0.1


def _probe_adamw(answer: dict, *, case: Case) -> dict:
    params, grads, lr, weight_decay = adamw_setup(case)
    params = [p.clone().requires_grad_() for p in params]
    states = [{"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)} for p in params]
    optimizer_steps = []
    handle = register_optimizer_step_pre_hook(lambda *_: optimizer_steps.append(1))
    trace, calls_seen = [], {}
    try:
        for step, step_grads in enumerate(grads, start=1):
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            with CallRecorder() as calls:  # torch.optim's functional adamw and fused kernels run no optimizer step
                answer["adamw_step"](params, states, step, lr, BETAS, EPS, weight_decay)
            calls_seen.update(calls.seen)
            trace.append([p.detach().clone() for p in params])
    finally:
        handle.remove()
    return {"trace": trace, "optimizer_steps": len(optimizer_steps), "calls": calls_seen}


ADAMW_STARTER = (
    "import torch\n\n\n"
    "@torch.no_grad()\n"
    "def adamw_step(params, states, step, lr, betas, eps, weight_decay):\n"
    "    raise NotImplementedError\n"
)


add(
    Drill(
        id="loop-adamw-from-scratch",
        title="AdamW from scratch",
        kind="write",
        topics=("loop",),
        difficulty=2,
        prompt="Write adamw_step(params, states, step, lr, betas, eps, weight_decay): one step of AdamW, with "
        "torch.optim.AdamW's results. Each parameter's .grad holds its gradient; states[i] is a dict with the "
        "tensors \"exp_avg\" and \"exp_avg_sq\" (zeros before the first step) that you keep up to date; step "
        "counts from 1. Update the parameters in place. Do not use torch.optim. (A self-check: the calls are "
        "recorded inside your answer's own process, so its pass does not count in a mock interview.)",
        entry="adamw_step",
        starter=ADAMW_STARTER,
        hints=("Three things distinguish AdamW: the moments' bias correction, where eps goes, and a weight decay "
               "applied to the weights, not mixed into the gradient.",
               "p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²; p -= lr * m / (1 - b1^t) / "
               "(sqrt(v / (1 - b2^t)) + eps)."),
        probe=_probe_adamw,
        self_check=True,
    )
)


# --- Adam's L2 against AdamW's decay (explain) -------------------------------------------------------------------

def _decay_experiment() -> None:
    for name, make in (("Adam(weight_decay=0.1) ", torch.optim.Adam), ("AdamW(weight_decay=0.1)", torch.optim.AdamW)):
        params = [torch.tensor([1.0], requires_grad=True), torch.tensor([0.05], requires_grad=True)]
        optimizer = make(params, lr=0.01, weight_decay=0.1)
        for _ in range(10):
            for p in params:
                p.grad = torch.zeros_like(p)  # the loss no longer depends on these weights
            optimizer.step()
        print(f"{name}: 1.0 -> {params[0].item():.4f}, 0.05 -> {params[1].item():.4f} after 10 steps, lr 0.01")
    print("Adam folds the decay into the gradient and normalizes it by sqrt(v): every weight moves about lr per "
          "step, whatever its size. AdamW multiplies each weight by (1 - lr * 0.1) per step.")


add(
    explain(
        id="loop-adam-l2-or-adamw",
        title="Adam's weight_decay or AdamW's",
        topics=("loop", "finetuning"),
        difficulty=2,
        question="Two weights, 1.0 and 0.05, no longer affect the loss (their gradient is 0 from now on). With "
        "lr=0.01 and weight_decay=0.1, what do Adam and AdamW do to them over the next steps?",
        hints=("Adam's weight_decay adds wd * p to the gradient before the moments. What does Adam then do to "
               "every gradient?",
               "m / sqrt(v) of a constant gradient is about 1, whatever its size."),
        experiment=_decay_experiment,
    )
)
