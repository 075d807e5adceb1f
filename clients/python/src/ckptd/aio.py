"""The asyncio ckptd client: the same surface as :class:`ckptd.Client`, with ``async`` methods,
over asyncio subprocess pipes (no threads).

::

    async with AsyncClient(db="agent.db") as client:
        await client.save("wf-1", {"messages": []}, step=0)
        cp = await client.load(workflow_id="wf-1")
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import signal
import weakref
from types import TracebackType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from . import _common as C
from ._common import NO_STATE, Checkpoint, NotificationHandler, ResumePlan
from .client import StderrTail, died_error
from .errors import CheckpointNotFound, CkptdError, ClientClosed, FramingError, Interrupted, error_from_response
from .framing import decode_body, encode_message, read_frame_async
from .workflow import _StepBase, _WorkflowBase

__all__ = ["AsyncClient", "AsyncWorkflow", "AsyncStep"]

log = logging.getLogger("ckptd")

_live_pids: "weakref.WeakValueDictionary[int, AsyncClient]" = weakref.WeakValueDictionary()


def _stop_leftovers_at_exit() -> None:
    # The event loop is gone by now: a still-running daemon gets SIGTERM (which it treats like
    # shutdown: finish committing, exit 0), and SIGKILL only if it does not exit in time.
    import time

    for pid, client in list(_live_pids.items()):
        if client._proc is None or client._proc.returncode is not None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        deadline = time.monotonic() + client.timeout
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            time.sleep(0.02)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


atexit.register(_stop_leftovers_at_exit)


class AsyncClient:
    """Spawns ``ckptd`` with :func:`asyncio.create_subprocess_exec` and talks JSON-RPC to it.

    Start it with ``async with AsyncClient(...) as c`` or ``c = await AsyncClient(...).start()``;
    stop it with :meth:`close` (or leave the ``async with``). Concurrent calls from many tasks are
    pipelined. Arguments are those of :class:`ckptd.Client`; ``on_notification`` may be a plain
    function (called on the event loop) or a coroutine function (scheduled as a task).
    """

    def __init__(
        self,
        db: Optional[Union[str, "os.PathLike[str]"]] = None,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        events: Iterable[str] = (),
        *,
        on_notification: Optional[NotificationHandler] = None,
        client_name: str = "ckptd-python-asyncio/" + C.__version__,
        timeout: float = 10.0,
        request_timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        initialize: bool = True,
    ) -> None:
        self.binary = C.find_binary(binary, env)
        self.argv = C.build_argv(self.binary, db, args)
        self.events = list(events)
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.client_name = client_name
        self.server_info: Dict[str, Any] = {}
        self.capabilities: Dict[str, Any] = {}
        self.unmatched_errors: List[CkptdError] = []
        self.pid: Optional[int] = None
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._initialize = initialize
        self._handlers: List[NotificationHandler] = []
        if on_notification is not None:
            self._handlers.append(on_notification)
        self._watch_handlers: Dict[str, NotificationHandler] = {}
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._pending: Dict[int, "asyncio.Future[Tuple[Any, Optional[bytes]]]"] = {}
        self._next_id = 1
        self._failure: Optional[CkptdError] = None
        self._closing = False
        self._closed = False
        self._max_state_bytes: Optional[int] = None
        self._stderr = StderrTail()
        self._reader_task: Optional["asyncio.Task[None]"] = None
        self._stderr_task: Optional["asyncio.Task[None]"] = None
        self._drain_lock: Optional[asyncio.Lock] = None
        self._tasks: "set[asyncio.Task[Any]]" = set()
        self._hooks: Dict[int, Any] = {}

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    async def start(self) -> "AsyncClient":
        """Spawns the daemon and (by default) sends ``initialize``."""
        if self._proc is not None:
            return self
        self._drain_lock = asyncio.Lock()
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
            limit=1 << 20,
        )
        self.pid = self._proc.pid
        _live_pids[self._proc.pid] = self
        self._stderr_task = asyncio.ensure_future(self._stderr_loop())
        self._reader_task = asyncio.ensure_future(self._read_loop())
        if self._initialize:
            try:
                await self.initialize(client_name=self.client_name, events=self.events)
            except BaseException:
                await self.close(timeout=min(self.timeout, 2.0))
                raise
        return self

    async def __aenter__(self) -> "AsyncClient":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode if self._proc is not None else None

    def stderr_tail(self) -> str:
        return self._stderr.text()

    def kill(self) -> None:
        """Kills the daemon (SIGKILL) without a clean shutdown."""
        if self._proc is not None:
            self._proc.kill()

    async def close(self, timeout: Optional[float] = None) -> None:
        """``shutdown``, close stdin, wait up to ``timeout`` for the exit, kill only if needed."""
        if timeout is None:
            timeout = self.timeout
        if self._closed:
            return
        self._closed = True
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        try:
            if self._failure is None and proc.returncode is None:
                try:
                    await asyncio.wait_for(self._request("shutdown", None, _closing_ok=True), timeout)
                except (CkptdError, asyncio.TimeoutError, OSError) as e:
                    log.debug("shutdown request failed: %s", e)
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except (OSError, RuntimeError):
                    pass
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except asyncio.TimeoutError:
                log.warning("ckptd (pid %d) did not exit within %.1fs of shutdown; killing it", proc.pid, timeout)
                proc.kill()
                await proc.wait()
        finally:
            for t in (self._reader_task, self._stderr_task):
                if t is not None and not t.done():
                    try:
                        await asyncio.wait_for(asyncio.shield(t), 5)
                    except (asyncio.TimeoutError, Exception):
                        t.cancel()
            self._fail_all(ClientClosed())
            _live_pids.pop(proc.pid, None)

    # -----------------------------------------------------------------------------------------
    # Transport

    async def request(
        self, method: str, params: Any = None, attachment: Optional[bytes] = None, *, timeout: Optional[float] = None
    ) -> Tuple[Any, Optional[bytes]]:
        """Sends any request; returns ``(result, attachment)``."""
        return await self._request(method, params, attachment, timeout=timeout)

    async def _request(
        self,
        method: str,
        params: Any,
        attachment: Optional[bytes] = None,
        *,
        timeout: Optional[float] = None,
        on_result: Optional[Any] = None,
        _closing_ok: bool = False,
    ) -> Tuple[Any, Optional[bytes]]:
        if self._failure is not None:
            raise C_fresh(self._failure)
        if self._closed and not _closing_ok:
            raise ClientClosed()
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ClientClosed("the AsyncClient was not started: use `async with` or `await client.start()`")
        rid = self._next_id
        self._next_id += 1
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        frame = encode_message(msg, attachment)
        fut: "asyncio.Future[Tuple[Any, Optional[bytes]]]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if on_result is not None:
            self._hooks[rid] = on_result
        try:
            # write() queues the whole frame at once (no await in between), so concurrent tasks
            # never interleave frames; drain() applies back-pressure.
            proc.stdin.write(frame)
            if proc.stdin.transport.get_write_buffer_size() > 0:
                assert self._drain_lock is not None
                async with self._drain_lock:
                    try:
                        await proc.stdin.drain()
                    except (ConnectionError, OSError):
                        pass  # the reader reports the daemon's death
            wait = self.request_timeout if timeout is None else timeout
            if wait is None:
                return await fut
            try:
                return await asyncio.wait_for(asyncio.shield(fut), wait)
            except asyncio.TimeoutError:
                raise TimeoutError("ckptd did not answer %s within %.1fs" % (method, wait)) from None
        finally:
            self._pending.pop(rid, None)
            self._hooks.pop(rid, None)

    async def _read_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        reason = ""
        try:
            while True:
                frame = await read_frame_async(stdout)
                if frame is None:
                    break
                try:
                    msg = decode_body(frame[0])
                except FramingError as e:
                    reason = "sent a frame that is not JSON: %s" % e
                    break
                self._dispatch(msg, frame[1])
        except FramingError as e:
            reason = "sent a malformed frame: %s" % e
        except asyncio.CancelledError:
            reason = "reader cancelled"
        except (OSError, ValueError) as e:
            reason = "reading its stdout failed: %s" % e
        except Exception as e:  # pragma: no cover - a bug in dispatch: fail the calls, never leave them waiting
            log.exception("ckptd reader task crashed")
            reason = "client reader crashed: %r" % e
        await self._on_stdout_closed(reason)

    def _dispatch(self, msg: Any, attachment: Optional[bytes]) -> None:
        if not isinstance(msg, dict):
            log.warning("ignoring non-object message from ckptd: %r", msg)
            return
        if "id" not in msg:
            method = msg.get("method")
            if isinstance(method, str):
                params = msg.get("params")
                self._notify(method, params if isinstance(params, dict) else {})
            return
        rid = msg["id"]
        fut = self._pending.get(rid) if isinstance(rid, int) else None
        if "error" in msg:
            err = error_from_response(msg["error"])
            if fut is None:
                self.unmatched_errors.append(err)
                waiting = [f for f in self._pending.values() if not f.done()]
                if rid is None and len(waiting) == 1:
                    waiting[0].set_exception(err)
                else:
                    log.warning("ckptd error not matched to a request (id %r): %s", rid, err)
            elif not fut.done():
                fut.set_exception(err)
            return
        if fut is None or fut.done():
            return
        result = msg.get("result")
        hook = self._hooks.get(rid)
        if hook is not None:
            try:
                hook(result)
            except Exception:  # pragma: no cover
                log.exception("result hook failed")
        fut.set_result((result, attachment))

    def _notify(self, method: str, params: Dict[str, Any]) -> None:
        handlers: List[NotificationHandler] = []
        if method == "drift/changed":
            h = self._watch_handlers.get(str(params.get("watchId")))
            if h is not None:
                handlers.append(h)
        handlers.extend(self._handlers)
        for h in handlers:
            try:
                r = h(method, params)
                if inspect.isawaitable(r):
                    t = asyncio.ensure_future(r)
                    self._tasks.add(t)
                    t.add_done_callback(self._task_done)
            except Exception:
                log.exception("ckptd notification handler failed for %s", method)

    def _task_done(self, t: "asyncio.Task[Any]") -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("ckptd notification handler failed: %r", t.exception())

    async def _on_stdout_closed(self, reason: str) -> None:
        proc = self._proc
        assert proc is not None
        if self._closing and not reason:
            err: CkptdError = ClientClosed()
        else:
            try:
                code: Optional[int] = await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                reason = (reason or "it closed its stdout") + "; killed it"
                proc.kill()
                code = await proc.wait()
            if self._stderr_task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(self._stderr_task), 2)
                except (asyncio.TimeoutError, Exception):
                    pass
            err = died_error(code, self._stderr.text(), reason)
            if not self._closing:
                log.error("%s", err.message.splitlines()[0])
        if self._failure is None:
            self._failure = err
        self._fail_all(err)

    def _fail_all(self, err: CkptdError) -> None:
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(C_fresh(err))

    async def _stderr_loop(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        err = self._proc.stderr
        try:
            while True:
                chunk = await err.read(65536)
                if not chunk:
                    break
                self._stderr.add(chunk)
        except (OSError, ValueError, asyncio.CancelledError):
            pass

    def add_notification_handler(self, handler: NotificationHandler) -> None:
        self._handlers.append(handler)

    def remove_notification_handler(self, handler: NotificationHandler) -> None:
        self._handlers.remove(handler)

    # -----------------------------------------------------------------------------------------
    # Methods (see ckptd.Client for the documentation of each)

    async def initialize(
        self, *, client_name: Optional[str] = None, events: Optional[Iterable[str]] = None
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {}
        C.put(params, "clientName", client_name)
        if events is not None:
            params["events"] = list(events)
        result, _ = await self._request("initialize", params)
        C.check_protocol_version(result)
        if isinstance(result, dict):
            self.server_info = result
            caps = result.get("capabilities")
            self.capabilities = caps if isinstance(caps, dict) else {}
            limit = self.capabilities.get("maxStateBytes")
            self._max_state_bytes = limit if isinstance(limit, int) and limit > 0 else None
        return result  # type: ignore[no-any-return]

    def has_capability(self, name: str) -> bool:
        return bool(self.capabilities.get(name))

    async def shutdown(self) -> None:
        await self._request("shutdown", None)

    async def save(
        self,
        workflow_id: str,
        state: Any = NO_STATE,
        *,
        namespace: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        parent_id: Optional[str] = None,
        phase: Optional[str] = None,
        step: Optional[int] = None,
        step_name: Optional[str] = None,
        error: Optional[Mapping[str, Any]] = None,
        completed_tasks: Optional[Sequence[Any]] = None,
        pending_tasks: Optional[Sequence[Any]] = None,
        workflow_hash: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        sources: Optional[C.Sources] = None,
        state_type: Optional[str] = None,
    ) -> Dict[str, Any]:
        params, att = C.save_params(
            workflow_id,
            state,
            namespace=namespace,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            phase=phase,
            step=step,
            step_name=step_name,
            error=error,
            completed_tasks=completed_tasks,
            pending_tasks=pending_tasks,
            workflow_hash=workflow_hash,
            metadata=metadata,
            sources=sources,
            state_type=state_type,
            max_state_bytes=self._max_state_bytes,
        )
        result, _ = await self._request("checkpoint/save", params, att)
        return result  # type: ignore[no-any-return]

    async def load(
        self, *, checkpoint_id: Optional[str] = None, workflow_id: Optional[str] = None, namespace: Optional[str] = None
    ) -> Checkpoint:
        params = C.target_params(checkpoint_id, workflow_id, "load", namespace)
        params["attachment"] = True
        result, att = await self._request("checkpoint/load", params)
        return Checkpoint(result, att)

    async def list(
        self,
        workflow_id: Optional[str] = None,
        *,
        namespace: Optional[str] = None,
        phase: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        before: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "namespace", namespace)
        C.put(params, "phase", phase)
        if metadata is not None:
            params["metadata"] = dict(metadata)
        C.put(params, "before", before)
        C.put(params, "limit", limit)
        result, _ = await self._request("checkpoint/list", params)
        return C.list_result(result, "checkpoints")

    async def delete(self, *, checkpoint_id: Optional[str] = None, workflow_id: Optional[str] = None) -> Dict[str, Any]:
        params = C.target_params(checkpoint_id, workflow_id, "delete")
        result, _ = await self._request("checkpoint/delete", params)
        return result  # type: ignore[no-any-return]

    async def prune(
        self,
        workflow_id: Optional[str] = None,
        *,
        keep_last: Optional[int] = None,
        older_than_seconds: Optional[int] = None,
        dry_run: bool = False,
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "keepLast", keep_last)
        C.put(params, "olderThanSeconds", older_than_seconds)
        if dry_run:
            params["dryRun"] = True
        result, _ = await self._request("checkpoint/prune", params)
        return result  # type: ignore[no-any-return]

    async def configure(
        self,
        workflow_id: str,
        *,
        keep_last: Optional[int] = None,
        max_age_seconds: Optional[int] = None,
        keep_first: Optional[bool] = None,
        idle_ttl_seconds: Optional[int] = None,
        retention: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {"workflowId": workflow_id}
        r = C.retention_param(retention, keep_last, max_age_seconds, keep_first, idle_ttl_seconds)
        if r is not None:
            params["retention"] = r
        result, _ = await self._request("workflow/configure", params)
        return result  # type: ignore[no-any-return]

    async def complete(self, workflow_id: str, *, preserve: bool = False) -> Dict[str, Any]:
        params: Dict[str, Any] = {"workflowId": workflow_id}
        if preserve:
            params["preserve"] = True
        result, _ = await self._request("workflow/complete", params)
        return result  # type: ignore[no-any-return]

    async def workflows(self, *, resumable_only: bool = False) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {}
        if resumable_only:
            params["resumableOnly"] = True
        result, _ = await self._request("workflow/list", params)
        return C.list_result(result, "workflows")

    async def put_writes(
        self,
        workflow_id: str,
        checkpoint_id: str,
        task_id: str,
        writes: Iterable[Any],
        *,
        namespace: Optional[str] = None,
        task_path: Optional[str] = None,
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {
            "workflowId": workflow_id,
            "checkpointId": checkpoint_id,
            "taskId": task_id,
            "writes": C.writes_param(writes),
        }
        C.put(params, "namespace", namespace)
        C.put(params, "taskPath", task_path)
        result, _ = await self._request("writes/put", params)
        return result  # type: ignore[no-any-return]

    async def resume_plan(
        self,
        workflow_id: str,
        *,
        namespace: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        workflow_hash: Optional[str] = None,
        force: bool = False,
        drift_as_warning: bool = False,
    ) -> ResumePlan:
        params: Dict[str, Any] = {"workflowId": workflow_id, "attachment": True}
        C.put(params, "namespace", namespace)
        C.put(params, "checkpointId", checkpoint_id)
        C.put(params, "workflowHash", workflow_hash)
        if force:
            params["force"] = True
        if drift_as_warning:
            params["driftAsWarning"] = True
        result, att = await self._request("resume/plan", params)
        return ResumePlan(result, att)

    async def stats(self) -> Dict[str, Any]:
        result, _ = await self._request("stats", None)
        return result  # type: ignore[no-any-return]

    async def drift_status(
        self, *, workflow_id: Optional[str] = None, checkpoint_id: Optional[str] = None
    ) -> Dict[str, Any]:
        params = C.target_params(checkpoint_id, workflow_id, "drift_status")
        result, _ = await self._request("drift/status", params)
        return result  # type: ignore[no-any-return]

    async def drift_watch(
        self,
        *,
        workflow_id: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        debounce_ms: Optional[int] = None,
        callback: Optional[NotificationHandler] = None,
    ) -> Dict[str, Any]:
        params = C.target_params(checkpoint_id, workflow_id, "drift_watch")
        C.put(params, "debounceMs", debounce_ms)

        def register(result: Any) -> None:
            # runs in the reader before any later notification is dispatched
            if callback is not None and isinstance(result, dict) and "watchId" in result:
                self._watch_handlers[str(result["watchId"])] = callback

        result, _ = await self._request("drift/watch", params, on_result=register)
        return result  # type: ignore[no-any-return]

    async def drift_unwatch(self, watch_id: str) -> Any:
        self._watch_handlers.pop(str(watch_id), None)
        result, _ = await self._request("drift/unwatch", {"watchId": watch_id})
        return result

    def workflow(
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
    ) -> "AsyncWorkflow":
        """The async workflow helper: ``async with client.workflow(...) as wf``."""
        return AsyncWorkflow(
            self,
            workflow_id,
            workflow_hash=workflow_hash,
            sources=sources,
            namespace=namespace,
            initial_state=initial_state,
            retryable=retryable,
            complete_on_exit=complete_on_exit,
            preserve_on_complete=preserve_on_complete,
            force=force,
            metadata=metadata,
            drift_as_warning=drift_as_warning,
        )


def C_fresh(err: CkptdError) -> CkptdError:
    import copy

    return copy.copy(err)


class AsyncWorkflow(_WorkflowBase):
    """The async twin of :class:`ckptd.workflow.Workflow`."""

    def __init__(self, client: AsyncClient, workflow_id: str, **kwargs: Any) -> None:
        super().__init__(workflow_id, **kwargs)
        self.client = client

    async def __aenter__(self) -> "AsyncWorkflow":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if exc_type is None and self.complete_on_exit:
            await self.client.complete(self.workflow_id, preserve=self.preserve_on_complete)

    async def resume(self) -> Optional[ResumePlan]:
        try:
            plan: Optional[ResumePlan] = await self.client.resume_plan(self.workflow_id, **self._plan_params())
        except CheckpointNotFound:
            plan = None
        self._apply_plan(plan)
        return plan

    def step(self, name: str, index: Optional[int] = None, *, metadata: Optional[Mapping[str, Any]] = None) -> "AsyncStep":
        return AsyncStep(self, name, self._new_index(index), metadata)

    async def drift_status(self) -> Dict[str, Any]:
        return await self.client.drift_status(workflow_id=self.workflow_id)


class AsyncStep(_StepBase):
    """One step of an :class:`AsyncWorkflow`. SIGTERM during the step (when the running loop
    supports signal handlers and none is set for SIGTERM) cancels the step's task; the step saves
    ``interrupted`` and raises :class:`~ckptd.Interrupted`. Cancellation and KeyboardInterrupt
    also save ``interrupted``."""

    workflow: AsyncWorkflow

    async def __aenter__(self) -> "AsyncStep":
        from .workflow import _INPUT

        self._sigterm_hit = False
        self._sig_installed = False
        self._install_sigterm()
        try:
            wf = self.workflow
            self.before = await wf.client.save(wf.workflow_id, **wf._save_kwargs(self, "before_step", _INPUT, None))
            if self.before.get("checkpointId"):
                wf.last_checkpoint_id = self.before["checkpointId"]
        except BaseException:
            self._remove_sigterm()
            raise
        return self

    def _install_sigterm(self) -> None:
        sig = getattr(signal, "SIGTERM", None)
        if sig is None or not C.in_main_thread():
            return
        loop = asyncio.get_running_loop()
        if sig in getattr(loop, "_signal_handlers", {}):
            return  # the application handles SIGTERM itself
        task = asyncio.current_task()
        if task is None:
            return
        self._prev_handler = signal.getsignal(sig)

        def on_sigterm() -> None:
            self._sigterm_hit = True
            task.cancel()

        try:
            loop.add_signal_handler(sig, on_sigterm)
            self._sig_installed = True
        except (NotImplementedError, RuntimeError, ValueError):  # e.g. Windows loops
            pass

    def _remove_sigterm(self) -> None:
        if not self._sig_installed:
            return
        self._sig_installed = False
        sig = signal.SIGTERM
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(sig)
        prev = self._prev_handler
        try:
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover
            pass

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> Optional[bool]:
        wf = self.workflow
        phase, state, error = self._outcome(exc_type, exc)
        sigterm = self._sigterm_hit
        if sigterm:
            task = asyncio.current_task()
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None:
                uncancel()
        try:
            try:
                result = await wf.client.save(wf.workflow_id, **wf._save_kwargs(self, phase, state, error))
            except BaseException as save_err:
                if exc_type is None:
                    raise
                log.warning("could not save the %s checkpoint of step %d (%s): %s", phase, self.index, self.name, save_err)
                result = None
            if result is not None:
                self._finish(phase, state, result)
        finally:
            self._remove_sigterm()
        if sigterm and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            raise Interrupted(signal.SIGTERM) from exc
        return None
