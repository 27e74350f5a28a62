"""nbgrader configuration of PyTorch Training Lab.

`solutions/NN_name/NN_name.ipynb` is the source (solutions, visible and hidden tests);
`notebooks/NN_name/NN_name.ipynb` is the student release nbgrader generates from it.
"""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pytorch-training-lab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# Training on a CPU can take longer than nbgrader's default 30 s per cell; grading budgets
# (harness.budget) keep every lesson's cells far below this.
c.ExecutePreprocessor.timeout = 300
c.Execute.timeout = 300
# Warnings, tqdm and logging write to stderr, and nbgrader scores any test cell with stderr output zero.
# Drop those stream outputs before grading; errors (tracebacks) are "error" outputs and still fail.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (
    r"(?m)(Warning|warn\(|^\[[WI]\d{4}|\d+%\||it/s\]|s/it\]|^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\s])"
)
c.Execute.interrupt_on_timeout = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
