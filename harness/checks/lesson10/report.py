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


@register("10-report")
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
