"""The weights in 2 MB pages: glibc's malloc told, before the process starts, to ask for them.

A decode step reads every weight once (269 MB for the default model in bf16, 538 in fp32): in
4 KB pages that is 65,000-130,000 pages a step, far more than the TLB holds. The kernel backs an
anonymous mapping with transparent huge pages only where it is advised to (the `madvise` mode
most distributions ship), and oneDNN's packed weights come from malloc, which advises only when
the tunable below is set; glibc reads it once, at start. So `python -m inference` starts itself
again with it (same process id, same arguments) before anything is loaded. In-process, three
processes of each alternated (bf16, one stream, AMD EPYC): each with the tunable stepped
10-20% faster than the one before it without (BENCHMARKS.md, "The weights in 2 MB pages").
The KV cache maps its own memory and keeps 4 KB pages: it is touched a row at a time.
"""

import os
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb=1"  # glibc 2.35 and newer: madvise(MADV_HUGEPAGE) what malloc maps
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
GLIBC_MIN_VERSION = (2, 35)


def environment(environ: dict[str, str], thp_mode: Path = THP_MODE) -> dict[str, str] | None:
    """`environ` with the tunable added, or None where starting again would change nothing:
    not glibc 2.35+, no transparent huge pages (not Linux, or `never`), the `always` mode (every
    mapping gets them already), or the hugetlb tunable set already (to anything)."""
    if not _glibc_version() >= GLIBC_MIN_VERSION:
        return None
    try:
        mode = thp_mode.read_text()
    except OSError:
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "[madvise]" not in mode or "glibc.malloc.hugetlb=" in tunables:
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables, TUNABLE)))}


def _glibc_version() -> tuple[int, ...]:
    """(2, 36) for glibc 2.36; () for any other C library."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (ValueError, OSError, AttributeError):
        return ()
    return tuple(int(part) for part in version.split(".")[:2]) if name == "glibc" else ()
