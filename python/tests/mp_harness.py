"""Runs a function on N Gloo ranks (forked processes on loopback) and collects results.

A rank that raises reports its traceback; the harness waits for every process up to a
deadline and kills (then reports) any that is still running, so a hang is a failure, not a
stuck test."""

import datetime
import multiprocessing as mp
import os
import socket
import time
import traceback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world, port, timeout_s, queue, args):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
        result = fn(rank, world, *args)
        # Rank 0 hosts the rendezvous store: nobody leaves while another still needs it.
        dist.barrier()
        queue.put((rank, "ok", result))
    except BaseException as e:  # report everything, incl. SystemExit
        queue.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        queue.close()
        queue.join_thread()


def run(fn, world: int, args=(), pg_timeout_s: float = 30, deadline_s: float = 300):
    """Returns {rank: ("ok", result) | ("error", text) | ("hung", "") | ("died", exitcode)}.

    The store's port is picked free, then bound by rank 0 a moment later; on a busy host
    another process can take it in between. Then rank 0 reports "Address already in use"
    before any collective, and the run starts over on another port (3 tries)."""
    for _ in range(3):
        results = _run_once(fn, world, args, pg_timeout_s, deadline_s)
        status, value = results.get(0, ("", ""))
        if not (status == "error" and "Address already in use" in str(value)
                and "init_process_group" in str(value)):
            return results
    return results


def _run_once(fn, world, args, pg_timeout_s, deadline_s):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, pg_timeout_s, queue, args))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    end = time.monotonic() + deadline_s
    while len(results) < world and time.monotonic() < end:
        try:
            rank, status, value = queue.get(timeout=0.5)
            results[rank] = (status, value)
            if rank == 0 and status == "error" and "Address already in use" in value:
                end = time.monotonic()  # the others wait for a store that is not there
        except Exception:  # queue.Empty: poll the processes
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
    for r, p in enumerate(procs):
        p.join(timeout=max(0.1, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
            results.setdefault(r, ("hung", ""))
        else:
            results.setdefault(r, ("died", p.exitcode))
    return results
