"""`make bench`: benchmarks whose figures go into BENCHMARKS.md with the command that made them."""
