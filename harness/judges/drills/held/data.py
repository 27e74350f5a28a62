"""The held answers of the data drills: the solutions and planted wrong answers of data-pad-collate (its answer
passes 03-pad-collate) and data-worker-seeding (03-worker-init).

Their judges are in `harness.judges.drills.data`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.drills.bank.held.data  # noqa: F401  (registers the held drills first)
import harness.judges.drills.data  # noqa: F401  (joins the judges first)
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.data import _judge_pad_collate, _judge_worker_seeding
from harness.judges.drills.held.whys import add_answers

_COLLATE_SOLUTION = (
    "import torch\nfrom torch.nn.utils.rnn import pad_sequence\n\n\ndef pad_collate(batch):\n"
    "    sequences, labels = zip(*batch)\n    lengths = torch.tensor([len(s) for s in sequences])\n"
    "    return pad_sequence(list(sequences), batch_first=True), lengths, torch.stack(labels)\n"
)


_WORKER_SOLUTION = ("import numpy as np\nimport torch\n\n\ndef worker_init_fn(worker_id):\n"
                    "    seed = torch.initial_seed() % 2**32  # differs per worker and per epoch, follows the loader\n"
                    "    torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(seed)\n")


add_answers(
    Answers(
        drill_id="data-pad-collate",
        solution=_COLLATE_SOLUTION,
        wrong_answers=(
            (edited(_COLLATE_SOLUTION, (", batch_first=True", "")), "wrong-shape"),
            (edited(_COLLATE_SOLUTION,
                    ("    sequences, labels = zip(*batch)\n",
                     "    batch = sorted(batch, key=lambda item: -len(item[0]))\n"
                     "    sequences, labels = zip(*batch)\n")), "wrong-lengths"),
            (edited(_COLLATE_SOLUTION, ("batch_first=True)", "batch_first=True, padding_value=-1.0)")),
             "wrong-padding"),
            (edited(_COLLATE_SOLUTION, ("torch.stack(labels)", "labels")), "wrong-labels"),
        ),
        judge=_judge_pad_collate,
    )
)


add_answers(
    Answers(
        drill_id="data-worker-seeding",
        solution=_WORKER_SOLUTION,
        wrong_answers=(
            ("import numpy as np\nimport torch\n\ndef worker_init_fn(worker_id):\n"
             "    np.random.seed(torch.initial_seed() % 2**32)\n", "duplicate-augmentations"),
            ("import os\nimport numpy as np\nimport torch\n\ndef worker_init_fn(worker_id):\n"
             "    torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(\n"
             "        int.from_bytes(os.urandom(4), 'little'))\n", "not-reproducible"),
            ("import numpy as np\nimport torch\n\ndef worker_init_fn(worker_id):\n"
             "    torch.utils.data.get_worker_info().dataset.rng = np.random.default_rng(worker_id)\n",
             "same-every-epoch"),
        ),
        judge=_judge_worker_seeding,
    )
)
