"""The drill bank's judge side, one module per topic of `harness.drills.bank`: judges, references, reference
solutions, planted wrong answers, explain drills' options and keys (`harness.drills.core.Answers`).
"""
