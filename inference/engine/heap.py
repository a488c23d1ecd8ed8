"""Gives the C heap's free memory back to the system.

Loading a model (reading the file, converting, transposing, packing) and compiling the decode
step free hundreds of megabytes that glibc's allocator keeps for later: the process's resident
memory stays at its peak though nothing uses it (the default model in fp32: 1,349 MB after
loading, 1,093 MB after a trim; with the compiled step 1,483 and 1,256). malloc_trim returns it.
"""

import ctypes


def _libc():
    """The C library this process runs on, as the process itself sees it: `find_library` would
    run `ldconfig -p` in a child process on Linux to find the same library by name."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


_LIBC = _libc()


def trim() -> bool:
    """Returns free heap pages to the system; False where the C library has no malloc_trim
    (musl, macOS), where it is a no-op."""
    trim_function = getattr(_LIBC, "malloc_trim", None)
    if trim_function is None:
        return False
    trim_function(0)
    return True
