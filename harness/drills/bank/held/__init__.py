"""The bank side of the drills a graded student tree holds back whole (`harness.grading.held_drills`): those whose
answer passes a graded exercise and which lesson 11's notebook does not hold. `harness.drills.core` imports
`harness.drills.bank.held.<topic>` after the topic's module, where it is installed."""
