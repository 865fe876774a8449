"""monta's two errors, below every other module (each of them raises them)."""


class PlanError(ValueError):
    """A plan that cannot run: the message names the variable or field at fault."""


class CommError(RuntimeError):
    """A collective failed (a peer died, a timeout): says which op, group and chunk."""
