"""Drills on mixed precision and gradient clipping (CPU bf16 autocast and the CPU GradScaler).

Every probe runs the answer on a model and batches drawn from the case, records what the optimizer saw at each
step (`StepRecorder`: the parameters before the step and the gradients it stepped with) and what the scaler and
autocast did; every judge rebuilds the same batches and, from the recorded parameters, recomputes the gradient
the optimizer should have seen (bf16 autocast forward, backward outside it, unscaled, clipped).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.contract.case import Case
from harness.contract.instruments import AutocastProbe, ForwardRecorder, HostSyncCounter, RecordingScaler, StepRecorder
from harness.drills.core import Drill, add
from harness.drills.support import case_generator, explain


def _init_linear(layer: nn.Linear, case: Case, base: int) -> nn.Linear:
    """Weights drawn from the case (probe and judge draw the same)."""
    gen = case_generator(case, base)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.3)
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * 0.1)
    return layer


def probe_model(case: Case, base: int) -> AutocastProbe:
    """An `AutocastProbe` (a linear layer recording autocast and freshness) seeded from the case and `base`."""
    model = AutocastProbe()
    _init_linear(model.linear, case, base)
    return model


def regression_batch(case: Case, base: int, rows: int = 16, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (rows, 8) times `scale` and targets twice their first column plus noise (probe and judge alike)."""
    gen = case_generator(case, base)
    x = torch.randn(rows, 8, generator=gen) * scale
    return x, x[:, :1] * 2.0 + torch.randn(rows, 1, generator=gen) * scale


def case_max_norm(case: Case, base: int = 50) -> float:
    """The case's clipping threshold, in [0.5, 2.0], rounded to three decimals."""
    return round(0.5 + float(torch.rand((), generator=case_generator(case, base))) * 1.5, 3)


def _step_dicts(records: list) -> list[dict]:
    return [{"grads": r.grads, "params": r.params, "lrs": r.lrs} for r in records]


# ---------------------------------------------------------------------------------------------------------------
# amp-train-step and clipping-under-amp: one step, the scaler's calls, the gradient stepped with, an inf step


def _probe_amp_step(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = probe_model(case, 0)
    gen = case_generator(case, 9)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)  # what the previous step left behind
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = RecordingScaler()
    model.eval()  # as an evaluation between epochs leaves it: the step must switch training mode back on
    with StepRecorder(optimizer) as steps, ForwardRecorder(model) as forwards:
        batch = regression_batch(case, 1, scale=20.0)
        loss = amp_step(model, batch, nn.MSELoss(), optimizer, scaler, case_max_norm(case))
    # a step whose gradients are not finite must be skipped, and the scale must back off
    inf_model = probe_model(case, 2)
    inf_model.linear.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    inf_optimizer = torch.optim.SGD(inf_model.parameters(), lr=0.05)
    inf_scaler = RecordingScaler()
    with StepRecorder(inf_optimizer) as inf_steps:
        amp_step(inf_model, regression_batch(case, 3), nn.MSELoss(), inf_optimizer, inf_scaler, case_max_norm(case))
    return {"forward_autocast": model.forward_autocast, "backward_autocast": model.backward_autocast,
            "fresh": model.fresh_at_backward, "calls": scaler.calls, "steps": _step_dicts(steps.records), "loss": loss,
            "training": [r.training for r in forwards.records],
            "inf_steps": len(inf_steps.records), "inf_weight": inf_model.linear.weight.detach(),
            "inf_scale": float(inf_scaler.get_scale())}


add(
    Drill(
        id="amp-train-step",
        self_check=True,
        title="An AMP training step with a GradScaler and clipping",
        kind="write",
        topics=("amp", "clipping"),
        difficulty=2,
        prompt="Write amp_step(model, batch, loss_fn, optimizer, scaler, max_norm): one training step with "
        "bf16 autocast on the CPU (torch.autocast('cpu', dtype=torch.bfloat16)), a GradScaler, and gradient "
        "clipping to max_norm. It must skip steps whose gradients are not finite, and return the loss as a "
        "detached tensor. The model's .grad may still hold the previous step's gradients, and the model may "
        "arrive in eval mode (after an evaluation): the step runs in training mode.",
        entry="amp_step",
        starter="import torch\n\n\ndef amp_step(model, batch, loss_fn, optimizer, scaler, max_norm):\n"
        "    raise NotImplementedError\n",
        hints=("Autocast covers forward and loss only; the scaler wraps backward, step and update.",
               "model.train(); zero_grad; autocast(forward, loss); scaler.scale(loss).backward(); "
               "scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt); scaler.update()"),
        probe=_probe_amp_step,
        nonfinite=("inf_weight",),
    )
)


def _probe_clip_under_amp(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = probe_model(case, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    with StepRecorder(optimizer) as steps:
        amp_step(model, regression_batch(case, 5, scale=50.0), nn.MSELoss(), optimizer, scaler, case_max_norm(case))
    return {"steps": _step_dicts(steps.records)}


# ---------------------------------------------------------------------------------------------------------------
# clipping-with-accumulation


ACC_SETTINGS = ((30.0, 1.0), (1.0, 1e6))  # (input scale, max_norm): clipping decides; the loss division decides


def clipping_micro_batches(case: Case, scale: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three micro-batches of 4 rows of a regression batch, inputs and targets times `scale`."""
    x, y = regression_batch(case, 6, rows=12)
    return list(zip((x * scale).split(4), (y * scale).split(4), strict=True))


def stale_grads(case: Case) -> list[torch.Tensor]:
    """The gradients a previous step left on the probe model's weight (1, 8) and bias (1,)."""
    gen = case_generator(case, 7)
    return [torch.randn(1, 8, generator=gen) * 3, torch.randn(1, generator=gen) * 3]


def _probe_accumulate(answer: dict, *, case: Case) -> dict:
    accumulate = answer["accumulate_and_clip"]
    runs = []
    for scale, max_norm in ACC_SETTINGS:
        model = _init_linear(nn.Linear(8, 1), case, 8)
        for p, stale in zip(model.parameters(), stale_grads(case), strict=True):
            p.grad = stale.clone()  # what the previous step left behind
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: only observe the gradients
        with StepRecorder(optimizer) as steps:
            accumulate(model, clipping_micro_batches(case, scale), nn.MSELoss(), optimizer, max_norm)
        runs.append(_step_dicts(steps.records))
    return {"runs": runs}


add(
    Drill(
        id="clipping-with-accumulation",
        title="Clipping with gradient accumulation",
        kind="write",
        topics=("clipping", "loop"),
        difficulty=2,
        prompt="Write accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm): one optimizer step "
        "from a list of micro-batches, equivalent to one big batch (mean loss), with the gradient norm clipped to "
        "max_norm. The model's .grad may hold the previous step's gradients when it is called.",
        entry="accumulate_and_clip",
        starter="import torch\n\n\ndef accumulate_and_clip(model, micro_batches, loss_fn, optimizer, max_norm):\n"
        "    raise NotImplementedError\n",
        hints=("The clip threshold applies to the gradient the optimizer steps with: the whole group's.",
               "zero_grad first; divide each micro-batch loss by len(micro_batches), backward each, then clip once "
               "and step once."),
        probe=_probe_accumulate,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# amp-skipped-steps: report whether the scaler skipped the step


_SKIP_BATCHES = 8


def skip_plan(case: Case) -> list[bool]:
    """Which batches overflow once scaled (two of batches 2..7; 0 and 1 are fine, so the scale grows after them)."""
    picks = torch.randperm(_SKIP_BATCHES - 2, generator=case_generator(case, 20))[:2] + 2
    return [i in picks.tolist() for i in range(_SKIP_BATCHES)]


def _skip_batches(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    batches = []
    for i, huge in enumerate(skip_plan(case)):
        x, y = regression_batch(case, 21 + i, rows=8)
        # a loss near 1e36: finite in float32, infinite once multiplied by the scale
        batches.append((x * 1e18, y) if huge else (x, y))
    return batches


def _probe_skipped(answer: dict, *, case: Case) -> dict:
    amp_step = answer["amp_step"]
    model = _init_linear(nn.Linear(8, 1), case, 22)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)
    returned, stepped = [], []
    with StepRecorder(optimizer) as steps:
        for batch in _skip_batches(case):
            before = len(steps.records)
            returned.append(amp_step(model, batch, nn.MSELoss(), optimizer, scaler))
            stepped.append(len(steps.records) - before)
    return {"returned": returned, "stepped": stepped}


add(
    Drill(
        id="amp-skipped-steps",
        title="Did the GradScaler skip this step?",
        kind="write",
        topics=("amp",),
        difficulty=2,
        prompt="Write amp_step(model, batch, loss_fn, optimizer, scaler) -> bool: one bf16-autocast training step "
        "with a GradScaler (no clipping) that returns True when the optimizer step was applied and False when the "
        "scaler skipped it because the scaled gradients were not finite (a scheduler is then not stepped). The "
        "scaler may grow its scale after a run of good steps (growth_interval).",
        entry="amp_step",
        starter="import torch\n\n\ndef amp_step(model, batch, loss_fn, optimizer, scaler):\n"
        "    raise NotImplementedError\n",
        hints=("scaler.step(optimizer) skips silently; what does scaler.update() do to the scale after a skip?",
               "Read scaler.get_scale() before update(); after a skip update() multiplies it by backoff_factor "
               "(0.5), after growth_interval good steps by growth_factor (2)."),
        probe=_probe_skipped,
    )
)


LOSS_BATCHES = 3  # three batches: a bf16 loss that lands near the float32 one by chance cannot do it three times


def fp32_loss_classifier(case: Case, i: int) -> nn.Linear:
    """The `i`-th seeded linear classifier (16 features, 10 classes) of the float32-loss drill."""
    gen = case_generator(case, 30 + 2 * i)
    layer = nn.Linear(16, 10)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(10, 16, generator=gen))
        layer.bias.copy_(torch.randn(10, generator=gen))
    return layer


def class_batch(case: Case, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `i`-th batch of the float32-loss drill: 64 inputs of 16 features and labels in [0, 10)."""
    gen = case_generator(case, 31 + 2 * i)
    return torch.randn(64, 16, generator=gen), torch.randint(0, 10, (64,), generator=gen)


def _probe_loss_fp32(answer: dict, *, case: Case) -> dict:
    losses, autocast = [], []
    for i in range(LOSS_BATCHES):
        model = fp32_loss_classifier(case, i)
        x, y = class_batch(case, i)
        with ForwardRecorder(model) as forwards:
            losses.append(answer["smoothed_loss"](model, x, y))
        autocast += [r.autocast for r in forwards.records]
    return {"losses": losses, "autocast": autocast}


LOSS_STARTER = '''import torch


def smoothed_loss(model, x, targets, smoothing=0.1):
    """Symptom: this loss differs from the float32 one by ~1e-2 and training on it stalls early."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        log_probs = logits.log_softmax(dim=-1)
        nll = -log_probs.gather(1, targets[:, None]).squeeze(1)
        uniform = -log_probs.mean(dim=-1)
        loss = ((1 - smoothing) * nll + smoothing * uniform).mean()
    return loss
'''


add(
    Drill(
        id="amp-loss-in-fp32",
        title="Bug hunt: a hand-written loss under bf16 autocast",
        kind="bughunt",
        topics=("amp",),
        difficulty=2,
        prompt="This label-smoothed cross-entropy runs under bf16 autocast and its value is off by about 1e-2 "
        "from the float32 one. Keep the forward pass in bf16 and make the loss exact in float32.",
        entry="smoothed_loss",
        starter=LOSS_STARTER,
        hints=("Under CPU autocast, which dtype do log_softmax and mean produce on bf16 logits?",
               "End the autocast block after model(x) and compute the loss from logits.float()."),
        probe=_probe_loss_fp32,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# amp-loop-three-bugs (difficulty 3)


LOOP_EPOCHS, LOOP_BATCHES, LOOP_MAX_LR = 3, 4, 0.05


def loop_batches(case: Case) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The AMP loop's `LOOP_BATCHES` regression batches of 8 rows, scaled by 10."""
    return [regression_batch(case, 40 + i, rows=8, scale=10.0) for i in range(LOOP_BATCHES)]


def onecycle(optimizer: torch.optim.Optimizer, total: int) -> torch.optim.lr_scheduler.OneCycleLR:
    """The AMP loop's schedule: OneCycleLR to `LOOP_MAX_LR` over `total` steps."""
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LOOP_MAX_LR, total_steps=total)


def _probe_amp_loop(answer: dict, *, case: Case) -> dict:
    model = probe_model(case, 41)
    optimizer = torch.optim.SGD(model.parameters(), lr=LOOP_MAX_LR, momentum=0.9)
    scheduler = onecycle(optimizer, LOOP_EPOCHS * LOOP_BATCHES)
    scaler = RecordingScaler()
    with StepRecorder(optimizer) as steps:
        losses = answer["train"](model, loop_batches(case), optimizer, scheduler, scaler, nn.MSELoss(),
                                 LOOP_EPOCHS, case_max_norm(case))
    return {"forward_autocast": model.forward_autocast, "backward_autocast": model.backward_autocast,
            "steps": _step_dicts(steps.records), "losses": losses}


LOOP_STARTER = '''import torch


def train(model, batches, optimizer, scheduler, scaler, loss_fn, epochs, max_norm):
    """Mixed-precision training: bf16 autocast on the CPU, a GradScaler, gradient clipping to max_norm.

    scheduler is a OneCycleLR built with total_steps = epochs * len(batches).
    Returns the loss of every step, as one tensor.
    Symptoms: the loss barely moves, the learning rate hardly leaves its starting value,
    and the gradient norms the optimizer sees are far below max_norm.
    """
    losses = []
    for epoch in range(epochs):
        model.train()
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                output = model(x)
                loss = loss_fn(output, y)
                scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.detach())
        scheduler.step()
    return torch.stack(losses)
'''


add(
    Drill(
        id="amp-loop-three-bugs",
        self_check=True,
        title="Bug hunt: an AMP training loop with three bugs",
        kind="bughunt",
        topics=("amp", "clipping", "schedulers"),
        difficulty=3,
        prompt="train(model, batches, optimizer, scheduler, scaler, loss_fn, epochs, max_norm) trains with bf16 "
        "autocast on the CPU, a GradScaler, gradient clipping to max_norm and a OneCycleLR built with "
        "total_steps = epochs * len(batches). The run goes wrong in three ways: the logged learning rate hardly "
        "leaves its starting value for the whole run, the gradient norms the optimizer steps with stay far below "
        "max_norm even on batches whose true gradient norm is larger, and a backward hook finds autocast still "
        "enabled while the gradients are computed. Three bugs cause this; fix all three (the check reports the "
        "first problem it observes).",
        entry="train",
        starter=LOOP_STARTER,
        hints=("One bug is about where backward runs, one about what clip_grad_norm_ sees, one about how often "
               "the scheduler steps.",
               "backward outside the with block; unscale_ before clip_grad_norm_; OneCycleLR's total_steps counts "
               "batches, so step it after every optimizer step."),
        probe=_probe_amp_loop,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# clipping-total-norm: log the norm clip_grad_norm_ returns


def norm_model(case: Case) -> nn.Sequential:
    """A small Tanh MLP whose parameters hold seeded gradients (twice a normal draw), to clip."""
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    gen = case_generator(case, 60)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 2
    return model


def _probe_total_norm(answer: dict, *, case: Case) -> dict:
    model, max_norm = norm_model(case), case_max_norm(case, 61)
    with HostSyncCounter() as syncs:
        norm = answer["clip_and_norm"](model, max_norm)
    return {"norm": norm, "grads": [p.grad for p in model.parameters()], "syncs": syncs.calls}


add(
    Drill(
        id="clipping-total-norm",
        title="Log the gradient norm you clip",
        kind="write",
        topics=("clipping", "debugging"),
        difficulty=1,
        prompt="Write clip_and_norm(model, max_norm): clip the model's gradients in place to a total L2 norm of "
        "max_norm and return the total norm BEFORE clipping, as a tensor (the logger reads it every 100 steps: no "
        "host sync here).",
        entry="clip_and_norm",
        starter="import torch\n\n\ndef clip_and_norm(model, max_norm):\n    raise NotImplementedError\n",
        hints=("Read the documentation of torch.nn.utils.clip_grad_norm_: what does it return?",
               "return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"),
        probe=_probe_total_norm,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# clipping-per-group


def per_group_model(case: Case) -> nn.Sequential:
    """A small ReLU MLP whose parameters hold seeded gradients (three times a normal draw), to clip per group."""
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
    gen = case_generator(case, 70)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen) * 3
    return model


def group_optimizer(model: nn.Sequential, case: Case) -> torch.optim.Optimizer:
    """SGD with one group per linear layer of `model`, each with its own lr and `max_norm` (the second 4x the first)."""
    small = round(0.2 + float(torch.rand((), generator=case_generator(case, 71))) * 0.5, 3)
    return torch.optim.SGD([
        {"params": list(model[0].parameters()), "lr": 0.01, "max_norm": small},
        {"params": list(model[2].parameters()), "lr": 0.1, "max_norm": small * 4},
    ])


def _probe_per_group(answer: dict, *, case: Case) -> dict:
    model = per_group_model(case)
    optimizer = group_optimizer(model, case)
    norms = answer["clip_per_group"](optimizer)
    return {"norms": norms, "grads": [p.grad for p in model.parameters()]}


add(
    Drill(
        id="clipping-per-group",
        title="Clip each parameter group to its own threshold",
        kind="write",
        topics=("clipping", "finetuning"),
        difficulty=2,
        prompt="When fine-tuning, the backbone and the new head live in separate optimizer param groups, and each "
        "group carries its own threshold under the key 'max_norm'. Write clip_per_group(optimizer): clip each "
        "group's gradients (in place) to its own max_norm, and return the list of the groups' total norms "
        "before clipping (tensors).",
        entry="clip_per_group",
        starter="import torch\n\n\ndef clip_per_group(optimizer):\n    raise NotImplementedError\n",
        hints=("optimizer.param_groups is a list of dicts; extra keys you add to a group stay there.",
               "for group in optimizer.param_groups: clip_grad_norm_(group['params'], group['max_norm'])"),
        probe=_probe_per_group,
    )
)


# ---------------------------------------------------------------------------------------------------------------
# explain drills


def _why_scaler_experiment() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        info = torch.finfo(dtype)
        tiny = torch.tensor(1e-8).to(dtype).item()
        print(f"{str(dtype):15s} max {info.max:.3g}, smallest normal {info.tiny:.3g}, 1e-8 becomes {tiny:.3g}")
    print("fp16's narrow range flushes small gradients to zero: the scaler multiplies the loss to keep them. "
          "bf16 has fp32's range, so it needs no scaler.")


add(
    explain(
        id="amp-why-scaler",
        title="When does mixed precision need a GradScaler?",
        topics=("amp",),
        difficulty=2,
        question="Which mixed-precision recipe needs a GradScaler to train reliably?",
        hints=("Compare the exponent bits of fp16 and bf16.",
               "fp16 underflows below ~6e-8; bf16 has fp32's exponent range."),
        experiment=_why_scaler_experiment,
    )
)


def _why_clip_rnn_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    rnn = nn.RNN(1, 32, batch_first=True)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(3.0)
    x = torch.randn(4, 100, 1, generator=gen)
    out, _ = rnn(x)
    out[:, -1].sum().backward()
    print(f"gradient norm of a 100-step RNN with a large recurrent matrix: {rnn.weight_hh_l0.grad.norm():.3g}")
    print("the gradient is a product of 100 Jacobians: it explodes (or vanishes) geometrically with length.")


add(
    explain(
        id="clipping-why-rnn",
        title="Why clip gradients in sequence models?",
        topics=("clipping", "sequences"),
        difficulty=1,
        question="Why are recurrent models usually trained with gradient clipping?",
        hints=("Think about what the chain rule does over 100 time steps.",
               "Repeated multiplication by a matrix with norm > 1."),
        experiment=_why_clip_rnn_experiment,
    )
)


def _autocast_dtypes_experiment() -> None:
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=gen), torch.randn(8, 8, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = y + x
        print(f"inside autocast: y = x @ w is {y.dtype}; z = y + x is {z.dtype}")
    print("matmul is on autocast's lower-precision list; add is not: it follows type promotion (bf16 + fp32 -> fp32)")


add(
    explain(
        id="amp-autocast-op-dtypes",
        title="Which dtype does each op produce under autocast?",
        topics=("amp",),
        difficulty=2,
        question="x and w are float32. Inside torch.autocast('cpu', dtype=torch.bfloat16) you compute y = x @ w "
        "and then z = y + x. What are the dtypes of y and z?",
        hints=("Autocast casts only the ops on its lists; the rest keep ordinary type promotion.",
               "matmul: lower-precision list. add: no list, promotion rules."),
        experiment=_autocast_dtypes_experiment,
    )
)


def _master_weights_experiment() -> None:
    for dtype in (torch.bfloat16, torch.float32):
        w = torch.tensor(1.0, dtype=dtype)
        for _ in range(100):
            w = w + torch.tensor(1e-3, dtype=dtype)
        print(f"{str(dtype):15s} 1.0 plus 100 updates of 1e-3 = {w.item():.4f}")
    print("bf16 keeps 8 significant bits: near 1.0 its spacing is 2^-7 = 0.0078, so an update of 1e-3 rounds away.")


add(
    explain(
        id="amp-bf16-master-weights",
        title="Why keep float32 weights under bf16 autocast?",
        topics=("amp",),
        difficulty=2,
        question="A weight equal to 1.0 receives an update of +1e-3 at every step. If the weight itself were "
        "stored in bfloat16, what would it be after 100 steps?",
        hints=("How many significant bits does bfloat16 keep? What is the spacing of representable numbers near 1?",
               "Spacing near 1 is 2^-7 ≈ 0.0078: anything below half of it rounds away."),
        experiment=_master_weights_experiment,
    )
)


def _value_vs_norm_experiment() -> None:
    for clip in ("value", "norm"):
        p = nn.Parameter(torch.zeros(2))
        p.grad = torch.tensor([3.0, 4.0])
        if clip == "value":
            nn.utils.clip_grad_value_([p], 1.0)
        else:
            nn.utils.clip_grad_norm_([p], 1.0)
        print(f"clip_grad_{clip}_(1.0) on [3, 4]: {p.grad.tolist()}")
    print("value clipping caps each element (direction changes); norm clipping rescales the whole vector.")


add(
    explain(
        id="clipping-value-vs-norm",
        title="clip_grad_value_ or clip_grad_norm_?",
        topics=("clipping",),
        difficulty=1,
        question="A parameter's gradient is [3.0, 4.0]. What do clip_grad_value_(params, 1.0) and "
        "clip_grad_norm_(params, 1.0) each leave in it?",
        hints=("One works element by element, the other on the vector's length.",
               "The norm of [3, 4] is 5."),
        experiment=_value_vs_norm_experiment,
    )
)
