"""How `cdlaw fit` uses the CPU's threads: OpenBLAS held to one, chunks of starts on a pool.

A fit's BLAS calls are tiny, so OpenBLAS's own worker threads only cost wake-up latency;
single_threaded_blas / with_single_threaded_blas pin every loaded OpenBLAS to one thread
for the duration of a fit. Parallelism comes instead from evaluating chunks of starts on
a thread pool (objective_threads, objective_pool), used by cdlaw.fit.problem.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager


@contextmanager
def single_threaded_blas():
    """Run the block with OpenBLAS on one thread, then restore its setting.

    A fit's BLAS calls are tiny (a dozen parameters; scipy's L-BFGS-B works on 11×20
    matrices): OpenBLAS's worker threads only add wake-up latency, and on a busy machine
    they made each scipy iteration ~40× slower. Parallelism here comes from running
    chunks of starts on threads instead. Does nothing where OpenBLAS is not loaded.
    """
    import scipy.optimize  # noqa: F401  (loads scipy's own OpenBLAS, so it is found too)

    handles = []
    for get, set_ in openblas_thread_functions():
        try:
            handles.append((set_, get()))
            set_(1)
        except Exception:  # an unusual build: leave it alone
            pass
    try:
        yield
    finally:
        for set_, n in handles:
            set_(n)


def with_single_threaded_blas(fn):
    """Decorator: run fn inside single_threaded_blas()."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper


def openblas_thread_functions():
    """(get, set) num-threads functions of every OpenBLAS this process has loaded (Linux)."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    except OSError:
        return []
    out = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("", ""), ("", "64_"), ("scipy_", ""), ("scipy_", "64_")):
            get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                set_.argtypes = [ctypes.c_int]
                out.append((get, set_))
                break
    return out


def objective_threads() -> int:
    """Worker threads for the objective: CDLAW_FIT_THREADS, else every core (at most 8)."""
    import os

    env = os.environ.get("CDLAW_FIT_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cores or 1))


@functools.cache
def objective_pool(workers: int):
    """The shared thread pool that evaluates chunks of starts (one per worker count)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers, thread_name_prefix="cdlaw-fit")
