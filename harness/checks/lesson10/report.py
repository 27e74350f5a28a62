"""10-report, the probe.

Give the student's function a real run and its test set; record the report written, the files it links,
and the run's weights (the judge evaluates them on the test set itself).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from harness.checks.lesson10.common import _rng_kept, _state_as_data, mixed_precision_on_cpu
from harness.checks.lesson10.notebook_globals import notebook_data_read
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement
from harness.contract.registry import register
from harness.data import SHAPE_CLASSES, LabeledTensorDataset, shapes
from harness.env import supported_precisions


def report_sets(case: Case) -> tuple[int, int, list[LabeledTensorDataset]]:
    """The report run's seed, epochs, and its train, validation and test sets. The test set is larger than the
    batch a report usually evaluates in (256), so that one batch of it is not all of it."""
    seed, epochs = (case.seeded(21), 3) if case.hidden else (case.seeded(7), 2)
    sizes = ((0, 96), (1, 48), (2, 320 if case.hidden else 300))
    return seed, epochs, [shapes(n, seed=seed + k, size=16) for k, n in sizes]


_RECORDED_IMAGES = 4096  # at most this many images of the model's forwards are recorded (a few MB)


class _ForwardRecorder:
    """Record the images that reach a model's first convolution (any copy of it too) while active: the mode the
    model was in, and in eval mode the images themselves."""

    def __enter__(self) -> _ForwardRecorder:
        self.training: list[bool] = []
        self.images: list[torch.Tensor] = []
        self._count = 0
        self._handle = nn.modules.module.register_module_forward_pre_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()

    def _record(self, module: nn.Module, inputs: tuple[Any, ...]) -> None:
        if not (isinstance(module, nn.Conv2d) and module.in_channels == 3 and inputs
                and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() == 4):
            return
        self.training.append(module.training)
        if not module.training and self._count < _RECORDED_IMAGES:
            kept = inputs[0].detach()[: _RECORDED_IMAGES - self._count].float().cpu().clone()
            self.images.append(kept)
            self._count += len(kept)

    def observed(self) -> dict[str, Any]:
        """The modes of the forwards and the eval-mode images (None when no forward ran in eval mode)."""
        return {"forward_training": self.training, "eval_images": torch.cat(self.images) if self.images else None}


def report_model() -> nn.Module:
    """The capstone CNN the report is built for."""
    from harness.models import capstone_cnn

    return capstone_cnn(len(SHAPE_CLASSES), width=4)


def _report_run(root: Path, case: Case, precision: str) -> tuple[dict[str, Any], LabeledTensorDataset]:
    """A small real run made with fit (best weights loaded), and its test set."""
    from harness.checkpoint import load_checkpoint
    from harness.metrics import accuracy
    from harness.train import EarlyStopping, fit

    seed, epochs, (train, val, test) = report_sets(case)
    torch.manual_seed(seed)
    model = report_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = fit(model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=48),
                  loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=epochs, precision=precision,
                  max_grad_norm=1.0, metrics={"accuracy": accuracy},
                  early_stopping=EarlyStopping("val_accuracy", mode="max", patience=epochs),
                  checkpoint_dir=root / "checkpoints", progress=False)
    load_checkpoint(root / "checkpoints" / "best.pt", model=model)
    model.train()  # handed over in training mode, as a model can be: evaluating it is what sets eval mode
    run = {"model": model, "history": history, "precision": precision, "checkpoint_dir": root / "checkpoints"}
    return run, test


LINK = r"!\[[^\]]*\]\(([^)\s]+)\)"  # a Markdown image link; group 1 is the file


def _file_heads(text: str, folder: Path) -> dict[str, list[int] | None]:
    """The first 8 bytes of each file the report's image links name (None where there is no such file)."""
    heads: dict[str, list[int] | None] = {}
    for link in re.findall(LINK, text)[:20]:
        path = folder / link
        heads[link] = list(path.read_bytes()[:8]) if path.is_file() else None
    return heads


@register(
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
def probe_report(write_capstone_report: Callable[..., Any], *, case: Case) -> dict:
    """Give the student's function a real run and its test set; record the report written, the files it links,
    and the run's weights (the judge evaluates them on the test set itself). A function that reads the notebook's
    data as globals is not run: what it reads is recorded instead."""
    read = notebook_data_read(write_capstone_report)
    if read is not None:
        return {"notebook_data": read}
    with tempfile.TemporaryDirectory(prefix="check-10-report-") as tmp, _rng_kept():
        root = Path(tmp)
        precisions = supported_precisions(torch.device("cpu"))
        run, test = _report_run(root / "run", case, mixed_precision_on_cpu(precisions))
        weights = _state_as_data(run["model"].state_dict())  # the model as handed over, before the report ran
        validation = run["history"][["val_loss", "val_accuracy"]].astype(float).values.tolist()
        with _ForwardRecorder() as forwards:
            path = write_capstone_report(run, test, root / "report")
        seen: dict[str, Any] = {"returned": repr(path)[:200], "written": path is not None and Path(path).is_file()}
        if seen["written"]:
            path = Path(path)
            text = path.read_text()
            seen.update(text=text, files=_file_heads(text, path.parent), torch_version=torch.__version__,
                        precisions=precisions, weights=weights, validation=validation, **forwards.observed())
    return seen
