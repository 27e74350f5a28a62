"""The judge: decides every graded point outside the student's kernel (instructors only; never shipped).

`secret` holds the instructor's grading secret; `cases` draws each submission's hidden cases from it at
grade time; `verdict` decodes what the sandboxed probes sent and runs each task's judge on it. The
student tree (`harness release --student`) leaves this package out.
"""
