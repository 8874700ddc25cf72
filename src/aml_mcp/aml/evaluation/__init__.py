"""The full evaluation: every case drafted and checked, search graded on labelled queries, baselines."""
