"""Trainyard's in-job SDK: log metrics, write and find checkpoints, notice preemption.

    import trainyard
    trainyard.set_total_steps(1000)
    for step in range(start, 1000):
        ...
        trainyard.log(step + 1, loss=loss.item())
        if trainyard.checkpoint_due(step + 1) or trainyard.should_stop():
            with trainyard.checkpoint(step + 1, metrics={"loss": loss.item()}) as path:
                torch.save(state, path)
            if trainyard.should_stop():
                break

The run-directory protocol the node agent reads is documented in :mod:`trainyard.job`.
"""

from trainyard.job import (
    Checkpoint,
    attempt,
    checkpoint,
    checkpoint_dir,
    checkpoint_due,
    close,
    in_portal,
    init,
    init_checkpoint,
    latest_checkpoint,
    local_rank,
    log,
    log_artifact,
    params,
    rank,
    record_lineage,
    run_dir,
    run_id,
    set_total_steps,
    should_stop,
    world_size,
)

__version__ = "0.1.0"

# The REST client is imported on first use: a training job importing the SDK should not pay for
# urllib.request and friends.
_CLIENT_NAMES = frozenset(
    {
        "Client",
        "ApiError",
        "ValidationError",
        "AuthError",
        "PermissionDenied",
        "NotFoundError",
        "ConflictError",
        "RateLimited",
        "ServerError",
        "ConnectionFailed",
        "NotTheApi",
    }
)


def __getattr__(name: str) -> object:
    if name in _CLIENT_NAMES:
        from trainyard import client

        return getattr(client, name)
    raise AttributeError(f"module 'trainyard' has no attribute {name!r}")


__all__ = [
    "ApiError",
    "AuthError",
    "Checkpoint",
    "Client",
    "ConflictError",
    "ConnectionFailed",
    "NotFoundError",
    "NotTheApi",
    "PermissionDenied",
    "RateLimited",
    "ServerError",
    "ValidationError",
    "__version__",
    "attempt",
    "checkpoint",
    "checkpoint_dir",
    "checkpoint_due",
    "close",
    "in_portal",
    "init",
    "init_checkpoint",
    "latest_checkpoint",
    "local_rank",
    "log",
    "log_artifact",
    "params",
    "rank",
    "record_lineage",
    "run_dir",
    "run_id",
    "set_total_steps",
    "should_stop",
    "world_size",
]
