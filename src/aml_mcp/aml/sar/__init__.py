"""SAR drafting: a case's facts, the drafter, the questions asked of the analyst, the code checks."""
