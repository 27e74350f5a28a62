"""nbgrader configuration of the course as students get it: what the Validate button runs.

Validate (JupyterLab's toolbar, started by `make lab` from this folder) executes a lesson as the instructor's
grading does: the same time limit per cell, and the same harmless output on stderr (warnings, progress bars)
dropped before the test cells are judged. The instructor's own configuration holds the same settings.
"""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pytorch-training-lab"
# Training on a CPU can take longer than nbgrader's default 30 s per cell; the lessons' grading budgets keep
# every cell far below this.
c.ExecutePreprocessor.timeout = 300
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True
# nbgrader scores a test cell with output on stderr zero: warnings, tqdm and logging lines are dropped first;
# errors (tracebacks) still fail.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (
    r"(?m)(Warning|warn\(|^\[[WI]\d{4}|\d+%\||it/s\]|s/it\]|^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[:\s])"
)
