"""DeepSpeed-shaped primitives (deepspeed.moe.mappings / sharded_moe) on explicit groups,
for code that wires the pieces itself; differentiable, dtype and device kept."""

from typing import Optional

import torch
import torch.distributed as dist

from monta import _comm
from monta.errors import PlanError
from monta.groups import ProcessGroup


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, x):
        ctx.group = group
        out, work = _comm.all_to_all_start(x.contiguous(), group)
        _comm.wait(work, "AllToAll")
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, _AllToAll.apply(ctx.group, grad)


def _gather_along(x: torch.Tensor, dim: int, group: Optional[ProcessGroup]) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return x
    gather = _comm.Gather(x.contiguous(), group, size)
    return torch.cat(gather.pieces_list("AllGather of tokens on the tensor-parallel group"), dim)


def _drop_along(x: torch.Tensor, dim: int, group: Optional[ProcessGroup]) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return x
    if x.shape[dim] % size:
        raise PlanError(f"monta: dimension {dim} of size {x.shape[dim]} is not divisible by the "
                        f"group size {size}")
    n = x.shape[dim] // size
    return x.narrow(dim, dist.get_rank(group) * n, n).contiguous()


class _DropOrGather(torch.autograd.Function):
    """A drop of x's slice along `dim` (gather=False) or the gather of every rank's
    (gather=True); each one's backward is the other (the tensor is replicated over the
    group, as DeepSpeed's and Megatron's tensor-parallel region)."""

    @staticmethod
    def forward(ctx, x, dim, group, gather):
        ctx.dim, ctx.group, ctx.gather = dim, group, gather
        return (_gather_along if gather else _drop_along)(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        adjoint = _drop_along if ctx.gather else _gather_along
        return adjoint(grad, ctx.dim, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, group: Optional[ProcessGroup]) -> torch.Tensor:
    """DeepSpeed's `_AllToAll.apply(group, x)`."""
    return _AllToAll.apply(group, x)


def drop_tokens(x: torch.Tensor, dim: int, group: Optional[ProcessGroup]) -> torch.Tensor:
    """DeepSpeed's `drop_tokens(x, dim)` on an explicit TP group."""
    return _DropOrGather.apply(x, dim, group, False)


def gather_tokens(x: torch.Tensor, dim: int, group: Optional[ProcessGroup]) -> torch.Tensor:
    """DeepSpeed's `gather_tokens(x, dim)` on an explicit TP group."""
    return _DropOrGather.apply(x, dim, group, True)
