"""What the tests, the benchmarks and the reliability suites share to drive the stack from outside:
free ports, waiting on a condition with a deadline, a child process started, awaited, watched and
stopped, the probes a measured browser page carries, and an administrator's session on PostgreSQL
that acts out an outage.

It may import stack/ (which knows each process's command line) and common/; nothing here imports
tests/, benchmarks/ or reliability/, and the product never imports it.
"""
