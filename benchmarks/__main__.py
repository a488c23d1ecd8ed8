"""Runs every benchmark in turn; each prints its figures and the command that reproduces it."""

import sys

BENCHMARKS: list[str] = []


def main() -> int:
    if not BENCHMARKS:
        print("No benchmarks yet.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
