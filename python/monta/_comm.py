"""The wire under every strategy: an async equal-split AllToAll and an async AllGather.

On Gloo both run as point-to-point messages with every receive posted before any send
(`_gloo_pairwise_start`, `_gloo_gather_start`), not torch's all_to_all_single
(gloo::alltoall) or all_gather (gloo's ring); NCCL (and MPI/UCC) keep the collectives.
Buffers keep the input's dtype and device; bf16 crosses Gloo as a byte view.
"""

from typing import List, Optional

import torch
import torch.distributed as dist

from monta.errors import CommError, PlanError
from monta.groups import ProcessGroup, global_ranks

# Gloo (torch 1.13) has no bfloat16 (nor int16) kernels; AllToAll and AllGather only move
# bytes, so a byte view (last dim x2) is bit-exact. NCCL takes bf16 as is.
_GLOO_BYTES = (torch.bfloat16,)

# Tag of monta's point-to-point AllToAll messages on Gloo. Every rank of a group posts its
# AllToAlls in the same order, and Gloo matches the messages of one pair and tag in the
# order they were posted, so concurrent AllToAlls on one group (expert_overlap's dispatch
# and combine, async dispatches) pair up correctly with one tag.
_GLOO_TAG = 0x4D4F45


def wire(t: torch.Tensor, group: Optional[ProcessGroup]) -> torch.Tensor:
    if t.dtype in _GLOO_BYTES and dist.get_backend(group) == dist.Backend.GLOO:
        return t.view(torch.uint8)
    return t


def comm_error(what: str, e: RuntimeError) -> CommError:
    """One message for a collective that failed to start or to finish: posting a message to
    a peer that already died fails at once, waiting for it fails at the timeout."""
    return CommError(f"monta: {what} failed ({e}); a peer rank may have died or timed "
                     "out: stopping this rank rather than hanging")


def wait(work, what: str) -> None:
    try:
        work.wait()
    except RuntimeError as e:
        raise comm_error(what, e) from e


class Works:
    """Several async works that finish together (one per peer of a pairwise AllToAll)."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for work in self.works:
            work.wait()
        return True


def _gloo_pairwise_start(out: torch.Tensor, inp: torch.Tensor, group: ProcessGroup) -> Works:
    """An equal-split AllToAll over dim 0 as point-to-point messages, every receive posted
    before any send. torch's Gloo all_to_all_single runs gloo::alltoall, which posts each
    send before the matching receive on one connection per pair: across a rate-limited link
    the two directions then take turns, and its time is bimodal (issue 10 measured 60-80%
    of a shaped link's rate, this 90%+)."""
    size, me = dist.get_world_size(group), dist.get_rank(group)
    if inp.shape[0] % size:
        raise PlanError(f"monta: AllToAll of {inp.shape[0]} rows over a group of {size}: dim "
                        "0 must split evenly")
    n = inp.shape[0] // size
    ins = [inp.narrow(0, j * n, n) for j in range(size)]
    outs = [out.narrow(0, j * n, n) for j in range(size)]
    peers = [(me + k) % size for k in range(1, size)]
    ranks = global_ranks(group)
    works = [dist.irecv(outs[p], src=ranks[p], group=group, tag=_GLOO_TAG) for p in peers]
    works += [dist.isend(ins[p], dst=ranks[p], group=group, tag=_GLOO_TAG) for p in peers]
    outs[me].copy_(ins[me])
    return Works(works)


def _gloo_gather_start(pieces: List[torch.Tensor], inp: torch.Tensor,
                       group: ProcessGroup) -> Works:
    """AllGather as point-to-point messages, every receive posted first. torch's Gloo
    all_gather (gloo's ring allgather) moved 32 MiB between two ranks on one host's
    loopback in ~0.6 s, these messages in ~0.15 s: it was what tp_dedup's time was made
    of."""
    size, me = dist.get_world_size(group), dist.get_rank(group)
    peers = [(me + k) % size for k in range(1, size)]
    ranks = global_ranks(group)
    data = wire(inp, group)
    works = [dist.irecv(wire(pieces[p], group), src=ranks[p], group=group, tag=_GLOO_TAG + 1)
             for p in peers]
    works += [dist.isend(data, dst=ranks[p], group=group, tag=_GLOO_TAG + 1) for p in peers]
    return Works(works)


def all_to_all_start(inp: torch.Tensor, group: Optional[ProcessGroup]):
    """Starts an equal-split AllToAll over dim 0; returns (output, work)."""
    out = torch.empty_like(inp)
    try:
        if dist.get_backend(group) == dist.Backend.GLOO and dist.get_world_size(group) > 1:
            work = _gloo_pairwise_start(wire(out, group), wire(inp, group), group)
        else:
            work = dist.all_to_all_single(wire(out, group), wire(inp, group), group=group,
                                          async_op=True)
    except RuntimeError as e:
        raise comm_error("starting an AllToAll", e) from e
    return out, work


def has_gather_into_tensor(group: Optional[ProcessGroup]) -> bool:
    """NCCL (and MPI/UCC) have all_gather_into_tensor; Gloo in torch 1.13 does not."""
    return dist.get_backend(group) != dist.Backend.GLOO


class Gather:
    """An async AllGather of `inp` over `group`; `into(dst)` copies piece j to dst[:, j]."""

    def __init__(self, inp: torch.Tensor, group: Optional[ProcessGroup], size: int):
        self.size = size
        try:
            if has_gather_into_tensor(group):
                self.buffer = inp.new_empty((size,) + tuple(inp.shape))
                self.work = dist.all_gather_into_tensor(wire(self.buffer, group),
                                                        wire(inp, group), group=group,
                                                        async_op=True)
            else:
                # Gloo: t separate buffers, filled by point-to-point messages (receives
                # posted first); this rank's piece is its input itself.
                self.pieces = [inp if j == dist.get_rank(group) else torch.empty_like(inp)
                               for j in range(size)]
                self.buffer = None
                self.work = _gloo_gather_start(self.pieces, inp, group)
        except RuntimeError as e:
            raise comm_error("starting an AllGather", e) from e

    def into(self, dst: torch.Tensor, what: str) -> None:
        """dst: [E, t, rows, ...]; the reorder copy of the gathered chunk."""
        wait(self.work, what)
        if self.buffer is not None:
            dst.copy_(self.buffer.transpose(0, 1))
        else:
            for j, piece in enumerate(self.pieces):
                dst[:, j].copy_(piece)

    def pieces_list(self, what: str) -> List[torch.Tensor]:
        """Waits; the gathered pieces in group-rank order."""
        wait(self.work, what)
        return self.pieces if self.buffer is None else list(self.buffer.unbind(0))
