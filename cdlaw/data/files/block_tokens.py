"""Tokenising a corpus's blocks: in this process, in worker processes (one per core by
default), or as Ray tasks — each block written atomically into the cache, so every way
gives the same files and a killed preparation resumes at the first missing block.

Entry point: `tokenise_blocks(jobs, workers, on_block)`; `Workers` says how. A job is a
small frozen record with a `run()` that writes its blocks and returns a BlockDone: a real
corpus's training block (`BlockJob`, here), a bucket of its paraphrase passes
(joined.PassesJob), or a block of the embedded corpus
(embedded_corpus.EmbeddedJob). Their modules import no more than a worker needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Protocol

import numpy as np

from cdlaw.system.errors import BadInput
from cdlaw.system.lifetime import die_with_parent, init_ray

EXECUTORS = ("local", "ray")
ONE_THREAD = "TOKENIZERS_PARALLELISM"  # "false": the tokenizer encodes on one thread


@dataclass(frozen=True)
class BlockDone:
    """One finished job, for progress: its documents, tokens and text bytes, whether it was
    already in the cache (a resumed preparation), and the derived strategy whose passes it
    was (`derived`; then `documents` counts each document once per pass), or "" for
    training blocks."""

    documents: int
    tokens: int
    text_bytes: int
    cached: bool
    derived: str = ""


class Job(Protocol):
    """What tokenise_blocks runs: a picklable record whose run() writes its blocks."""

    def run(self) -> BlockDone: ...


@dataclass(frozen=True)
class Workers:
    """How a real corpus's blocks are tokenised (the same tokens every way).

    count: worker processes (local) or tasks in flight (ray); 0 means one per core.
    executor: "local" (processes on this machine) or "ray" (tasks on a Ray cluster, the
        cache on storage every node sees).
    ray_address: the cluster to join (None: the running one, or a local Ray).
    progress: called as progress(done, total) after every job, cached ones included: the
        BlockDone, and how many documents there are in all of its kind (training
        documents; or, for paraphrase passes, documents times passes).
    """

    count: int = 0
    executor: str = "local"
    ray_address: str | None = None
    progress: Callable[[BlockDone, int], None] | None = None

    def check(self) -> None:
        """BadInput for an unknown executor or a negative count (and RuntimeError in a
        worker re-running an unguarded script: refuse_in_bootstrap)."""
        refuse_in_bootstrap()
        if self.executor not in EXECUTORS:
            raise BadInput(f"--executor must be local or ray, got {self.executor!r}")
        if self.count < 0:
            raise BadInput(f"--workers must be ≥ 0 (0: one per core), got {self.count}")


@dataclass(frozen=True)
class BlockJob:
    """Tokenise the documents at byte ranges `spans` of the store's texts file `texts`
    into the block file `out`."""

    texts: str
    tokenizer: str
    eos_id: int
    dtype: str
    spans: np.ndarray  # (documents, 2): each one's start and end in texts, training order
    out: str

    def run(self) -> BlockDone:
        return tokenise_block(self)


def tokenise_block(job: BlockJob) -> BlockDone:
    """Read a block's texts from the store, tokenise them and write the block atomically."""
    from cdlaw.data.files.doc_store import read_spans
    from cdlaw.data.tokens import cache as corpus_cache
    from cdlaw.data.tokens import tokenizer

    texts = read_spans(Path(job.texts), job.spans)
    tok = corpus_cache.load_tokenizer_once(job.tokenizer)
    tokens, ends = tokenizer.encode_documents(tok, texts, job.eos_id, np.dtype(job.dtype))
    corpus_cache.save_block(Path(job.out), tokens, ends)
    text_bytes = int((job.spans[:, 1] - job.spans[:, 0]).sum())
    return BlockDone(len(texts), len(tokens), text_bytes, cached=False)


def _one_thread_block(job: Job) -> BlockDone:
    """A job in a worker: one tokenizer thread each, as the workers share the cores."""
    os.environ[ONE_THREAD] = "false"
    return job.run()


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def tokenise_blocks(
    jobs: Sequence[Job], workers: Workers, on_block: Callable[[BlockDone], None]
) -> None:
    """Run every job, calling on_block(done) as each finishes (in finishing order).

    One job, or one worker, runs here (the tokenizer's own threads use the cores); more run
    in `workers.count` spawned processes or as Ray tasks. An exception from on_block stops
    the run: blocks already written stay, the rest are not started.
    """
    if workers.executor == "ray":
        _on_ray(jobs, workers, on_block)
        return
    import multiprocessing

    count = min(workers.count or cores(), len(jobs))
    if count <= 1 or multiprocessing.current_process().daemon:  # a pool's worker has no children
        for job in jobs:
            on_block(job.run())
        return
    _in_processes(jobs, count, on_block)


def _in_processes(jobs: Sequence[Job], count: int, on_block) -> None:
    import concurrent.futures as cf
    import multiprocessing

    # spawn: workers start lean (no copy of this process's datasets and Arrow pages) and
    # never inherit the tokenizer's thread pool; they get one tokenizer thread each from
    # the environment they start with (this process only waits meanwhile).
    saved = os.environ.get(ONE_THREAD)
    os.environ[ONE_THREAD] = "false"
    try:
        spawn = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(
            count, mp_context=spawn, initializer=die_with_parent, initargs=(os.getpid(),)
        ) as pool:
            todo = iter(jobs)
            running = {pool.submit(_one_thread_block, j) for j in islice(todo, 2 * count)}
            try:
                while running:
                    finished, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                    running |= {
                        pool.submit(_one_thread_block, j) for j in islice(todo, len(finished))
                    }
                    for future in finished:
                        on_block(future.result())
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        if saved is None:
            os.environ.pop(ONE_THREAD, None)
        else:
            os.environ[ONE_THREAD] = saved


def refuse_in_bootstrap() -> None:
    """A spawned worker re-runs its parent's __main__ script; one without an
    `if __name__ == "__main__":` guard would prepare again there, and wait forever on the
    cache lock its parent holds. Say so instead, as multiprocessing itself does."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "cdlaw's preparation workers re-ran this script: put its code under "
            '`if __name__ == "__main__":` (or pass Workers(1) to prepare in one process)'
        )


def _on_ray(jobs: Sequence[Job], workers: Workers, on_block) -> None:
    import ray  # the CLI names the extra when it is missing (require_ray_extra)

    init_ray(ray, workers.ray_address)
    task = ray.remote(_one_thread_block).options(num_cpus=1, max_retries=2)
    in_flight = workers.count or int(ray.cluster_resources().get("CPU", 1))
    todo = iter(jobs)
    running = [task.remote(j) for j in islice(todo, 2 * in_flight)]
    try:
        while running:
            finished, running = ray.wait(running, num_returns=1)
            running += [task.remote(j) for j in islice(todo, len(finished))]
            for done in ray.get(finished):
                on_block(done)
    except BaseException:
        for ref in running:
            ray.cancel(ref)
        raise
