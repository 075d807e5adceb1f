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

Validation checkpoints and compensations (docs/protocol.md, "Validation and compensation")::

    with wf.step("publish", index=2) as s:
        s.compensate({"kind": "delete_file", "path": out}, "remove " + out)  # before the side effect
        write(out)
        s.validate(score(out), message="link check")   # the completed save carries it
    if wf.rollback_recommended:                           # the validation failed
        wf.rollback(undo)                                 # undo(action) for each, newest first

``wf.rollback`` records each action's outcome durably: after a crash, ``wf.resume()`` reports the
unfinished rollback (``rollback_recommended``) and ``wf.rollback(undo)`` runs only what is left.
"""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from . import _common as C
from ._common import CompensationAction, ResumePlan, deferred_signals, in_main_thread
from .errors import CheckpointNotFound, Interrupted

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Workflow", "Step", "RollbackFailed", "install_sigterm", "restore_sigterm"]

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


class RollbackFailed(Exception):
    """Your rollback handler raised for ``action``: the failure is recorded (``compensation/done``
    with ``ok: false``) and the rollback stops there, unfinished. Calling ``wf.rollback`` again runs
    that action again, then the rest."""

    def __init__(self, action: CompensationAction, error: BaseException, rollback_id: str) -> None:
        super().__init__("compensation %s (%s) failed: %s" % (action.compensation_id, action.description, C.error_message(error)))
        self.action = action
        self.error = error
        self.rollback_id = rollback_id


#: How a rollback handler is called: with each action to run (``action.action`` is the JSON
#: registered with :meth:`Step.compensate`); it returns normally when the undo is done.
RollbackHandler = Callable[[CompensationAction], Any]


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
    ) -> None:
        self.workflow_id = workflow_id
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
        self._initial_state = initial_state
        #: The classification of the last completed step's validation (``{status, confidence,
        #: thresholds, recommendation?}``), or of the resumed checkpoint's; ``None`` without one.
        self.last_validation: Optional[Dict[str, Any]] = None
        #: Where to roll back to (``{kind: "to_checkpoint", checkpointId} | {kind: "full"}``):
        #: set by a failed validation (with ``rollbackOnFailure``) or an unfinished rollback.
        self.recommendation: Optional[Dict[str, Any]] = None
        #: The rollbackId of an unfinished rollback the resume plan reported.
        self.unfinished_rollback: Optional[str] = None
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

    @property
    def rollback_recommended(self) -> bool:
        """True when the last step's validation failed and its rules roll back on failure, or
        when :meth:`resume` found a rollback that did not finish: call :meth:`rollback`."""
        return self.recommendation is not None or self.unfinished_rollback is not None

    def _note_validation(self, v: Optional[Dict[str, Any]]) -> None:
        self.last_validation = v
        self.recommendation = v.get("recommendation") if isinstance(v, dict) else None

    def _apply_plan(self, plan: Optional[ResumePlan]) -> None:
        self.plan = plan
        self.unfinished_rollback = None
        self._note_validation(None)
        if plan is None:
            return
        self._note_validation(plan.validation)
        rb = plan.rollback
        if isinstance(rb, dict) and rb.get("rollbackId"):
            self.unfinished_rollback = str(rb["rollbackId"])
        self.state = plan.state
        self.completed_tasks = list(plan.completed_tasks)
        self.pending_tasks = list(plan.pending_tasks)
        self.last_checkpoint_id = plan.get("checkpointId") or None
        self._next_index = plan.start_step

    def _plan_params(self) -> Dict[str, Any]:
        return dict(namespace=self.namespace or None, workflow_hash=self.workflow_hash, force=self.force,
                    drift_as_warning=self.drift_as_warning)

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
        )
        if phase == "completed" and step._validation is not None:
            kw["validation"] = step._validation
        if state is _INPUT:
            kw["state"], kw["state_type"] = step._input_bytes, step._input_type
        else:
            kw["state"] = state
        return kw

    def _drift_capable(self) -> bool:
        client = getattr(self, "client", None)
        return bool(client is not None and client.has_capability("drift"))

    def _rollback_params(self, to_checkpoint_id: Optional[str], full: bool) -> Dict[str, Any]:
        """What to ask rollback/plan: an explicit target, else continue the unfinished rollback,
        else the recommendation, else the daemon's default (the newest checkpoint whose
        validation did not fail)."""
        if to_checkpoint_id is not None or full:
            return dict(to_checkpoint_id=to_checkpoint_id, full=full)
        rec = self.recommendation
        if self.unfinished_rollback is None and isinstance(rec, dict):
            if rec.get("kind") == "full":
                return dict(full=True)
            if rec.get("checkpointId"):
                return dict(to_checkpoint_id=str(rec["checkpointId"]))
        return {}

    def _rolled_back(self, plan: Mapping[str, Any]) -> None:
        """Forgets the rollback just completed; after a full one, starts from scratch."""
        self.unfinished_rollback = None
        self._note_validation(None)
        if plan.get("full"):
            self.plan = None
            self.state = self._initial_state
            self.completed_tasks, self.pending_tasks = [], []
            self.last_checkpoint_id = None
            self._next_index = 0

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
        self._validation: Optional[Dict[str, Any]] = None
        #: The classification of :meth:`validate`'s score once the step completed: ``{status:
        #: passed | warning | failed, confidence, thresholds: {min, warning}, recommendation?}``.
        self.validation: Optional[Dict[str, Any]] = None
        #: The ``compensation/register`` results of :meth:`compensate`.
        self.compensations: List[Dict[str, Any]] = []

    def validate(self, confidence: float, message: Optional[str] = None, details: Any = None) -> None:
        """Scores this step's result (``confidence`` in [0, 1]); the ``completed`` checkpoint
        carries it and ckptd classifies it under the workflow's rules (``workflow/configure``
        ``validation``): afterwards :attr:`validation` has the classification and the
        workflow's :attr:`~Workflow.rollback_recommended` says whether to roll back. A confidence
        outside [0, 1] (NaN included) fails the completed save with
        :class:`~ckptd.InvalidParams` naming ``validation.confidence``."""
        v: Dict[str, Any] = {"confidence": confidence}
        if message is not None:
            v["message"] = message
        if details is not None:
            v["details"] = details
        self._validation = v

    def _compensation_params(self, task_id: Optional[str]) -> Dict[str, Any]:
        wf = self.workflow
        before = self.before if isinstance(self.before, dict) else {}
        return dict(
            namespace=wf.namespace or None,
            checkpoint_id=before.get("checkpointId") or None,
            step_name=self.name,
            task_id=task_id,
        )

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
            v = result.get("validation") if isinstance(result, dict) else None
            self.validation = v
            wf._note_validation(v)


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
            self.client.complete(self.workflow_id, preserve=self.preserve_on_complete)

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

    def rollback(
        self,
        handler: RollbackHandler,
        *,
        to_checkpoint_id: Optional[str] = None,
        full: bool = False,
        prune: bool = True,
    ) -> Dict[str, Any]:
        """Rolls the workflow back: ``rollback/plan`` (the unfinished rollback, else
        ``to_checkpoint_id`` / ``full``, else the recommendation), then ``handler(action)`` for
        each compensation still to run, newest registration first, each marked done durably as
        soon as the handler returns; then ``rollback/complete`` (``prune``: the rolled-back
        checkpoints are deleted, so a later resume starts from the target) and adopts the
        target's plan: :meth:`should_run` starts after it (from scratch after a full rollback).

        A crash part-way leaves the rollback unfinished: the next ``wf.rollback(handler)`` (in
        any process) runs only the actions not marked done. An action whose handler returned
        just before the crash, before it was marked, runs again: make handlers idempotent
        (deleting a file that is gone is fine). A handler that raises stops the rollback with
        :class:`RollbackFailed` (the failure recorded; the next call runs that action again).
        Returns ``{rollbackId, toCheckpointId, full, ran: [action...], progress, pruned}``."""
        plan = self.client.rollback_plan(
            self.workflow_id, namespace=self.namespace or None, **self._rollback_params(to_checkpoint_id, full)
        )
        rid = str(plan["rollbackId"])
        ran: List[CompensationAction] = []
        for act in plan.get("actions") or []:
            try:
                handler(act)
            except Exception as e:
                self.client.compensation_done(act.compensation_id, rid, ok=False, error=C.error_message(e))
                raise RollbackFailed(act, e, rid) from e
            self.client.compensation_done(act.compensation_id, rid, ok=True)
            ran.append(act)
        done = self.client.rollback_complete(rid, prune=prune)
        self._rolled_back(plan)
        if not plan.get("full") and plan.get("toCheckpointId"):
            p = self.client.resume_plan(self.workflow_id, checkpoint_id=str(plan["toCheckpointId"]), **self._plan_params())
            self._apply_plan(p)
        return {"rollbackId": rid, "toCheckpointId": plan.get("toCheckpointId"), "full": bool(plan.get("full")),
                "ran": ran, "progress": done.get("progress"), "pruned": done.get("pruned", 0)}


class Step(_StepBase):
    """One step of a :class:`Workflow`; see the module docs."""

    workflow: Workflow

    def compensate(self, action: Any, description: str = "", *, task_id: Optional[str] = None) -> Dict[str, Any]:
        """Registers how to undo a side effect this step is about to cause (``action``: JSON your
        rollback handler runs) with ``compensation/register``, durably once it returns: call it
        before the side effect. Returns ``{compensationId, seq}``."""
        wf = self.workflow
        r = wf.client.register_compensation(wf.workflow_id, action, description, **self._compensation_params(task_id))
        self.compensations.append(r)
        return r

    def __enter__(self) -> "Step":
        self._sigterm = install_sigterm()
        try:
            wf = self.workflow
            self.before = wf.client.save(wf.workflow_id, **wf._save_kwargs(self, "before_step", _INPUT, None))
            if self.before.get("checkpointId"):
                wf.last_checkpoint_id = self.before["checkpointId"]
        except BaseException:
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
                    if exc_type is None:
                        raise
                    log.warning("could not save the %s checkpoint of step %d (%s): %s", phase, self.index, self.name, save_err)
                    return  # the step's own exception propagates
                self._finish(phase, state, result)
            finally:
                restore_sigterm(self._sigterm)
