"""10-train, the judge.

Settings, files, best weights, exact resume: from the checkpoints, weights and step counts recorded.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.checks.lesson10.train import constant_accuracy_val, train_config
from harness.contract.case import Case
from harness.contract.compare import close_values, int_list
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson10.common import _support_of
from harness.judges.lesson10.notebook_globals import judge_notebook_data


def _float_weights(state: Any) -> dict[str, torch.Tensor]:
    """The floating-point tensors of a recorded state_dict, validated."""
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise ValueError("a recorded state_dict is not a dict of tensors")
    return {k: v.detach().float() for k, v in state.items() if v.is_floating_point()}


def _weights_max_difference(a: Any, b: Any) -> float:
    a, b = _float_weights(a), _float_weights(b)
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return math.inf
    return max((float((a[k] - b[k]).abs().max()) for k in a if a[k].numel()), default=0.0)


def _check_device(record: Any) -> None:
    """The model trains on the device given: every parameter, and every buffer (fit refuses it otherwise)."""
    if not isinstance(record, dict):
        raise ValueError("the recorded devices are not a dict")
    off = record.get("off_device")
    if off is not None:
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(part, str) for part in off)):
            raise ValueError("the recorded off-device tensor is not [name, device]")
        name, found = off
        fail("ignores-device", observed=f"called with device='meta', fit refused the model: {name} is on {found}",
             expected="the whole model on the device given, Standardize's mean and std included",
             cause=f"only part of the model moved to the device ({name} stayed behind), for example "
             "capstone_cnn(...).to(device) inside the Sequential instead of the Sequential moved",
             where="move the whole nn.Sequential: nn.Sequential(Standardize(...), capstone_cnn(...)).to(device)")
    if record.get("raised"):
        return  # no evidence: the call raised something else on the made-up device
    params = record.get("params")
    if params is None:
        return  # no forward reached: nothing observed
    if not (isinstance(params, list) and all(isinstance(d, str) for d in params)):
        raise ValueError("the recorded devices are not a list of names")
    if params and params != ["meta"]:
        fail("ignores-device", observed=f"called with device='meta', train_capstone trained a model whose parameters "
             f"are on {', '.join(params)}", expected="every parameter on the device given",
             cause="the device argument is not used: select_device() called without it, another device chosen, or "
             "the model never moved with .to(device)",
             where="device = select_device(device), then nn.Sequential(...).to(device) before make_optimizer")


def _check_result(record: dict[str, Any], out: str) -> dict[str, Any]:
    if record["is_run"] is not True:
        fail("not-a-run", observed=f"train_capstone returned {record['returned']}"
             + (f" with keys {record['keys']}" if record["keys"] is not None else ""),
             expected="a dict with 'model' (the trained nn.Module), 'history' (fit's DataFrame), 'precision'",
             cause="a different return value", where="the return statement of train_capstone")
    missing = [name for name in ("last.pt", "best.pt", "history.csv", "config.json") if name not in record["files"]]
    if missing:
        fail("missing-checkpoints", observed=f"{out}/ lacks {missing}", expected="last.pt, best.pt, history.csv, "
             "config.json written into out_dir",
             cause="fit was not given checkpoint_dir=out_dir (no checkpoints, or written to another folder)",
             where="fit(..., checkpoint_dir=out_dir)")
    return record["last"]


def _check_settings(last: dict[str, Any], config: dict[str, Any]) -> None:
    """What fit recorded about the run in last.pt: precision, clipping, schedule, early stopping."""
    saved = last["config"]
    if not isinstance(saved, dict):
        raise ValueError("last.pt's config is not a dict")
    if saved.get("precision") != config["precision"]:
        fail("wrong-precision", observed=f"the run trained in {saved.get('precision')!r} (last.pt's config) although "
             f"config['precision'] was {config['precision']!r}",
             expected=f"{config['precision']!r}: the precision the caller chose and put in config",
             cause="config['precision'] is not passed to fit: fit's default is fp32, and a precision chosen inside "
             "train_capstone (choose_precision gives fp32 on a CPU) overrides the caller's",
             where="fit(..., precision=config['precision']), and the same in the returned dict")
    if saved.get("max_grad_norm") != config["max_grad_norm"]:
        fail("no-clipping", observed=f"fit ran with max_grad_norm={saved.get('max_grad_norm')!r}",
             expected=f"{config['max_grad_norm']} (config['max_grad_norm'])",
             cause="max_grad_norm not passed to fit" if saved.get("max_grad_norm") is None
             else "a max_grad_norm other than config['max_grad_norm']",
             where="fit(..., max_grad_norm=config['max_grad_norm'])")
    if saved.get("scheduler") is None:
        fail("no-scheduler", observed="the run had no learning-rate scheduler", expected="the warm-up-cosine "
             "scheduler of make_optimizer", cause="scheduler not passed to fit", where="fit(..., scheduler=scheduler)")
    scheduler_steps = last["scheduler_steps"]
    if saved.get("scheduler_interval") != "step" or scheduler_steps != last["global_step"] or scheduler_steps is None:
        fail("schedule-per-epoch", observed=f"the scheduler was stepped {scheduler_steps} times in "
             f"{last['global_step']} optimizer steps (scheduler_interval={saved.get('scheduler_interval')!r})",
             expected="once per optimizer step",
             cause="a schedule sized in optimizer steps stepped per epoch (scheduler_interval not 'step')",
             where="fit(..., scheduler_interval='step')")
    wanted = ("val_accuracy", "max", config["patience"])
    got = (saved.get("monitor"), saved.get("monitor_mode"), saved.get("early_stopping_patience"))
    if got != wanted:
        fail("wrong-early-stopping", observed=f"monitor, mode, patience = {got}", expected=f"{wanted}",
             cause="no early stopping given to fit" if got == (None, None, None) else "early stopping watching "
             "another metric, in another mode or with another patience: best.pt must be the most accurate epoch",
             where="fit(..., metrics={'accuracy': accuracy}, early_stopping=EarlyStopping('val_accuracy', "
             "mode='max', patience=config['patience']))")
    if saved.get("epochs") != config["epochs"]:
        fail("wrong-epochs", observed=f"fit ran with epochs={saved.get('epochs')!r}", expected=f"{config['epochs']}",
             cause="epochs not taken from config", where="fit(..., epochs=config['epochs'])")


def _check_steps(counted: Any, config: dict[str, Any], n: int, what: str) -> None:
    expected = (config["patience"] + 1) * (n // config["batch_size"])
    if counted != expected:
        fail("wrong-step-count", observed=f"{counted} optimizer steps in {what}",
             expected=f"{expected}: {n // config['batch_size']} batches of config['batch_size']={config['batch_size']} "
             f"per epoch, and early stopping after epoch {config['patience'] + 1} (the validation accuracy of this "
             "check never improves after epoch 1)",
             cause="another batch size, or early stopping that does not stop",
             where="train_loader(train_set, config['batch_size'], seed=...) and the early stopping given to fit")


def _check_resume(record: dict[str, Any], config: dict[str, Any], n: int, stop_at: int,
                  straight_last: dict[str, Any]) -> None:
    if record.get("raised") is not None:
        fail("raised", observed=f"your code raised {record['raised']} in an interrupted or resumed run",
             expected="it runs on the check's inputs without an exception",
             cause="the exception named here, raised inside train_capstone", where="train_capstone with "
             "on_epoch_end=... or resume=True")
    if record["interrupted"] is not True:
        fail("callback-ignored", observed=f"the run went on after on_epoch_end raised at epoch {stop_at}",
             expected="the exception to stop training, as a killed process would",
             cause="on_epoch_end is not passed to fit", where="fit(..., on_epoch_end=on_epoch_end)")
    if record.get("refused") is not None:
        fail("resume-ignored", observed=f"after an interruption at epoch {stop_at}, the resumed call started a new run "
             f"in out_dir, which fit refused: {record['refused']}", expected="the run to continue from last.pt",
             cause="resume is not passed to fit", where="fit(..., checkpoint_dir=out_dir, resume=resume)")
    remaining = (config["patience"] + 1 - stop_at) * (n // config["batch_size"])
    if record["steps"] != remaining:
        fail("resume-ignored", observed=f"after an interruption at epoch {stop_at}, the resumed call took "
             f"{record['steps']} optimizer steps", expected=f"{remaining}: only the epochs left", cause="the run "
             "restarted from scratch: resume is not passed to fit, or out_dir is not the checkpoint folder",
             where="fit(..., checkpoint_dir=out_dir, resume=resume)")
    difference = _weights_max_difference(record["resumed"], straight_last["model"])
    if difference == 0:
        return
    if _weights_max_difference(record["again"], straight_last["model"]) > 0:
        fail("not-seeded", observed="two fresh runs with the same config end with different weights",
             expected="identical runs: everything random is seeded from config['seed'] inside train_capstone",
             cause="the run is not seeded from config['seed'] before the model is built (no seed_everything, or "
             "another seed), so its initial weights and data order come from whatever state the global RNG was in",
             where="the first lines of train_capstone")
    fail("resume-not-exact", observed=f"interrupted after epoch {stop_at} and resumed, the final weights differ from "
         f"the uninterrupted run by up to {difference:.3g}", expected="identical weights",
         cause="the resumed run is built differently (another schedule length, data order or model) from the one "
         "it continues", where="build everything from config alone, the same way whether resuming or not")


def _check_statistics(model: Any, config: dict[str, Any], n: int) -> None:
    """Standardize's buffers (the model's entries named mean and std, shaped like per-channel statistics) hold the
    statistics of the training images alone."""
    from harness.checks.lesson10.train import constant_accuracy_val
    from harness.data import normalization_stats, shapes

    images = shapes(n, seed=config["seed"] + 40, size=16).tensors[0]
    wanted = dict(zip(("mean", "std"), normalization_stats(images), strict=True))
    found = {key: value for key, value in _float_weights(model).items()
             if key.rsplit(".", 1)[-1] in wanted and value.shape == wanted["mean"].shape}
    wrong = sorted(key for key, value in found.items()
                   if not close_values(value, wanted[key.rsplit(".", 1)[-1]], rtol=1e-4, atol=1e-5, dtype=False))
    if not wrong:
        return
    both = torch.cat([images, constant_accuracy_val().tensors[0]])
    leaked = dict(zip(("mean", "std"), normalization_stats(both), strict=True))
    with_val = all(close_values(found[key], leaked[key.rsplit(".", 1)[-1]], rtol=1e-4, atol=1e-5, dtype=False)
                   for key in wrong)
    fail("leaky-normalisation",
         observed=f"{', '.join(wrong)} hold the statistics of the training and validation images together" if with_val
         else f"{', '.join(wrong)} differ from the statistics of the training images",
         expected="normalization_stats(train_set.tensors[0]): the training set's statistics alone",
         cause="validation images were pooled with the training images: the model that is chosen on the validation "
         "set has seen it" if with_val else "statistics computed on other images than the training set's",
         where="Standardize(*normalization_stats(train_set.tensors[0]))")


def _check_validation_order(read: Any) -> None:
    """Each pass over the validation set read it in order: decided on passes that read every sample once (a
    function that validates from the tensors, without a loader, reads none and shows nothing)."""
    order = int_list(read, "the validation samples read")
    size = len(constant_accuracy_val())
    for start in range(0, len(order) - size + 1, size):
        one_pass = order[start : start + size]
        if sorted(one_pass) == list(range(size)) and one_pass != sorted(one_pass):
            fail("validation-shuffled", observed=f"a validation pass read the samples in the order {one_pass}",
                 expected=f"the order of val_set, {list(range(size))}, in every pass",
                 cause="the validation loader shuffles: the text's loader is distributed_loader(val_set, 256, "
                 "shuffle=False), whose default is shuffle=True",
                 where="the validation loader in train_capstone: pass shuffle=False")


@judges(
    "10-train",
    hints=Hints(
        nudge="Compose, do not rewrite: seed, build the model (Standardize then capstone_cnn) on its device, "
        "make_optimizer with total_steps = epochs * len(train loader), the loaders, then one call to fit with "
        "every option (the precision is config['precision']), and load best.pt's weights before returning.",
        concept="fit does the loop; your function decides what it is given. A run resumes exactly only if it is "
        "rebuilt identically from config alone (seeded first) and fit gets checkpoint_dir and resume; the "
        "schedule counts optimizer steps, and best.pt (the most accurate epoch) is the model to return.",
        solution="seed_everything(config['seed']); model = nn.Sequential(Standardize(*normalization_stats("
        "train_set.tensors[0])), capstone_cnn(len(train_set.classes), config['width'])).to(device); loader = "
        "train_loader(train_set, config['batch_size'], seed=config['seed']); fit(model, loader, val_loader, "
        "loss_fn=nn.CrossEntropyLoss(), optimizer=..., epochs=config['epochs'], precision=config['precision'], "
        "max_grad_norm=config['max_grad_norm'], scheduler=scheduler, scheduler_interval='step', "
        "metrics={'accuracy': accuracy}, early_stopping=EarlyStopping('val_accuracy', mode='max', "
        "patience=config['patience']), checkpoint_dir=out_dir, resume=resume, on_epoch_end=on_epoch_end, "
        "progress=progress)",
        section="5. The training function"),
    requires={
        "reads-notebook-data": Requirement(
            "uses its arguments, never the notebook's data sets or run read as globals",
            hint="Which of the names in your function are arguments, and which come from the notebook?"),
        "validation-shuffled": Requirement(
            "the validation loader does not shuffle: distributed_loader(val_set, 256, shuffle=False)",
            hint="Which loader reads val_set in your function, and with which shuffle?"),
        "not-a-run": Requirement(
            "returns {'model', 'history', 'precision', 'checkpoint_dir'}",
            hint="Step 7 of the exercise lists the dict to return: does yours hold the model, fit's history and "
            "the precision?"),
        "missing-checkpoints": Requirement(
            "checkpoints (last.pt, best.pt) and the history written into out_dir",
            hint="fit writes every file itself when it is told where: which of its arguments names the folder?"),
        "wrong-precision": Requirement(
            "trains in the precision config['precision'] names (the caller's choose_precision)",
            hint="Which precision did fit receive? Without the argument it trains in fp32; the check's config asks "
            "for another one."),
        "no-clipping": Requirement("gradients clipped at config['max_grad_norm']",
                                   hint="Which fit argument clips gradients, and where is its value in config?"),
        "no-scheduler": Requirement("the make_optimizer scheduler given to fit",
                                    hint="make_optimizer returned two objects: did fit get both?"),
        "schedule-per-epoch": Requirement(
            "the scheduler stepped once per optimizer step",
            hint="total_steps counts optimizer steps: how often must fit step the scheduler, then?"),
        "wrong-early-stopping": Requirement(
            "early stopping on val_accuracy, mode='max', patience=config['patience']",
            hint="best.pt is the most accurate epoch: which metric, and which direction, must EarlyStopping watch?"),
        "leaky-normalisation": Requirement(
            "Standardize's statistics from the training set alone",
            hint="Which images did normalization_stats see? Statistics that include validation images leak them into "
            "the model that is chosen on them."),
        "wrong-epochs": Requirement("config['epochs'] epochs", hint="Where does fit's epochs come from?"),
        "wrong-step-count": Requirement(
            "config['batch_size'] per batch, and training stops when early stopping says so",
            hint="Count the optimizer steps: batches per epoch times epochs run. Which of the two is off?"),
        "not-best-weights": Requirement(
            "the returned model holds best.pt's weights",
            hint="After fit, the model holds the last epoch's weights: which checkpoint must you load before "
            "returning?"),
        "callback-ignored": Requirement(
            "on_epoch_end passed through to fit",
            hint="The check interrupts a run from on_epoch_end: does your function hand it on?"),
        "resume-ignored": Requirement(
            "resume=True continues from out_dir's last.pt",
            hint="After an interruption, the resumed call trained every epoch again: which fit argument continues?"),
        "not-seeded": Requirement(
            "the run seeds itself from config['seed'] before building the model",
            hint="Two fresh runs of the same config end apart: what fixes the initial weights before the model is "
            "built?"),
        "resume-not-exact": Requirement(
            "an interrupted and resumed run ends with the weights of the uninterrupted one",
            hint="Is anything built differently when resume=True (loss, schedule, loader, model)? Build from config "
            "alone."),
        "ignores-device": Requirement(
            "the whole model (Standardize's buffers included) on `device`",
            hint="The check passed a device no machine has: where does your function use its device argument?"),
    },
)
def judge_train(seen: dict, *, case: Case) -> str:
    """Settings, files, best weights, exact resume: from the checkpoints, weights and step counts recorded."""
    judge_notebook_data(seen, "train_set, val_set, out_dir and config")
    config, n, stop_at = train_config(case, _support_of(seen["precisions"]))
    straight = seen["straight"]
    last = _check_result(straight, "straight")
    _check_settings(last, config)
    _check_steps(straight["steps"], config, n, "the run")
    _check_statistics(straight["model"], config, n)
    best = straight["best"]
    if _weights_max_difference(straight["model"], best["model"]) > 0:
        fail("not-best-weights", observed=f"the returned model does not hold best.pt's weights (epoch "
             f"{best['epoch']}); the run ended at epoch {last['epoch']}",
             expected="the best epoch's weights: the model to evaluate and deploy",
             cause="the model is returned as the last epoch left it" if _weights_max_difference(straight["model"],
             last["model"]) == 0 else "best.pt's weights are not loaded into the returned model",
             where="load_checkpoint(Path(out_dir) / 'best.pt', model=model) before returning")
    _check_validation_order(seen["validation_order"])
    _check_resume(seen["resume"], config, n, stop_at, last)
    _check_device(seen["device"])
    return (f"precision, clipping, per-step schedule and early stopping as configured; best weights returned; "
            f"interrupted after epoch {stop_at} and resumed: identical to the run that never stopped; trains on "
            "the device it is given")
