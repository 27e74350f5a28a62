"""harness/install.py's plan: the runtime's torch kept when in range (and said when not), only what is missing
installed, the export extra included; and lesson 16's clear message when that extra is absent."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from harness.export import require_export_extra
from harness.install import builds_wheels_offline, make_plan, parse_requirement, read_requirements, release
from harness.plots import plot_history

COLAB = {"torch": "2.11.0+cu126", "torchvision": "0.26.0+cu126", "numpy": "2.0.2", "pandas": "2.2.2",
         "matplotlib": "3.10.0", "scikit-learn": "1.6.1", "tqdm": "4.67.1", "psutil": "5.9.5",
         "safetensors": "0.5.3", "nbformat": "5.10.4"}


def test_versions_and_requirements_parse() -> None:
    assert release("2.11.0+cu126") == (2, 11, 0) and release("0.26.0a0") == (0, 26, 0)
    nbgrader = parse_requirement("nbgrader>=0.9,<0.10")
    assert nbgrader.spec == "nbgrader>=0.9,<0.10"
    assert nbgrader.satisfied_by("0.9.6") and not nbgrader.satisfied_by("0.10.0") and not nbgrader.satisfied_by(None)
    assert parse_requirement("safetensors>=0.4  # a comment").spec == "safetensors>=0.4"


def test_a_runtime_with_a_supported_torch_keeps_it_and_gets_only_what_is_missing() -> None:
    plan = make_plan(read_requirements(), COLAB.get)
    assert plan.constraints == ["torch==2.11.0+cu126"]
    assert "keeping this runtime's torch 2.11.0+cu126" in plan.notes[0]
    names = {spec.split(">")[0].split("<")[0] for spec in plan.install}
    assert names == {"nbgrader", "nbclient", "hypothesis", "onnx", "onnxruntime", "onnxscript"}


def test_a_missing_torchvision_is_paired_with_the_runtime_torch() -> None:
    plan = make_plan(read_requirements(), {**COLAB, "torchvision": None}.get)
    assert "torchvision>=0.26,<0.27" in plan.install and not any(s.startswith("torch>") for s in plan.install)


def test_the_harness_is_built_offline_only_where_setuptools_can_build_a_wheel() -> None:
    """A fresh Python 3.11 venv has setuptools 65 and no `wheel`: building there without isolation fails with
    "invalid command 'bdist_wheel'" (seen in CI's student-tree step), so pip gets its own build environment."""
    assert builds_wheels_offline({"setuptools": "80.9.0"}.get)  # Colab, Kaggle: bdist_wheel built in
    assert builds_wheels_offline({"setuptools": "65.5.0", "wheel": "0.45.1"}.get)
    assert not builds_wheels_offline({"setuptools": "65.5.0"}.get)  # `python3.11 -m venv`
    assert not builds_wheels_offline({}.get)


def test_an_old_torch_is_named_and_replaced() -> None:
    plan = make_plan(read_requirements(), {**COLAB, "torch": "2.5.1+cu121"}.get)
    assert "torch 2.5.1+cu121 is older than the course supports (torch>=2.11)" in plan.notes[0]
    assert "torch>=2.11" in plan.install and plan.constraints == []


def test_lesson_16_names_the_export_extra_when_onnx_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"needs the export extra, and onnxscript is not installed .*"
                       r"pip install onnx onnxruntime onnxscript"):
        require_export_extra()


def test_a_constant_learning_rate_is_drawn_from_zero() -> None:
    history = pd.DataFrame({"epoch": [1, 2, 3], "train_loss": [1.0, 0.8, 0.7], "val_loss": [1.1, 0.9, 0.8],
                            "lr": [0.003, 0.003, 0.003]})
    lr_ax = plot_history(history).axes[-1]
    bottom, top = lr_ax.get_ylim()
    assert bottom == 0 and top == pytest.approx(0.003 * 1.15)


@pytest.mark.parametrize("kind", ["solutions", "notebooks"])
def test_every_notebook_asks_a_hosted_runtime_for_the_accelerator_its_lesson_uses(kind) -> None:
    """Colab and Kaggle read the accelerator from the notebook: a GPU for the lessons measured on the device
    (05, 10, 12, 13), none for the rest; Kaggle's internet on for all (install.py needs it)."""
    from harness.grading.layout import REPO_ROOT, discover_assignments
    from harness.hosted import hosted_metadata

    wrong = []
    for lesson in discover_assignments():
        metadata = json.loads((REPO_ROOT / kind / lesson / f"{lesson}.ipynb").read_text())["metadata"]
        seen = {key: metadata.get(key) for key in ("colab", "kaggle", "accelerator")}
        expected = hosted_metadata(lesson)
        if {key: value for key, value in seen.items() if value is not None} != expected:
            wrong.append(f"{lesson}: {seen}, expected {expected}")
    assert not wrong, "\n".join(wrong)
    assert hosted_metadata("05_mixed_precision")["accelerator"] == "GPU"
    assert "accelerator" not in hosted_metadata("02_nn_module")
