"""The pinned environment: requirements.txt and environment.yml agree, and the installed torch is the pinned one."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torchvision

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)$")


def requirement_pins() -> dict[str, str]:
    """name -> version of every `name==version` line of requirements.txt (comments ignored)."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = PIN.match(line)
            assert match, f"requirements.txt: {line!r} is not pinned as name==version"
            pins[match[1].lower()] = match[2]
    return pins


def conda_pip_pins() -> tuple[dict[str, str], list[str]]:
    """name -> version of the pip section of environment.yml, and its conda dependencies."""
    pins, conda, in_pip = {}, [], False
    for raw in (ROOT / "environment.yml").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        item = re.match(r"^(\s*)-\s*(.+)$", line)
        if re.match(r"^\s*-\s*pip:\s*$", line):
            in_pip = True
        elif item and in_pip and len(item[1]) > 2:
            entry = item[2].strip()
            if not entry.startswith("-e"):
                match = PIN.match(entry)
                assert match, f"environment.yml pip section: {entry!r} is not pinned as name==version"
                pins[match[1].lower()] = match[2]
        elif item:
            in_pip = False
            conda.append(item[2].strip())
    return pins, conda


def test_requirements_and_environment_yml_pin_the_same_versions() -> None:
    requirements = requirement_pins()
    pip_section, _ = conda_pip_pins()
    assert {"torch", "torchvision", "nbgrader"} <= set(requirements)
    assert pip_section == requirements


def test_environment_yml_uses_python_3_11() -> None:
    _, conda = conda_pip_pins()
    assert any(re.fullmatch(r"python\s*=+\s*3\.11(\.\*|\.\d+)?", dep) for dep in conda), conda


def test_installed_torch_and_torchvision_are_the_pinned_ones() -> None:
    pins = requirement_pins()
    # Local build tags (+cu130, +cpu) follow the public version.
    assert torch.__version__.split("+")[0] == pins["torch"]
    assert torchvision.__version__.split("+")[0] == pins["torchvision"]


def test_torchvision_ops_run() -> None:
    boxes = torch.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.1]])
    iou = torchvision.ops.box_iou(boxes[:1], boxes[1:2])
    assert torch.allclose(iou, torch.tensor([[1.0 / 7.0]]))  # overlap 1, union 4 + 4 - 1
    keep = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert keep.tolist() == [0, 1]  # box 2 nearly coincides with box 0, which scores higher
