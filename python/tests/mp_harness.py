"""Runs a function on N Gloo ranks (forked processes on loopback) and collects results.

A rank that raises reports its traceback; the harness waits for every process up to a
deadline and kills (then reports) any that is still running, so a hang is a failure, not a
stuck test.

The rendezvous store takes its port without a race: rank 0 binds its TCPStore on port 0
(the kernel picks a free one and the store keeps it bound), then publishes the number to
the other ranks, which connect as clients. No port is chosen before it is bound."""

import datetime
import multiprocessing as mp
import time
import traceback


def _store(rank, world, timeout, port, ready):
    """Rank 0: the store's server on a port the kernel picks; others: clients of it."""
    import torch.distributed as dist
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world, True, timeout, wait_for_workers=False)
        port.value = store.port
        ready.set()
        return store
    if not ready.wait(timeout.total_seconds()):
        raise TimeoutError(f"rank {rank}: rank 0 published no store port in {timeout}")
    return dist.TCPStore("127.0.0.1", port.value, world, False, timeout)


def _entry(fn, rank, world, port, ready, timeout_s, queue, args):
    import torch.distributed as dist
    try:
        timeout = datetime.timedelta(seconds=timeout_s)
        store = _store(rank, world, timeout, port, ready)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=timeout)
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
    """Returns {rank: ("ok", result) | ("error", text) | ("hung", "") | ("died", exitcode)}."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port, ready = ctx.Value("i", 0), ctx.Event()
    procs = [ctx.Process(target=_entry,
                         args=(fn, r, world, port, ready, pg_timeout_s, queue, args))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    end = time.monotonic() + deadline_s
    while len(results) < world and time.monotonic() < end:
        try:
            rank, status, value = queue.get(timeout=0.5)
            results[rank] = (status, value)
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
