"""How many threads a ``glitchlens`` command gives torch.

Every operation torch splits across threads ends at a barrier where the threads wait for the
slowest. On a machine whose cores are busy with other work, one of them is often descheduled,
and each barrier then waits for the scheduler to give it a core back: on a shared 2-core
machine two threads ran a forward 10-18x slower than one. Two things keep that away:

- the threads wait at a barrier asleep (``OMP_WAIT_POLICY=PASSIVE``), not spinning on the
  core their descheduled partner needs (on that machine, under a load average of 13, a
  forward at two threads took 0.84x one thread's time asleep, 4.4x spinning and 9.9x with
  OpenMP's default);
- a command uses the cores that are idle, as the load average counts them, and never fewer
  than one; ``--threads N`` (or ``OMP_NUM_THREADS`` in the environment) says how many instead.

Nothing here imports torch: both go to the environment, which OpenMP reads when torch is first
imported, and which the processes a command starts (a sweep's runs) inherit. A policy set in the
environment is kept.
"""

from __future__ import annotations

import os
import sys

# The environment variables this module reads, {name: (default, meaning)} (docs/reference/environment.md).
ENVIRONMENT_VARIABLES = {
    "OMP_NUM_THREADS": ("(unset)", "torch threads of a glitchlens command when --threads is not given; unset: the "
                                   "cores the load average leaves idle, at least 1 (a command sets it for the "
                                   "processes it starts)"),
    "OMP_WAIT_POLICY": ("PASSIVE", "how OpenMP threads wait at a barrier: a glitchlens command sets PASSIVE "
                                   "(asleep) unless it is set, so that on a busy machine a waiting thread does not "
                                   "take the core a descheduled partner needs")}


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def idle_cores(cpus: int | None = None, load: float | None = None) -> int:
    """``cpus`` less the cores the other work keeps busy (the 1-minute load average, rounded),
    at least 1: the threads a command can run without waiting for cores others hold."""
    cpus = usable_cpus() if cpus is None else cpus
    load = os.getloadavg()[0] if load is None else load
    return max(1, min(cpus, cpus - round(load)))


def choose_threads(requested: int | None) -> int:
    """``requested`` (``--threads``) if given, else ``OMP_NUM_THREADS`` if set to a positive
    integer, else :func:`idle_cores`."""
    if requested is not None:
        return requested
    configured = os.environ.get("OMP_NUM_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return idle_cores()


def use_threads(requested: int | None) -> int:
    """Give torch :func:`choose_threads`'s count, now if it is imported, else when it is (and
    the processes started from here): returns the count."""
    threads = choose_threads(requested)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # read once, when torch loads OpenMP
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads
