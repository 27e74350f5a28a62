"""The held answers of the modules drills: the solutions and planted wrong answers of modules-plain-list (its answer
passes 11-plain-list).

Their judges are in `harness.judges.drills.modules`; a graded student tree does not ship this module.
"""

from __future__ import annotations

import harness.judges.drills.modules  # noqa: F401  (joins the judges first)
from harness.drills.bank.modules import LIST_STARTER
from harness.drills.core import Answers
from harness.drills.support import edited
from harness.judges.drills.held.whys import add_answers

add_answers(
    Answers(
        drill_id="modules-plain-list",
        solution=edited(LIST_STARTER,
                        ("self.hidden = [", "self.hidden = nn.ModuleList(["),
                        ("sizes[1:-1])]", "sizes[1:-1])])")),
        wrong_answers=(
            (edited(LIST_STARTER,
                    ("self.hidden = [", "self.hidden = tuple("),
                    ("sizes[1:-1])]", "sizes[1:-1]))")), "unregistered-layers"),
            (edited(LIST_STARTER,
                    ("self.hidden = [", "self.hidden = nn.ModuleList(["),
                    ("sizes[1:-1])]", "sizes[1:-1])])"),
                    ("x = torch.relu(layer(x))", "x = layer(x)")),
             "wrong-value"),
        ),
    )
)
