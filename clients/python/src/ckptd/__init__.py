"""Python client for ckptd, the durable checkpoint/resume sidecar daemon.

``Client`` (threads) and ``AsyncClient`` (asyncio) spawn ``ckptd`` and speak its JSON-RPC
protocol (docs/protocol.md) over stdin/stdout; states travel as raw frame attachments.
"""

from __future__ import annotations

from ._common import (
    DEFAULT_RETRYABLE,
    NO_STATE,
    PROTOCOL_VERSION,
    Checkpoint,
    CompensationAction,
    ProtocolVersionWarning,
    ResumePlan,
    Workflows,
    __version__,
    find_binary,
)
from .aio import AsyncClient, AsyncStep, AsyncWorkflow, AsyncWorkflows
from .claim import AsyncClaim, Claim
from .client import Client
from .errors import (
    BinaryNotFound,
    CheckpointCorrupt,
    CheckpointNotFound,
    Claimed,
    ClaimLost,
    CkptdError,
    ClientClosed,
    ClientForked,
    Conflict,
    DaemonDied,
    FramingError,
    InternalError,
    Interrupted,
    InvalidParams,
    MethodNotFound,
    ProtocolError,
    ResumeValidationError,
    ShuttingDown,
    StorageUnavailable,
    TooLarge,
    WrongEventLoop,
)
from .workflow import RollbackFailed, Step, Workflow

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "Workflow",
    "Step",
    "AsyncWorkflow",
    "AsyncStep",
    "Workflows",
    "AsyncWorkflows",
    "Claim",
    "AsyncClaim",
    "Checkpoint",
    "ResumePlan",
    "CompensationAction",
    "RollbackFailed",
    "NO_STATE",
    "DEFAULT_RETRYABLE",
    "find_binary",
    "PROTOCOL_VERSION",
    "ProtocolVersionWarning",
    "CkptdError",
    "ProtocolError",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "CheckpointNotFound",
    "CheckpointCorrupt",
    "Conflict",
    "TooLarge",
    "ResumeValidationError",
    "StorageUnavailable",
    "ShuttingDown",
    "Claimed",
    "ClaimLost",
    "DaemonDied",
    "BinaryNotFound",
    "ClientClosed",
    "ClientForked",
    "WrongEventLoop",
    "FramingError",
    "Interrupted",
]
