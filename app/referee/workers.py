"""The referee's worker processes, which end with the referee: a run's simulated hosts are real
processes and folders, stopped by `run_task`'s `finally` as on ^C. So SIGTERM is ^C; a worker has
its own process group; on ^C, SIGTERM or an error every worker gets SIGTERM and `END_WAIT_S`,
then is killed; an orphaned worker ends itself within a second.

Not `multiprocessing.Pool` (its `terminate` waits without bound and starts fresh workers) nor
`ProcessPoolExecutor` (its workers ran on after a SIGTERM to the referee)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

PARENT_POLL_S = 1.0
# how long a worker is given to stop its run's market and hosts before it is killed (a market
# stops in a second or two; its thread is given 30 s at most: `SimServer.stop_thread`)
END_WAIT_S = 40.0


def _as_sigint(_signum: int, frame: Any) -> None:
    """What ^C does now (inside `asyncio.run`: cancel the run), even where ^C is ignored (a
    background job of a script): SIGTERM must end it all the same."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextmanager
def _signals(handlers: dict[signal.Signals, Any]) -> Iterator[None]:
    """These handlers while inside, the earlier ones back after (main thread only: Python
    runs signal handlers there alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch_parent(parent: int, poll_s: float) -> None:
    # a signal sent to the process may land on any thread that does not block it, and only the
    # main thread runs Python's handlers: one that landed here could leave an idle worker's
    # main thread asleep on the task queue
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)


def _serve(fn: Callable[[Any], Any], tasks: Any, results: Any, parent: int, poll_s: float) -> None:
    """One worker: runs (index, item) from `tasks` until a None, each answer onto `results`."""
    os.setpgid(0, 0)  # out of the terminal's group: the referee alone hears ^C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    signal.signal(signal.SIGTERM, _as_sigint)
    threading.Thread(target=_watch_parent, args=(parent, poll_s), daemon=True).start()
    try:
        while (task := tasks.get()) is not None:
            index, item = task
            try:
                results.put((index, True, fn(item)))
            except Exception as exc:  # the referee raises it; the worker goes on to the next
                results.put((index, False, _portable(exc)))
    except KeyboardInterrupt:
        pass  # ended by the referee: the run's own `finally` has cleaned up


def _portable(exc: Exception) -> Exception:
    """`exc` if it crosses to the referee whole (a queue pickles in a thread of its own, and
    drops what it cannot pickle), else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _end(
    procs: Sequence[multiprocessing.process.BaseProcess],
    wait_s: float,
    clock: Callable[[], float] = time.monotonic,  # wall time: processes, not the market
) -> None:
    """SIGTERM to each, a bounded wait for their cleanup, then SIGKILL to what is left."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = clock() + wait_s
    for p in procs:
        p.join(max(0.0, deadline - clock()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)


def run_in_workers(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    end_wait_s: float = END_WAIT_S,
    poll_s: float = PARENT_POLL_S,
) -> list[R]:
    """`fn` over `items` in `workers` spawned processes; results in order. Whatever ends this early
    ends every worker and their runs with it."""
    # spawn: a fresh interpreter per worker; forking a process that holds sim threads is unsafe
    ctx = multiprocessing.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for task in enumerate(items):
        tasks.put(task)
    for _ in range(workers):
        tasks.put(None)
    procs = [
        ctx.Process(target=_serve, args=(fn, tasks, results, os.getpid(), poll_s), daemon=True)
        for _ in range(workers)
    ]
    out: dict[int, R] = {}
    with _signals({signal.SIGTERM: _as_sigint}):
        try:
            for p in procs:
                p.start()
            while len(out) < len(items):
                try:
                    index, ok, value = results.get(timeout=poll_s)
                except queue.Empty:
                    if not any(p.is_alive() for p in procs) or any(
                        p.exitcode not in (None, 0) for p in procs
                    ):
                        raise RuntimeError(
                            "a referee worker ended before its runs were done"
                        ) from None
                    continue
                if not ok:
                    raise value
                out[index] = value
        except BaseException:
            # ^C and SIGTERM ignored meanwhile: the workers' cleanup is not cut short
            with _signals({signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}):
                _end(procs, end_wait_s)
            raise
        finally:
            for p in procs:
                p.join(end_wait_s)
    return [out[i] for i in range(len(items))]


def run_all(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """`fn` over `items`: here, one after another, with one worker (SIGTERM still ends the run
    in hand as ^C does, its market stopped); else in `workers` processes."""
    if workers <= 1 or len(items) <= 1:
        with _signals({signal.SIGTERM: _as_sigint}):
            return [fn(item) for item in items]
    return run_in_workers(fn, items, workers)
