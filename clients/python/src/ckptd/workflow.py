"""Step-by-step checkpointing for a workflow (sync version; ``ckptd.aio`` has the async one).

::

    with client.workflow("wf-1", workflow_hash="sha256:...") as wf:
        wf.resume()                          # where to start, and the state to continue from
        for i, name in enumerate(["fetch", "parse", "summarize"]):
            if not wf.should_run(i):
                continue                     # done before the crash
            with wf.step(name, index=i) as s:
                s.state = run(name, s.input) # default: carry the previous state

Each step saves ``before_step`` on entry and, on exit, ``completed`` (with ``s.state``),
``failed`` (``error: {message, retryable}``, re-raising the exception) or ``interrupted``
(KeyboardInterrupt, SIGTERM, SystemExit, cancellation), so ``resume/plan`` knows where to restart.
"""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from . import _common as C
from ._common import ResumePlan, deferred_signals, in_main_thread
from .errors import CheckpointNotFound, Claimed, Interrupted

if TYPE_CHECKING:
    from .claim import _ClaimBase
    from .client import Client

__all__ = ["Workflow", "Step", "install_sigterm", "restore_sigterm"]

log = logging.getLogger("ckptd")

_SIGTERM = getattr(signal, "SIGTERM", None)


def _raise_interrupted(signum: int, frame: Optional[FrameType]) -> None:
    raise Interrupted(signum)


def install_sigterm() -> Any:
    """In the main thread, makes SIGTERM raise :class:`Interrupted`; returns the previous handler
    (a token for :func:`restore_sigterm`), or ``None`` if nothing was installed."""
    if _SIGTERM is None or not in_main_thread():
        return None
    try:
        return (signal.signal(_SIGTERM, _raise_interrupted),)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        return None


def restore_sigterm(token: Any) -> None:
    if token is None or _SIGTERM is None:
        return
    prev = token[0]
    signal.signal(_SIGTERM, prev if prev is not None else signal.SIG_DFL)


_INPUT: Any = object()  # "the step's input state" (saved from its encoded bytes)


class _WorkflowBase:
    """State shared by the sync and async workflow helpers."""

    def __init__(
        self,
        workflow_id: str,
        *,
        workflow_hash: Optional[str] = None,
        sources: Optional[C.Sources] = None,
        namespace: str = "",
        initial_state: Any = None,
        retryable: Tuple[type, ...] = C.DEFAULT_RETRYABLE,
        complete_on_exit: bool = False,
        preserve_on_complete: bool = False,
        force: bool = False,
        metadata: Optional[Mapping[str, Any]] = None,
        drift_as_warning: bool = False,
        claim: Optional["_ClaimBase"] = None,
        sources_root: Optional[str] = None,
    ) -> None:
        if claim is not None and claim.workflow_id != workflow_id:
            raise ValueError("the claim is on workflow %r, not %r" % (claim.workflow_id, workflow_id))
        self.workflow_id = workflow_id
        #: The claim the helper works under (``client.claim(...)``): every save and the completion
        #: carry its fencing token, so a worker that lost the workflow stores nothing more.
        self.claim = claim
        #: Compare the recorded sources with the same tree checked out here (another machine's
        #: checkout) when planning the resume.
        self.sources_root = sources_root
        self.workflow_hash = workflow_hash
        #: Source paths (or drift spec dicts) recorded with each checkpoint for drift detection;
        #: sent only to daemons that report the ``drift`` capability.
        self.sources: Optional[Any] = C.sources_param(sources) if sources else None
        self.namespace = namespace
        self.retryable = tuple(retryable)
        self.complete_on_exit = complete_on_exit
        self.preserve_on_complete = preserve_on_complete
        self.force = force
        #: Source drift since the checkpoint is a warning of the resume plan, not a problem.
        self.drift_as_warning = drift_as_warning
        self.metadata = dict(metadata) if metadata else None
        #: The state to continue from: ``initial_state``, then the resume plan's, then each
        #: completed step's.
        self.state: Any = initial_state
        #: The resume plan (``None`` before :meth:`resume` or for a new workflow).
        self.plan: Optional[ResumePlan] = None
        #: Task lists from the plan, for DAG executors.
        self.completed_tasks: List[Any] = []
        self.pending_tasks: List[Any] = []
        #: The checkpointId of the last checkpoint this helper saved (the next one's parent).
        self.last_checkpoint_id: Optional[str] = None
        self._next_index = 0
        #: Indexes :meth:`should_run` said to run / to skip.
        self.ran: List[int] = []
        self.skipped: List[int] = []

    @property
    def start_step(self) -> int:
        """The first step to run: 0 for a new workflow, else the plan's ``startStep``."""
        return self.plan.start_step if self.plan is not None else 0

    def should_run(self, index: int) -> bool:
        """False for steps the resume plan says are done (``index < startStep``)."""
        run = index >= self.start_step
        if index not in self.ran and index not in self.skipped:
            (self.ran if run else self.skipped).append(index)
        return run

    def _apply_plan(self, plan: Optional[ResumePlan]) -> None:
        self.plan = plan
        if plan is None:
            return
        self.state = plan.state
        self.completed_tasks = list(plan.completed_tasks)
        self.pending_tasks = list(plan.pending_tasks)
        self.last_checkpoint_id = plan.get("checkpointId") or None
        self._next_index = plan.start_step

    def _plan_params(self) -> Dict[str, Any]:
        return dict(namespace=self.namespace or None, workflow_hash=self.workflow_hash, force=self.force,
                    drift_as_warning=self.drift_as_warning, sources_root=self.sources_root)

    def _token(self) -> Optional[int]:
        """The claim's fencing token (``None`` without a claim); raises :class:`ClaimLost` once the
        claim is known lost, before anything is sent."""
        if self.claim is None:
            return None
        self.claim.check()
        return self.claim.fencing_token

    def _refused(self, err: BaseException) -> None:
        """A write was refused: if by the claim (-32008), the claim is lost."""
        if self.claim is not None and isinstance(err, Claimed):
            self.claim._note_refusal(err)

    def _save_kwargs(self, step: "_StepBase", phase: str, state: Any, error: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        kw: Dict[str, Any] = dict(
            namespace=self.namespace or None,
            parent_id=self.last_checkpoint_id,
            phase=phase,
            step=step.index,
            step_name=step.name,
            error=error,
            completed_tasks=list(step.completed_tasks),
            pending_tasks=list(step.pending_tasks),
            workflow_hash=self.workflow_hash,
            metadata=step.metadata if step.metadata is not None else self.metadata,
            sources=self.sources if self._drift_capable() else None,
            fencing_token=self._token(),
        )
        if state is _INPUT:
            kw["state"], kw["state_type"] = step._input_bytes, step._input_type
        else:
            kw["state"] = state
        return kw

    def _drift_capable(self) -> bool:
        client = getattr(self, "client", None)
        return bool(client is not None and client.has_capability("drift"))

    def _new_index(self, index: Optional[int]) -> int:
        if index is None:
            index = self._next_index
        if index < 0:
            raise ValueError("step index must be >= 0")
        self._next_index = index + 1
        return index


class _StepBase:
    def __init__(self, wf: _WorkflowBase, name: str, index: int, metadata: Optional[Mapping[str, Any]]) -> None:
        self.workflow = wf
        self.name = name
        self.index = index
        self.metadata = dict(metadata) if metadata else None
        #: The state the step starts from (the previous step's, or the resume plan's).
        self.input: Any = wf.state
        #: The state to save when the step completes; defaults to the input state (the same
        #: object: mutating it in place is fine, the input was already serialised).
        self.state: Any = wf.state
        # The input, encoded once: saved with before_step and again with failed/interrupted,
        # so a retry starts from exactly what this step started from (even if it was mutated).
        self._input_bytes, self._input_type = C.encode_state(wf.state)
        plan = wf.plan
        #: True when this step runs again after a crash/failure/interrupt (per the resume plan).
        self.retry = bool(plan is not None and plan.retry and index == plan.start_step)
        resuming = plan is not None and index == plan.start_step
        #: Task lists saved with each phase of this step; on the plan's start step they start as
        #: the plan's lists, so a DAG executor can skip tasks done before the crash.
        self.completed_tasks: List[Any] = list(wf.completed_tasks) if resuming else []
        self.pending_tasks: List[Any] = list(wf.pending_tasks) if resuming else []
        #: The ``checkpoint/save`` result of the ``before_step`` checkpoint and of the final one.
        self.before: Optional[Dict[str, Any]] = None
        self.result: Optional[Dict[str, Any]] = None
        #: ``completed`` | ``failed`` | ``interrupted`` once the step has exited.
        self.phase: Optional[str] = None

    def _outcome(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException]
    ) -> Tuple[str, Any, Optional[Dict[str, Any]]]:
        """(phase, state, error) for the way the step exited. Failed / interrupted steps save
        their input state, so the retry starts from what the step started from."""
        if exc_type is None:
            return "completed", self.state, None
        if exc is None:
            exc = exc_type()
        if isinstance(exc, Exception) and not _is_cancel(exc):
            err = {"message": C.error_message(exc), "retryable": C.is_retryable(exc, self.workflow.retryable)}
            return "failed", _INPUT, err
        # KeyboardInterrupt, Interrupted (SIGTERM), SystemExit, GeneratorExit, CancelledError
        return "interrupted", _INPUT, None

    def _finish(self, phase: str, state: Any, result: Dict[str, Any]) -> None:
        wf = self.workflow
        self.phase = phase
        self.result = result
        if isinstance(result, dict) and result.get("checkpointId"):
            wf.last_checkpoint_id = result["checkpointId"]
        if phase == "completed":
            wf.state = state
            wf.completed_tasks = []
            wf.pending_tasks = []


def _is_cancel(exc: BaseException) -> bool:
    try:
        import asyncio

        return isinstance(exc, asyncio.CancelledError)
    except ImportError:  # pragma: no cover
        return False


class Workflow(_WorkflowBase):
    """Created by :meth:`ckptd.Client.workflow`; a context manager."""

    def __init__(self, client: "Client", workflow_id: str, **kwargs: Any) -> None:
        super().__init__(workflow_id, **kwargs)
        self.client = client

    def __enter__(self) -> "Workflow":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if exc_type is None and self.complete_on_exit:
            try:
                self.client.complete(self.workflow_id, preserve=self.preserve_on_complete, fencing_token=self._token())
            except Claimed as e:
                self._refused(e)
                raise

    def resume(self) -> Optional[ResumePlan]:
        """Asks ``resume/plan`` where to start (``None`` for a workflow with no checkpoint) and
        sets :attr:`state`, task lists and :meth:`should_run` accordingly. Raises
        :class:`~ckptd.ResumeValidationError` when the plan has problems (unless ``force``)."""
        try:
            plan = self.client.resume_plan(self.workflow_id, **self._plan_params())
        except CheckpointNotFound:
            plan = None
        self._apply_plan(plan)
        return plan

    def step(self, name: str, index: Optional[int] = None, *, metadata: Optional[Mapping[str, Any]] = None) -> "Step":
        """A context manager for one step (``index`` defaults to the previous step's + 1)."""
        return Step(self, name, self._new_index(index), metadata)

    def drift_status(self) -> Dict[str, Any]:
        return self.client.drift_status(workflow_id=self.workflow_id, namespace=self.namespace or None)


class Step(_StepBase):
    """One step of a :class:`Workflow`; see the module docs."""

    workflow: Workflow

    def __enter__(self) -> "Step":
        self._sigterm = install_sigterm()
        try:
            wf = self.workflow
            self.before = wf.client.save(wf.workflow_id, **wf._save_kwargs(self, "before_step", _INPUT, None))
            if self.before.get("checkpointId"):
                wf.last_checkpoint_id = self.before["checkpointId"]
        except BaseException as e:
            self.workflow._refused(e)
            restore_sigterm(self._sigterm)
            raise
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        wf = self.workflow
        phase, state, error = self._outcome(exc_type, exc)
        # SIGINT/SIGTERM arriving now are held until the phase is saved, then delivered (to the
        # handler that was in force before the step).
        with deferred_signals():
            try:
                try:
                    result = wf.client.save(wf.workflow_id, **wf._save_kwargs(self, phase, state, error))
                except BaseException as save_err:
                    wf._refused(save_err)
                    if exc_type is None:
                        raise
                    log.warning("could not save the %s checkpoint of step %d (%s): %s", phase, self.index, self.name, save_err)
                    return  # the step's own exception propagates
                self._finish(phase, state, result)
            finally:
                restore_sigterm(self._sigterm)
