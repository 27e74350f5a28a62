"""Hidden inputs as data: a graded kernel gets 10-held-out's hidden images, never the seed that rebuilds their labels.

The forgery this closes: a model that regenerates the grader's held-out set in the kernel from the case it
receives, and answers each image with its label. Given the seed (as every other task's probe is), it earns full
marks; given the images as data, it answers at chance.
"""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import torch
from torch import nn

from harness.checks.lesson10.held_out import held_out, held_out_images
from harness.contract.case import LOCAL_SEED, Case
from harness.contract.failure import CheckFailed
from harness.contract.protocol import decide, observe
from harness.data import SHAPE_CLASSES
from harness.grading.sealed import seal_cases

SEED = 123_457  # a hidden case's drawn seed


class LabelLookup(nn.Module):
    """The forgery: the labels of the held-out set rebuilt from `case`, looked up by each image's bytes."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))
        images, labels = held_out(case).tensors
        self.labels = {self._key(image): int(label) for image, label in zip(images, labels, strict=True)}

    @staticmethod
    def _key(image: torch.Tensor) -> str:
        return hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(images), len(SHAPE_CLASSES)) + self.anchor
        for row, image in enumerate(images):
            logits[row, self.labels.get(self._key(image), 0)] = 10.0
        return logits


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    cases = {"10-held-out": [{"hidden": False, "seed": LOCAL_SEED}, {"hidden": True, "seed": SEED}],
             "10-train": [{"hidden": False, "seed": LOCAL_SEED}, {"hidden": True, "seed": 99}]}
    return cases, *seal_cases(cases, folder)


def test_the_kernel_gets_the_images_and_not_the_seed(sealed):
    cases, kernel, judged = sealed
    assert kernel["10-train"] == judged["10-train"] == cases["10-train"]  # no secret targets: as drawn
    assert kernel["10-held-out"][0] == cases["10-held-out"][0]  # the visible case is public
    sent, kept = kernel["10-held-out"][1], judged["10-held-out"][1]
    assert sent["seed"] == LOCAL_SEED and str(SEED) not in json.dumps(kernel)
    assert kept["seed"] == SEED and kept["inputs"] == sent["inputs"]
    sent_case, kept_case = (Case(hidden=True, seed=c["seed"], inputs=c["inputs"]) for c in (sent, kept))
    assert sent_case.digest() == kept_case.digest()  # the observation the kernel seals matches the judge's case
    images = torch.load(sent["inputs"], weights_only=True)
    assert torch.equal(images, held_out_images(kept_case))
    assert not torch.equal(held_out_images(sent_case), images)  # what the kernel's seed builds is another set


def test_regenerated_labels_pass_with_the_seed_and_fail_with_the_images(sealed):
    _, kernel, judged = sealed
    sent, kept = kernel["10-held-out"][1], judged["10-held-out"][1]
    kept_case = Case(hidden=True, seed=kept["seed"], inputs=kept["inputs"])
    sent_case = Case(hidden=True, seed=sent["seed"], inputs=sent["inputs"])
    history = pd.DataFrame({"val_accuracy": [0.9]})
    seeded = Case(hidden=True, seed=SEED)  # as the kernel had it before: the forgery works
    assert "accuracy" in decide("10-held-out", observe("10-held-out", ({"model": LabelLookup(seeded),
                                                                        "history": history},), seeded), seeded)
    forged = {"model": LabelLookup(sent_case), "history": history}  # all the kernel can rebuild now
    with pytest.raises(CheckFailed) as failure:
        decide("10-held-out", observe("10-held-out", (forged,), sent_case), kept_case)
    assert failure.value.code == "below-threshold"
