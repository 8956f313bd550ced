"""The address-space cap of the suite's worker processes (template analysis, round trip, offline
implementations): untrusted input there can ask for gigabytes, and a capped process gets a MemoryError."""

from __future__ import annotations


def limit_memory(limit: int) -> None:
    """Cap this process's address space at `limit` (or the lower limit it already has)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    capped = min([limit, *(value for value in (soft, hard) if value != resource.RLIM_INFINITY)])
    resource.setrlimit(resource.RLIMIT_AS, (capped, hard))
