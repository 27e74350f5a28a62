"""The judge side of every check: judges and the references they recompute, one module per task.

A graded kernel never mounts this package: it holds what decides, and nothing here runs beside a student's code.
"""
