"""harness/install.py's plan: the runtime's torch kept when in range (and said when not), only what is missing
installed, the export extra included, nbgrader and its Jupyter server only on a hub; every lesson's first cell
runs it where the harness is missing; and lesson 16's clear message when the export extra is absent."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pandas as pd
import pytest

from harness.export import require_export_extra
from harness.hosted import INSTALL_CELL, INSTALL_CELL_ID
from harness.install import (
    builds_wheels_offline,
    extras_for,
    make_plan,
    parse_requirement,
    read_requirements,
    release,
)
from harness.plots import plot_history

COLAB = {"torch": "2.11.0+cu126", "torchvision": "0.26.0+cu126", "numpy": "2.0.2", "pandas": "2.2.2",
         "matplotlib": "3.10.0", "scikit-learn": "1.6.1", "tqdm": "4.67.1", "psutil": "5.9.5",
         "safetensors": "0.5.3", "nbformat": "5.10.4", "ipywidgets": "7.7.1"}


def test_versions_and_requirements_parse() -> None:
    assert release("2.11.0+cu126") == (2, 11, 0) and release("0.26.0a0") == (0, 26, 0)
    nbgrader = parse_requirement("nbgrader>=0.9,<0.10")
    assert nbgrader.spec == "nbgrader>=0.9,<0.10"
    assert nbgrader.satisfied_by("0.9.6") and not nbgrader.satisfied_by("0.10.0") and not nbgrader.satisfied_by(None)
    assert parse_requirement("safetensors>=0.4  # a comment").spec == "safetensors>=0.4"


def _names(specs: list[str]) -> set[str]:
    return {spec.split(">")[0].split("<")[0] for spec in specs}


def test_a_runtime_with_a_supported_torch_keeps_it_and_gets_only_what_is_missing() -> None:
    """Colab: only what the lessons import and lack (lesson 16's ONNX packages); nothing of Jupyter's."""
    extras = extras_for({"COLAB_RELEASE_TAG": "release-colab"})
    assert extras == ("export",)
    plan = make_plan(read_requirements(extras=extras), COLAB.get)
    assert plan.constraints == ["torch==2.11.0+cu126"]
    assert "keeping this runtime's torch 2.11.0+cu126" in plan.notes[0]
    assert _names(plan.install) == {"onnx", "onnxruntime", "onnxscript"}


def test_a_hub_gets_nbgrader_for_validate_and_a_hosted_runtime_does_not() -> None:
    """On a JupyterHub the student's JupyterLab is the hub's: nbgrader (Validate) is installed there too."""
    assert extras_for({"JUPYTERHUB_USER": "ada"}) == ("export", "lab")
    hub = make_plan(read_requirements(extras=extras_for({"JUPYTERHUB_USER": "ada"})), COLAB.get)
    assert _names(hub.install) == {"nbgrader", "nbclient", "onnx", "onnxruntime", "onnxscript"}
    lessons = _names(spec.spec for spec in read_requirements(extras=extras_for({})))
    assert not lessons & {"nbgrader", "nbformat", "nbclient", "jupyterlab", "notebook", "jupyter_server"}, lessons


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
def test_every_lessons_first_code_cell_is_the_install_cell(kind) -> None:
    """The same ordinary given cell (no nbgrader metadata) first in every lesson, solution and release alike."""
    from harness.grading.layout import REPO_ROOT, discover_assignments

    wrong = []
    for lesson in discover_assignments():
        cells = json.loads((REPO_ROOT / kind / lesson / f"{lesson}.ipynb").read_text())["cells"]
        first = next(cell for cell in cells if cell["cell_type"] == "code")
        if ("".join(first["source"]), first["id"], first["metadata"]) != (INSTALL_CELL, INSTALL_CELL_ID, {}):
            wrong.append(f"{lesson}: {''.join(first['source'])[:80]!r}")
    assert not wrong, "\n".join(wrong)


def test_the_install_cell_is_silent_where_the_harness_is_importable(tmp_path) -> None:
    """In an IPython shell that imports the harness, the cell runs nothing else and prints nothing: its `%run` sits
    in the `except` branch (IPython rewrites it there), and is reached only without the harness."""
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            f"result = InteractiveShell.instance().run_cell({INSTALL_CELL!r})\n"
            "assert result.success, result.error_in_exec\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stdout + done.stderr
    from IPython.core.inputtransformer2 import TransformerManager

    assert "    get_ipython().run_line_magic('run', '../../harness/install.py')" in \
        TransformerManager().transform_cell(INSTALL_CELL)


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
