"""10-report, the judge.

Every section of the report, its test metrics checked against the judge's own evaluation of the run.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.checks.lesson10.common import mixed_precision_on_cpu
from harness.checks.lesson10.report import LINK, report_model, report_sets
from harness.contract.case import Case
from harness.contract.compare import isclose_number, numbers
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.judges.lesson10.common import _support_of
from harness.judges.lesson10.notebook_globals import judge_notebook_data


def _test_scores(case: Case, weights: Any, precision: str) -> dict[str, float]:
    """The test metrics the report must give: the recorded weights evaluated on the case's test set."""
    from harness.metrics import accuracy
    from harness.train import evaluate

    if not (isinstance(weights, dict) and all(isinstance(v, torch.Tensor) for v in weights.values())):
        raise ValueError("the run's weights are not a dict of tensors")
    with torch.random.fork_rng(devices=[]):  # its initial weights are replaced: only the RNG must stay as it was
        model = report_model()
    model.load_state_dict(weights)
    test = report_sets(case)[2][2]
    return evaluate(model, DataLoader(test, batch_size=100), loss_fn=nn.CrossEntropyLoss(),
                    metrics={"accuracy": accuracy}, precision=precision)


def _missing(code: str, what: str, how: str) -> NoReturn:
    fail(code, observed=f"the report has no {what}", expected=f"a complete run report, {what} included",
         cause=f"{how} not given to write_run_report, or the section removed from its text",
         where=f"write_run_report(..., {how})")


def _reported_number(text: str, name: str) -> float | None:
    """The value after `name` on the report's held-out test line, or None."""
    line = next((line for line in text.splitlines() if "test" in line.lower() and name in line), "")
    found = re.search(rf"{name}\W+(-?[0-9.]+(?:e-?[0-9]+)?)", line)
    return float(found.group(1)) if found else None


_PNG = b"\x89PNG\r\n\x1a\n"


def _validation_epoch(reported: dict[str, float | None], validation: Any) -> int | None:
    """The epoch (from 1) whose validation loss and accuracy, as the report prints them, are the reported test
    metrics; None when no epoch's are."""
    if not (isinstance(validation, list) and all(numbers(row) is not None and len(row) == 2 for row in validation)):
        raise ValueError("the recorded validation scores are not [loss, accuracy] rows")
    for epoch, (loss, accuracy) in enumerate(validation, start=1):
        if reported["accuracy"] == float(f"{accuracy:.4g}") and reported["loss"] == float(f"{loss:.4g}"):
            return epoch
    return None


def _check_evaluation(seen: dict[str, Any], reported: dict[str, float | None], test_images: torch.Tensor) -> None:
    """The test metrics come from an evaluation of every test image in eval mode, not from the history."""
    epoch = _validation_epoch(reported, seen["validation"])
    if epoch is not None:
        fail("wrong-test-metrics", observed=f"the report's test accuracy {reported['accuracy']} and loss "
             f"{reported['loss']} are the validation scores of epoch {epoch} in the history",
             expected="the scores of run['model'] on the test set given",
             cause="the validation scores were reported as test scores: the validation set chose the best epoch, so "
             "its scores are optimistic; only data never used to choose measures the model",
             where="test_metrics=evaluate(run['model'], DataLoader(test_set, ...), ...)")
    modes = seen["forward_training"]
    if not (isinstance(modes, list) and all(isinstance(mode, bool) for mode in modes)):
        raise ValueError("the recorded forward modes are not a list of bools")
    if any(modes):
        fail("train-mode-evaluation", observed=f"{sum(modes)} of the model's {len(modes)} forward passes during the "
             "report ran in training mode",
             expected="every forward in eval mode", cause="the model is not put in eval mode before evaluating: "
             "BatchNorm normalises with each batch's statistics and moves its running statistics (dropout would "
             "drop units)", where="model.eval() before the evaluation loop, or harness.train.evaluate, which does it")
    images = seen["eval_images"]
    if images is None:
        images = torch.empty(0, *test_images.shape[1:])
    if not (isinstance(images, torch.Tensor) and images.dim() == 4 and images.shape[1:] == test_images.shape[1:]):
        raise ValueError("the recorded images are not a batch of test-sized images")
    seen_rows = {row.numpy().tobytes() for row in images.float().contiguous()}
    evaluated = [row.numpy().tobytes() in seen_rows for row in test_images.contiguous()]
    if not all(evaluated):
        count, first = sum(evaluated), evaluated.index(False)
        one_batch = count > 0 and first == count
        fail("partial-test-set", observed=f"{count} of the {len(evaluated)} test images went through the model"
             + (f": the first {count}, one batch" if one_batch else ""),
             expected="all of them: the test metrics are over the whole test set",
             cause="only one batch of the test set was evaluated: the metrics come from that batch "
             "(next(iter(loader))) or from another data set" if one_batch
             else "the metrics were not computed on the test set given (another data set, or part of it)",
             where="evaluate(model, DataLoader(test_set, batch_size=...), ...): every batch of the loader")


def _check_report_text(seen: dict[str, Any], case: Case, epochs: int, test_size: int) -> None:
    text, device, version = seen["text"], "cpu", seen["torch_version"]
    if not (isinstance(text, str) and isinstance(version, str) and isinstance(seen["files"], dict)):
        raise ValueError("the recorded report is not text")
    if version not in text or device not in text:
        _missing("missing-environment", f"environment (the device {device!r} and torch {version})",
                 "environment=environment_report(device)")
    if "max_grad_norm" not in text or "scheduler" not in text:
        _missing("missing-config", "configuration (max_grad_norm, scheduler, ... of the run)", "the history from fit")
    if "train_loss" not in text or text.count("\n|") < epochs + 2:
        _missing("missing-history", "history table (one row per epoch)", "the history from fit")
    heads = [seen["files"].get(link) for link in re.findall(LINK, text)]
    if not any(isinstance(head, list) and bytes(head) == _PNG for head in heads):
        _missing("missing-curves", "curves: no ![...](file.png) link to a PNG that exists next to it",
                 "curves=plot_history(...)'s saved PNG")
    reported = {name: _reported_number(text, name) for name in ("accuracy", "loss")}
    if reported["accuracy"] is None or "not evaluated" in text:
        _missing("missing-test-metrics", "held-out test metrics", "test_metrics=evaluate(model, test_loader, ...)")
    _check_evaluation(seen, reported, report_sets(case)[2][2].tensors[0])
    precision = mixed_precision_on_cpu(_support_of(seen["precisions"]))
    scores = _test_scores(case, seen["weights"], precision)
    accuracy_ok = abs(reported["accuracy"] - scores["accuracy"]) <= 2 / test_size + 1e-3
    loss_ok = reported["loss"] is None or isclose_number(reported["loss"], scores["loss"], rel_tol=0.03, abs_tol=1e-3)
    if not (accuracy_ok and loss_ok):
        percent = loss_ok and abs(reported["accuracy"] - 100 * scores["accuracy"]) <= 100 * (2 / test_size + 1e-3)
        fail("wrong-test-metrics",
             observed=f"the report gives test accuracy {reported['accuracy']}, loss {reported['loss']}"
             + (": 100 times the accuracy, a percentage" if percent else ""),
             expected=f"accuracy {scores['accuracy']:.4g}, loss {scores['loss']:.4g}: the model evaluated on the whole "
             "test set given, in the run's precision",
             cause="the accuracy is given as a percentage; the report (and every metric of the course) uses a "
             "fraction in [0, 1]" if percent else "metrics of another model, in another precision, or computed "
             "another way than the mean over every test image",
             where="test_metrics=evaluate(...)'s dict, as it returns it" if percent else "evaluate(run['model'], "
             "DataLoader(test_set, ...), ..., precision=run['precision'])")
    if "## Precision" not in text or "fp32:" not in text:
        _missing("missing-precision", "precision section (which operations ran in fp32 under autocast)",
                 "op_dtypes=observe_op_dtypes(model, images, precision=..., targets=..., loss_fn=...)")
    if "best.pt" not in text:
        _missing("missing-best-checkpoint", "path of the best checkpoint", "best_checkpoint=checkpoint_dir / 'best.pt'")


@judges(
    "10-report", unjudged=("weights/*",),  # judged through the reported score, which a weak model can share
    hints=Hints(
        nudge="harness.report.write_run_report writes every section it is given: give it the held-out test metrics, "
        "the saved curves, the operations autocast ran in fp32, the environment and best.pt.",
        concept="A report says what ran (configuration), where (environment), how it went (history, curves), how "
        "good it is on data never used to train or choose (the test set, evaluated whole, in the run's "
        "precision), and what mixed precision did (observe_op_dtypes).",
        solution="scores = evaluate(model, DataLoader(test_set, batch_size=256), loss_fn=nn.CrossEntropyLoss(), "
        "metrics={'accuracy': accuracy}, precision=run['precision']); plot_history(history, out_dir / "
        "'curves.png'); op_dtypes = observe_op_dtypes(model, x, precision=..., targets=y, loss_fn=...); return "
        "write_run_report(out_dir / 'report.md', history, test_metrics=scores, best_checkpoint=..., "
        "op_dtypes=..., environment=environment_report(device), curves=out_dir / 'curves.png')",
        section="8. The run report"),
    requires={
        "reads-notebook-data": Requirement(
            "uses its arguments, never the notebook's data sets or run read as globals",
            hint="Which of the names in your function are arguments, and which come from the notebook?"),
        "no-report": Requirement("returns the path of the report written",
                                 hint="write_run_report returns the path: does your function return it?"),
        "missing-environment": Requirement(
            "an environment section (device, torch version)",
            hint="Which argument of write_run_report takes environment_report(device)?"),
        "missing-config": Requirement(
            "the configuration of the run",
            hint="write_run_report reads the configuration from fit's history: is the history given as it is?"),
        "missing-history": Requirement("the history table, one row per epoch",
                                       hint="Is fit's history given to write_run_report whole?"),
        "missing-curves": Requirement(
            "the curves, saved as a PNG next to the report and linked",
            hint="plot_history(history, path) saves a PNG: is that path given as curves=?"),
        "missing-test-metrics": Requirement(
            "held-out test metrics",
            hint="You may have computed the test scores: were they given to write_run_report?"),
        "wrong-test-metrics": Requirement(
            "the test metrics of run['model'] on the whole test set, in the run's precision",
            hint="Which data set and which model did you evaluate? The test set, whole, with run['model']."),
        "train-mode-evaluation": Requirement(
            "the model evaluated in eval mode",
            hint="Which mode was the model in when the test images went through it? Dropout and BatchNorm behave "
            "differently in training mode, and BatchNorm's running statistics move."),
        "partial-test-set": Requirement(
            "every image of the test set evaluated, not one batch",
            hint="How many test images went through the model? Loop over the whole loader, not next(iter(...))."),
        "missing-precision": Requirement(
            "the precision section (which operations autocast ran in fp32)",
            hint="Which harness.report function observes the dtype of each operation, and which argument takes it?"),
        "missing-best-checkpoint": Requirement(
            "the path of best.pt",
            hint="run['checkpoint_dir'] holds best.pt: which argument of write_run_report names it?"),
    },
)
def judge_report(seen: dict, *, case: Case) -> str:
    """Every section of the report, its test metrics checked against the judge's own evaluation of the run."""
    judge_notebook_data(seen, "run, test_set and out_dir")
    if seen["written"] is not True:
        fail("no-report", observed=f"write_capstone_report returned {seen['returned']}",
             expected="the path of the report written",
             cause="the report is not written, or its path not returned", where="return write_run_report(...)")
    _, epochs, (_, _, test) = report_sets(case)
    _check_report_text(seen, case, epochs, len(test))
    return "environment, configuration, history, curves, held-out test metrics, precision and best checkpoint reported"
