"""Running the runs of a sweep: ``jobs`` at a time on this machine, or as tasks on a Ray cluster.

Either way each run is ``function(*args)`` in a process of its own, the results come back in the
order of the runs, and a run that raises loses no other: the sweep goes on, and after its last run
:class:`SweepFailed` names the runs that failed. Runs write their outputs themselves, so on a
cluster of more than one machine they must write to a filesystem that every node mounts at the
same path, and every node needs this project installed.

A worker on this machine dies with the sweep: killed (even with SIGKILL, which the sweep cannot
forward), the sweep's process leaves its workers word of it (a parent-death signal, ``prctl``,
on Linux; elsewhere a thread of each worker that watches for its parent to go): a run training
gets one SIGTERM, saves its checkpoint at its next step and stops; no run starts after it.

Ray addresses are ``ray.init``'s: ``local`` starts a Ray instance on this machine with ``jobs``
CPUs for the sweep; ``auto`` joins the cluster this machine is a node of (``ray start``);
``host:6379`` is a cluster's head node, reached from one of its nodes; ``ray://host:10001`` is a
cluster's head node through the Ray Client, from a machine outside the cluster.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing, contextmanager, suppress


RAY_MISSING = "Ray is not installed; install the ray extra: pip install -e '.[ray]'"


class SweepFailed(RuntimeError):
    """Some runs of a sweep raised; every other run finished."""

    def __init__(self, failures: dict[str, BaseException], runs: int):
        self.failures = failures
        listing = "; ".join(f"{name}: {type(err).__name__}: {err}" for name, err in failures.items())
        super().__init__(f"{len(failures)} of {runs} runs failed ({listing}); the other runs finished")


SHOW_PROGRESS = True   # the bar over the runs of :func:`run_all`, on stderr; `glitchlens reproduce --quiet` clears it


def run_all(function: Callable, runs: dict[str, tuple], jobs: int = 2, ray_address: str | None = None,
            sizes: dict[str, int] | None = None) -> list:
    """``function(*args)`` for every ``name: args`` of ``runs``: ``jobs`` at a time on this machine,
    or, given ``ray_address``, as one-CPU tasks on that Ray cluster. Returns the results in the
    order of ``runs``; raises :class:`SweepFailed` once every run has ended if any raised.
    ``sizes``: how many runs each item trains (a group of batched seeds), so the bar counts runs."""
    from tqdm import tqdm   # here, not at the top: the CLI's parser imports this module

    finished = _on_ray(function, runs, jobs, ray_address) if ray_address else _here(function, runs, jobs)
    results, failures = {}, {}
    # ends of runs, not steps: the estimate of what is left is the mean time per run so far;
    # closing(): an interrupt here, between two runs' ends, still stops the workers before it goes on
    bar_format = "{n_fmt}/{total_fmt} runs done [{elapsed} so far, {remaining} left]"
    sizes = sizes or dict.fromkeys(runs, 1)
    with closing(finished), tqdm(total=sum(sizes.values()), bar_format=bar_format,
                                 disable=not SHOW_PROGRESS) as progress:
        for name, result, error in finished:
            if error is None:
                results[name] = result
            else:
                failures[name] = error
                progress.write(f"{name} failed: {type(error).__name__}: {error}")
            progress.update(sizes[name])
    if failures:
        raise SweepFailed(failures, len(runs))
    return [results[name] for name in runs]


Finished = Iterator[tuple[str, object, BaseException | None]]   # (name, result, error) as each run ends


# How long the workers of an interrupted sweep have to save and stop before they are killed: a
# step of the largest CPU scale and a save take seconds; a worker still busy after this is stuck.
STOP_GRACE_S = 30.0


def _here(function: Callable, runs: dict[str, tuple], jobs: int) -> Finished:
    """The runs in ``jobs`` worker processes. A stop signal to the sweep (Ctrl-C, SIGTERM or
    SIGHUP, to it alone or to its process group) is forwarded to every worker as one SIGINT (the
    workers run in process groups of their own, so a terminal's Ctrl-C reaches them only this
    way): each run it finds training saves its checkpoint and stops (:func:`_run_in_worker`),
    no run starts after it, and once every worker has stopped, or after :data:`STOP_GRACE_S`
    seconds has been killed, the sweep raises KeyboardInterrupt, so that nothing is still
    writing when the command returns. Further signals meanwhile change nothing."""
    # spawn, not fork: a forked child inherits the parent's OpenMP state, which can hang it
    context = multiprocessing.get_context("spawn")
    stopping = context.Event()
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                               initargs=(stopping, os.getpid()))

    def stop(signum, frame):
        if not stopping.is_set():
            stopping.set()
            raise KeyboardInterrupt

    previous, futures = _install(stop), {}
    try:
        futures = {pool.submit(_run_in_worker, function, *args): name for name, args in runs.items()}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], None if error else future.result(), error
    finally:
        # the pool hands a waiting run to each worker ahead of time, out of reach of cancel_futures
        stopping.set()
        if not all(future.done() for future in futures):   # a stop (or an error here): the runs save and stop
            for pid in _worker_pids(pool):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
        _stop_pool(pool, STOP_GRACE_S)
        _install(previous)


def _install(handler) -> dict:
    """``handler`` (one, or a dict by signal) for the stop signals; returns the ones replaced
    (none outside the main thread, where signals cannot be handled)."""
    from interp.training.setup import STOP_SIGNALS

    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = handler if isinstance(handler, dict) else dict.fromkeys(STOP_SIGNALS, handler)
    # None: a handler that was not set from Python, which cannot be put back
    return {signum: signal.signal(signum, new) for signum, new in handlers.items() if new is not None}


def _worker_pids(pool: ProcessPoolExecutor) -> list[int]:
    return list(pool._processes or {})   # the executor keeps its processes by pid, with no public accessor


def _stop_pool(pool: ProcessPoolExecutor, grace_s: float) -> None:
    """Shut the pool down: no run starts any more, the runs in progress have ``grace_s`` seconds
    to end (an interrupted one saves its checkpoint), then the workers still alive are killed."""
    processes = list((pool._processes or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=True)


_stopping = None   # in a worker: the sweep's event, set once no run may start
_parent = None     # in a worker: the sweep's pid
_running = False   # in a worker: whether a run is in progress
_orphaned = False  # in a worker: whether the sweep is gone
# The kernel's word to a worker that the sweep died. It may come more than once (once per thread
# of the sweep that the worker is handed to as it dies), so it is not the runs' stop signal itself,
# whose second arrival would interrupt a run at once instead of letting it save.
PARENT_DIED = signal.SIGUSR1
PR_SET_PDEATHSIG = 1           # prctl(2)
WATCH_PARENT_S = 1.0           # where there is no parent-death signal: how often a worker looks


def _start_worker(stopping, parent: int) -> None:
    """A worker ignores Ctrl-C between runs: one interrupted while it waits for the next run would
    die, and its pool with it (leaving semaphores for the resource tracker to complain about). It
    receives :data:`PARENT_DIED` when the sweep's process ``parent`` dies, however it dies."""
    global _stopping, _parent
    _stopping, _parent = stopping, parent
    os.setpgrp()   # out of the terminal's process group: the sweep forwards one SIGINT itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(PARENT_DIED, _parent_died)
    if not _parent_death_signal(PARENT_DIED):
        threading.Thread(target=_watch_parent, daemon=True, name="watch-sweep").start()
    if os.getppid() != parent:   # it died before the signal was asked for
        os.kill(os.getpid(), PARENT_DIED)


def _parent_death_signal(signum: int) -> bool:
    """Ask the kernel for ``signum`` when this process's parent dies (Linux); whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parent_died(signum, frame) -> None:
    """The sweep is gone: a run in progress gets one SIGTERM (a training run saves its step and
    stops), an idle worker exits; a repeat of the news changes nothing."""
    global _orphaned
    if _orphaned:
        return
    _orphaned = True
    if not _running:
        os._exit(1)
    os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent() -> None:
    """Send this worker :data:`PARENT_DIED` once its parent is gone (it is adopted: another ppid)."""
    while os.getppid() == _parent:
        time.sleep(WATCH_PARENT_S)
    os.kill(os.getpid(), PARENT_DIED)


def _run_in_worker(function: Callable, *args):
    """``function(*args)``, with Ctrl-C interrupting it (a training run turns the interrupt into a
    checkpoint and a stop: ``interp.training.setup.GracefulInterrupt``), unless the sweep is stopping."""
    global _running
    if _stopping.is_set():
        raise KeyboardInterrupt("the sweep was interrupted before this run started")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _running = True
    try:
        return function(*args)
    finally:
        _running = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if _orphaned or os.getppid() != _parent:   # the sweep died: no one waits for this run's result
            os._exit(1)


def _on_ray(function: Callable, runs: dict[str, tuple], jobs: int, address: str) -> Finished:
    ray = _import_ray()
    with ray_session(address, jobs):
        task = ray.remote(num_cpus=1)(function)
        pending = {task.remote(*args): name for name, args in runs.items()}
        while pending:
            (ready,), _ = ray.wait(list(pending))
            try:
                result, error = ray.get(ready), None
            except ray.exceptions.RayTaskError as err:   # the run raised: report its own exception
                result, error = None, err.cause
            except ray.exceptions.RayError as err:       # its worker or node was lost
                result, error = None, err
            yield pending.pop(ready), result, error


@contextmanager
def ray_session(address: str, cpus: int):
    """Connected to the Ray cluster at ``address`` (``local``: a new instance with ``cpus`` CPUs)
    for the block; a connection made before it is used as it is and left open."""
    ray = _import_ray()
    if ray.is_initialized():
        yield
        return
    # a new local instance takes the sweep's size; a running cluster's resources are its own
    options = {"num_cpus": cpus, "include_dashboard": False} if address == "local" else {}
    ray.init(address=address, **options)
    try:
        yield
    finally:
        ray.shutdown()


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise RuntimeError(RAY_MISSING) from err
    return ray
