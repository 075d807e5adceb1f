"""The asyncio ckptd client: the same surface as :class:`ckptd.Client`, with ``async`` methods,
driven by the event loop (no threads where the loop can watch pipes: every loop on Linux and
macOS, uvloop).

::

    async with AsyncClient(db="agent.db") as client:
        await client.save("wf-1", {"messages": []}, step=0)
        cp = await client.load(workflow_id="wf-1")

Event loops. The daemon process belongs to the client, not to a loop: the client registers the
daemon's pipes with the running loop that uses it, and follows the running loop:

- when that loop shuts down the standard way (``asyncio.run``, ``asyncio.Runner``, or
  ``loop.shutdown_asyncgens()`` before ``loop.close()``), after the loop's tasks have finished, the
  client stops its daemon gracefully (``shutdown``, then stdin EOF: every save it acknowledged, and
  every save it received, is committed; exit code 0) and the next call, from any loop, starts a new
  daemon with the same options;
- a call from another loop while the first one is closed, or open but not running (a second
  ``run_until_complete``, pytest-asyncio loops of different scopes), moves the daemon's pipes to
  that loop;
- a call from another loop while the first one is running in another thread raises
  :class:`~ckptd.WrongEventLoop` naming both loops.

Fork: like :class:`ckptd.Client` (``on_fork``), a client used in a process forked from the one that
started its daemon leaves the parent's daemon alone and starts its own (or raises
:class:`~ckptd.ClientForked`).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import inspect
import logging
import os
import signal
import subprocess
import threading
import time
import weakref
from types import TracebackType
from typing import Any, AsyncIterator, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from . import _common as C
from ._common import NO_STATE, Checkpoint, NotificationHandler, ResumePlan, block_signals_in_thread
from .claim import AsyncClaim
from .client import ON_FORK_MODES, StderrTail, _getcwd, died_error
from .errors import (
    CheckpointNotFound,
    Claimed,
    CkptdError,
    ClientClosed,
    ClientForked,
    FramingError,
    Interrupted,
    WrongEventLoop,
    error_from_response,
)
from .framing import FrameReader, decode_body, encode_message
from .workflow import _StepBase, _WorkflowBase

__all__ = ["AsyncClient", "AsyncWorkflow", "AsyncStep"]

log = logging.getLogger("ckptd")

#: Callers wait for the daemon to read their frames once this many bytes are queued for its stdin.
_WRITE_HIGH_WATER = 1 << 20

_live: "weakref.WeakSet[AsyncClient]" = weakref.WeakSet()


def _stop_leftovers_at_exit() -> None:
    # No event loop is left to do it: a daemon still running gets stdin EOF (it commits what it
    # received and exits 0), SIGTERM (the same clean shutdown) if it has not exited in time, and
    # SIGKILL only if that does not work either.
    for client in list(_live):
        proc = client._proc
        if proc is None or client._owner_pid != os.getpid() or proc.poll() is not None:
            continue
        client._close_stdin()
        for action in ("terminate", "kill", ""):
            try:
                proc.wait(timeout=client.timeout)
                break
            except subprocess.TimeoutExpired:
                if action == "terminate":
                    proc.terminate()
                elif action == "kill":
                    proc.kill()


atexit.register(_stop_leftovers_at_exit)


def _after_fork_in_child() -> None:
    for client in list(_live):
        try:
            client._after_fork_in_child()
        except Exception:  # pragma: no cover - never let one client break the child
            log.exception("ckptd AsyncClient: dropping the parent's daemon after fork failed")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


async def _loop_watch(ref: "weakref.ref[AsyncClient]", token: object) -> AsyncIterator[None]:
    """An async generator started in the loop the daemon is attached to: the loop's
    ``shutdown_asyncgens()`` (asyncio.run and asyncio.Runner call it once every task is done, just
    before closing the loop) closes it, which stops the daemon gracefully while the loop still runs."""
    try:
        yield
    finally:
        client = ref()
        if client is not None and client._watch_token is token:
            client._watch_token = client._watch_gen = None
            await client._end_with_loop()


def _finish_gen(gen: Any) -> None:
    """Closes a suspended async generator without a loop (its finally block must not await)."""
    try:
        gen.aclose().send(None)
    except StopIteration:
        pass
    except BaseException:  # pragma: no cover - RuntimeError if it is running, ...
        pass


class AsyncWorkflows:
    """The workflows of a ``workflow/list`` listing for asyncio (``AsyncClient.workflows``):
    ``async for`` fetches one page at a time; awaiting it returns every workflow as a list (every
    page); ``pages()`` yields the pages."""

    def __init__(self, fetch: Any) -> None:
        self._fetch = fetch

    async def pages(self) -> AsyncIterator[List[Dict[str, Any]]]:
        cursor: Optional[str] = None
        while True:
            result = await self._fetch(cursor)
            yield C.list_result(result, "workflows")
            cursor = C.page_cursor(result)
            if cursor is None:
                return

    async def __aiter__(self) -> AsyncIterator[Dict[str, Any]]:
        async for page in self.pages():
            for wf in page:
                yield wf

    async def _all(self) -> List[Dict[str, Any]]:
        return [wf async for wf in self]

    def __await__(self) -> Any:
        return self._all().__await__()


class AsyncClient:
    """Spawns ``ckptd`` and talks JSON-RPC to it from asyncio.

    Start it with ``async with AsyncClient(...) as c`` or ``c = await AsyncClient(...).start()``;
    stop it with :meth:`close` (or leave the ``async with``). Concurrent calls from many tasks are
    pipelined. Arguments are those of :class:`ckptd.Client` (``on_fork`` included);
    ``on_notification`` may be a plain function (called on the event loop) or a coroutine function
    (scheduled as a task). See the module documentation for event loops and fork.
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
        on_fork: str = "spawn",
        deltas: bool = True,
    ) -> None:
        if on_fork not in ON_FORK_MODES:
            raise ValueError("on_fork must be one of %s, not %r" % (", ".join(map(repr, ON_FORK_MODES)), on_fork))
        self.binary = C.find_binary(binary, env)
        self.argv = C.build_argv(self.binary, db, args)
        self.events = list(events)
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.client_name = client_name
        self.on_fork = on_fork
        self._use_deltas = deltas
        self.server_info: Dict[str, Any] = {}
        self.capabilities: Dict[str, Any] = {}
        self.unmatched_errors: List[CkptdError] = []
        #: The daemon's process id (the latest one's, once the client has started one).
        self.pid: Optional[int] = None
        self._env = C.spawn_env(db, env)
        self._cwd = cwd if cwd is not None else _getcwd()
        self._initialize = initialize
        self._handlers: List[NotificationHandler] = []
        if on_notification is not None:
            self._handlers.append(on_notification)
        self._watch_handlers: Dict[str, NotificationHandler] = {}
        self._failure: Optional[CkptdError] = None
        self._closing = False
        self._closed = False
        #: start() was called: from then on the client (re)starts its daemon where it is used
        self._started = False
        self._max_state_bytes: Optional[int] = None
        self._tasks: "set[asyncio.Task[Any]]" = set()
        self._hooks: Dict[int, Any] = {}
        #: in a forked process: the pid of the process that started the inherited daemon
        self._forked_from = 0
        self._reset()

    def _reset(self) -> None:
        """No daemon: the state of one daemon and of its attachment to a loop."""
        #: the last state saved per (workflowId, namespace): the base of the next save's delta
        self._deltas: Optional[C.DeltaMemory] = C.DeltaMemory() if self._use_deltas else None
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._owner_pid = 0
        #: the daemon exited after a graceful stop (loop shutdown): the next call starts another
        self._ended = False
        self._pending: Dict[int, "asyncio.Future[Tuple[Any, Optional[bytes]]]"] = {}
        self._next_id = 1
        self._stderr = StderrTail()
        self._frames: Optional[FrameReader] = None
        #: set (to the reason, "" for a plain EOF) once the daemon's stdout ended
        self._stdout_eof: Optional[str] = None
        self._stderr_open = False
        self._wq: Deque[memoryview] = collections.deque()  # bytes not yet written to stdin
        self._wq_size = 0
        #: frames made in this turn of the loop while other calls were in flight: written
        #: together at the end of the turn (one write for the saves of many tasks)
        self._gather: Optional[List[bytes]] = None
        self._stdin_broken = False
        self._drain_waiters: List["asyncio.Future[None]"] = []
        #: the loop calls go straight to (attached and initialized), and the one the pipes are
        #: registered with (they differ while a start is under way)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._io_loop: Optional[asyncio.AbstractEventLoop] = None
        self._attaching: Optional["asyncio.Future[None]"] = None
        self._watch_gen: Any = None
        self._watch_token: Optional[object] = None
        #: loops that cannot watch pipes (Windows' proactor): threads read and hand frames over
        self._threaded = False
        self._inbox: Deque[Tuple[str, Any, Optional[bytes]]] = collections.deque()
        self._inbox_lock = threading.Lock()
        self._stderr_thread: Optional[threading.Thread] = None

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    async def start(self) -> "AsyncClient":
        """Spawns the daemon and (by default) sends ``initialize``; attaches it to the running loop."""
        self._started = True
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            try:
                await self._ready(loop)
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
        """The (latest) daemon's exit code once it has exited, else ``None``."""
        return self._proc.poll() if self._proc is not None else None

    def stderr_tail(self) -> str:
        return self._stderr.text()

    def kill(self) -> None:
        """Kills the daemon (SIGKILL) without a clean shutdown."""
        if self._proc is not None and self._owner_pid == os.getpid():
            self._proc.kill()

    async def close(self, timeout: Optional[float] = None) -> None:
        """``shutdown``, close stdin, wait up to ``timeout`` for the exit, kill only if needed."""
        if timeout is None:
            timeout = self.timeout
        if self._closed:
            return
        self._closed = True
        self._closing = True
        if self._proc is not None and self._owner_pid != os.getpid():
            self._after_fork_in_child()  # forked by something that skips os.register_at_fork
        loop = asyncio.get_running_loop()
        try:
            if self._proc is None or self._ended:
                self._detach()
                return
            old = self._io_loop
            if old is not None and old is not loop and old.is_running():
                # attached to a loop running in another thread: stop the daemon there
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._shut(timeout), old))
                return
            if old is not loop:
                self._detach()
                self._attach(loop)
            await self._shut(timeout)
        finally:
            _live.discard(self)

    async def _shut(self, timeout: float) -> None:
        try:
            await self._stop_daemon(timeout)
        finally:
            self._detach()
            self._close_files()
            self._fail_all(ClientClosed())

    # -----------------------------------------------------------------------------------------
    # The daemon and its loop

    def _spawn(self) -> None:
        self._close_files()  # of a daemon stopped with an earlier loop
        self._reset()
        proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,  # raw files: nothing buffered here, no lock a fork could inherit held
            env=self._env,
            cwd=self._cwd,
            # own session: a Ctrl-C in the terminal reaches the agent, not the daemon
            start_new_session=True,
        )
        self._proc = proc
        self._owner_pid = os.getpid()
        self.pid = proc.pid
        self._frames = FrameReader(proc.stdout)
        self._stderr_open = True
        self._forked_from = 0
        _live.add(self)

    async def _ready(self, loop: asyncio.AbstractEventLoop) -> None:
        """Makes the client usable from ``loop`` (the running loop): starts a daemon if it has none
        (or its daemon was stopped with a loop, or belongs to the parent of this forked process),
        else moves the daemon's pipes to ``loop``."""
        if self._closed:
            raise ClientClosed()
        if self._forked_from and self.on_fork == "error":
            raise ClientForked(self._forked_from, os.getpid())
        if not self._started and not self._forked_from:
            raise ClientClosed("the AsyncClient was not started: use `async with` or `await client.start()`")
        att = self._attaching
        if att is not None and att.get_loop() is loop:
            await asyncio.shield(att)  # another task of this loop is starting it
            return
        old = self._io_loop
        if old is not None and old is not loop:
            if old.is_running():  # not in this thread: this thread runs `loop`
                raise WrongEventLoop(repr(old), repr(loop))
            self._detach()
        fresh = self._proc is None or self._ended
        if fresh:
            self._spawn()
        self._attaching = att = loop.create_future()
        try:
            self._attach(loop)
            token = self._watch_token = object()
            self._watch_gen = gen = _loop_watch(weakref.ref(self), token)
            await gen.asend(None)
            if fresh and self._initialize:
                await self.initialize(client_name=self.client_name, events=self.events, _internal=True)
            self._loop = loop
            att.set_result(None)
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                att.cancel()
            else:
                att.set_exception(e)
                att.exception()  # retrieved: only other tasks of this loop may be waiting for it
            if fresh and self._proc is not None and self._proc.poll() is None and self._failure is None:
                await self._stop_daemon(min(self.timeout, 2.0))
            self._detach()
            if fresh:
                self._ended = True
            raise
        finally:
            self._attaching = None

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Registers the daemon's pipes with ``loop`` (or, for a loop that cannot watch pipes,
        hands frames read by threads to it)."""
        proc = self._proc
        assert proc is not None and proc.stdin and proc.stdout and proc.stderr
        self._io_loop = loop
        if not self._threaded:
            try:
                if self._stdout_eof is None:
                    os.set_blocking(proc.stdout.fileno(), False)
                    loop.add_reader(proc.stdout.fileno(), self._on_stdout)
                if self._stderr_open:
                    os.set_blocking(proc.stderr.fileno(), False)
                    loop.add_reader(proc.stderr.fileno(), self._on_stderr)
                if not self._stdin_broken and not proc.stdin.closed:
                    os.set_blocking(proc.stdin.fileno(), False)
                    if self._wq:
                        loop.add_writer(proc.stdin.fileno(), self._on_writable)
            except NotImplementedError:
                self._remove_fds(loop)
                self._start_threads()
        if self._threaded:
            loop.call_soon(self._drain_inbox)
        if self._stdout_eof is not None and self._failure is None and not self._closing:
            self._schedule(self._on_stdout_closed(self._stdout_eof))

    def _remove_fds(self, loop: asyncio.AbstractEventLoop) -> None:
        proc = self._proc
        if proc is None or loop.is_closed() or self._threaded:
            return
        for f, remove in ((proc.stdout, loop.remove_reader), (proc.stderr, loop.remove_reader),
                          (proc.stdin, loop.remove_writer)):
            if f is not None and not f.closed:
                try:
                    remove(f.fileno())
                except (NotImplementedError, ValueError, OSError):
                    pass

    def _detach(self) -> None:
        """Unregisters the daemon's pipes from their loop (which is not running, or is this one).
        Calls made from that loop that are still waiting fail: their loop will not see the answers."""
        loop = self._io_loop
        gen, self._watch_gen, self._watch_token = self._watch_gen, None, None
        if gen is not None:
            _finish_gen(gen)
        if loop is None:
            return
        self._remove_fds(loop)
        self._io_loop = None
        self._loop = None
        self._gather = None  # its calls were made from that loop: they fail below
        err = ClientClosed("the AsyncClient left the event loop this call was made from")
        for rid, fut in list(self._pending.items()):
            if fut.get_loop() is loop:
                del self._pending[rid]
                if not loop.is_closed() and not fut.done():
                    fut.set_exception(C_fresh(err))
        for w in self._drain_waiters:
            if not loop.is_closed() and not w.done():
                w.set_result(None)
        self._drain_waiters = []

    async def _end_with_loop(self) -> None:
        """The loop the daemon is attached to is shutting down: stop the daemon gracefully; the
        next call (from any loop) starts a new one."""
        if self._proc is None or self._closed:
            return
        try:
            await self._stop_daemon(self.timeout)
        finally:
            self._detach()
            self._close_files()
            self._ended = True
            self._fail_all(ClientClosed("the event loop of this call shut down"))

    async def _stop_daemon(self, timeout: float) -> None:
        """``shutdown`` (the daemon commits every save it received), stdin EOF, wait for the exit;
        SIGKILL only if it has not exited within ``timeout``."""
        proc = self._proc
        assert proc is not None
        prev, self._closing = self._closing, True
        try:
            if self._failure is None and self._stdout_eof is None and proc.poll() is None:
                try:
                    await asyncio.wait_for(self._request("shutdown", None, _internal=True), timeout)
                except (CkptdError, asyncio.TimeoutError, TimeoutError, OSError) as e:
                    log.debug("shutdown request failed: %s", e)
            if self._wq and not self._stdin_broken:
                try:
                    await asyncio.wait_for(self._drained(0), timeout)
                except asyncio.TimeoutError:
                    pass
            self._close_stdin()
            await self._wait_exit(timeout, "did not exit within %.1fs of shutdown" % timeout)
            await self._stderr_done()
        finally:
            self._closing = prev or self._closed

    async def _wait_exit(self, timeout: float, why: str) -> Tuple[int, bool]:
        """Waits for the daemon's exit (polling: no child watcher, no loop owns the process); kills
        it if it has not exited within ``timeout``. Returns (exit code, killed)."""
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                log.warning("ckptd (pid %d) %s; killing it", proc.pid, why)
                proc.kill()
                return proc.wait(), True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return proc.returncode, False

    async def _stderr_done(self) -> None:
        """After the daemon's exit: takes in the rest of its stderr."""
        proc = self._proc
        if proc is None or proc.stderr is None:
            return
        if not self._threaded:
            if self._stderr_open and not proc.stderr.closed:
                try:
                    while True:
                        chunk = os.read(proc.stderr.fileno(), 65536)
                        if not chunk:
                            break
                        self._stderr.add(chunk)
                except OSError:
                    pass
            return
        t = self._stderr_thread
        deadline = time.monotonic() + 2.0
        while t is not None and t.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def _on_stdout_closed(self, reason: str) -> None:
        """stdout ended without a shutdown of ours: the daemon died (or sent garbage)."""
        err: Optional[CkptdError] = None
        try:
            if self._closing and not reason:
                err = ClientClosed()
            else:
                code, killed = await self._wait_exit(5.0, "closed its stdout but did not exit")
                if killed:
                    reason = (reason or "it closed its stdout") + "; killed it"
                await self._stderr_done()
                err = died_error(code, self._stderr.text(), reason)
                if not self._closing:
                    log.error("%s", err.message.splitlines()[0])
        finally:
            if err is None:  # cancelled (the loop is shutting down)
                err = died_error(self.returncode, self._stderr.text(), reason or "it closed its stdout")
            if self._failure is None and not isinstance(err, ClientClosed):
                self._failure = err
            self._fail_all(err)

    def _close_files(self) -> None:
        """Closes our ends of the pipes of a daemon that has exited (after _detach)."""
        proc = self._proc
        if proc is None or proc.poll() is None or self._threaded:
            return  # still running; or threads may still be reading (they end at EOF)
        self._close_stdin()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    def _close_stdin(self) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            return
        loop = self._io_loop
        if loop is not None and not loop.is_closed() and not self._threaded:
            try:
                loop.remove_writer(proc.stdin.fileno())
            except (NotImplementedError, ValueError, OSError):
                pass
        self._wq.clear()
        self._wq_size = 0
        self._gather = None
        try:
            proc.stdin.close()
        except OSError:
            pass

    def _after_fork_in_child(self) -> None:
        """In a forked process (before anything else runs): forget the parent's daemon. Closes
        this process's copies of its pipe fds (raw files: no lock, nothing flushed; the parent
        keeps its own, so its daemon sees no EOF) and never touches the parent's loop: not its
        selector (an epoll instance is shared across fork), not its futures."""
        proc, gen = self._proc, self._watch_gen
        if proc is None:
            return
        parent = self._owner_pid
        self._watch_token = None
        self._reset()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        proc._child_created = False  # type: ignore[attr-defined]  # not our child: never reap/kill it
        if gen is not None:
            _finish_gen(gen)
        self._watch_handlers = {}
        self._tasks = set()
        self._hooks = {}
        self._failure = None  # the parent's daemon's fate is not this process's
        self._closing = self._closed
        if not self._closed:
            self._forked_from = parent

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
        _internal: bool = False,
    ) -> Tuple[Any, Optional[bytes]]:
        if self._failure is not None:
            raise C_fresh(self._failure)
        loop = asyncio.get_running_loop()
        if not _internal:
            if self._closed:
                raise ClientClosed()
            if loop is not self._loop:
                await self._ready(loop)
        rid = self._next_id
        self._next_id += 1
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        frame = encode_message(msg, attachment)
        fut: "asyncio.Future[Tuple[Any, Optional[bytes]]]" = loop.create_future()
        self._pending[rid] = fut
        if on_result is not None:
            self._hooks[rid] = on_result
        try:
            # the whole frame is queued at once (no await in between): frames never interleave
            self._write(frame)
            if self._wq_size > _WRITE_HIGH_WATER:
                await self._drained(_WRITE_HIGH_WATER)
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

    def _write(self, frame: bytes) -> None:
        if self._gather is not None:
            self._gather.append(frame)
            return
        if len(self._pending) > 1 and not self._threaded and self._io_loop is not None and not self._wq:
            # Other calls are in flight: the tasks the same turn of the loop resumes (the answers
            # of a batch of saves arrive together) make their next requests together; one write
            # at the end of the turn sends them all.
            self._gather = [frame]
            self._io_loop.call_soon(self._flush_gather)
            return
        self._write_now(frame)

    def _flush_gather(self) -> None:
        frames, self._gather = self._gather, None
        if frames:
            self._write_now(frames[0] if len(frames) == 1 else b"".join(frames))

    def _write_now(self, frame: bytes) -> None:
        proc = self._proc
        if self._stdin_broken or proc is None or proc.stdin is None or proc.stdin.closed:
            return  # the daemon is gone: the reader reports it to every pending call
        if self._wq:
            self._wq.append(memoryview(frame))
            self._wq_size += len(frame)
            return
        fd = proc.stdin.fileno()
        n = 0
        try:
            if self._threaded:  # blocking pipe
                with memoryview(frame) as mv:
                    while n < len(frame):
                        n += os.write(fd, mv[n:])
                return
            n = os.write(fd, frame)
        except BlockingIOError:
            pass
        except OSError:  # broken pipe: the daemon is gone
            self._stdin_broken = True
            return
        if n < len(frame):
            self._wq.append(memoryview(frame)[n:])
            self._wq_size += len(frame) - n
            assert self._io_loop is not None
            self._io_loop.add_writer(fd, self._on_writable)

    def _on_writable(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        wq = self._wq
        try:
            while wq:
                head = wq[0]
                n = os.write(proc.stdin.fileno(), head)
                self._wq_size -= n
                if n < len(head):
                    wq[0] = head[n:]
                    break
                wq.popleft()
        except BlockingIOError:
            pass
        except OSError:
            self._stdin_broken = True
            wq.clear()
            self._wq_size = 0
        if not wq:
            try:
                assert self._io_loop is not None
                self._io_loop.remove_writer(proc.stdin.fileno())
            except (ValueError, OSError):
                pass
        self._wake_drainers()

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _drained(self, level: int) -> None:
        """Waits until at most ``level`` bytes are queued for stdin (or it broke)."""
        while self._wq_size > level and not self._stdin_broken and self._io_loop is not None:
            w = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(w)
            await w

    def _on_stdout(self) -> None:
        frames = self._frames
        assert frames is not None
        try:
            n = frames.fill()
        except BlockingIOError:
            return
        except (OSError, ValueError) as e:
            self._stdout_ended("reading its stdout failed: %s" % e)
            return
        if n == 0:
            err = frames.eof_error()
            self._stdout_ended("" if err is None else "sent a malformed frame: %s" % err)
            return
        self._pump(frames)

    def _pump(self, frames: FrameReader) -> None:
        try:
            while True:
                frame = frames.next_frame()
                if frame is None:
                    return
                try:
                    msg = decode_body(frame[0])
                except FramingError as e:
                    self._stdout_ended("sent a frame that is not JSON: %s" % e)
                    return
                self._dispatch(msg, frame[1])
        except FramingError as e:
            self._stdout_ended("sent a malformed frame: %s" % e)
        except Exception as e:  # pragma: no cover - a bug in dispatch: fail the calls, never leave them waiting
            log.exception("ckptd reader crashed")
            self._stdout_ended("client reader crashed: %r" % e)

    def _on_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        try:
            chunk = os.read(proc.stderr.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._stderr.add(chunk)
            return
        self._stderr_open = False
        loop = self._io_loop
        if loop is not None:
            loop.remove_reader(proc.stderr.fileno())

    def _stdout_ended(self, reason: str) -> None:
        if self._stdout_eof is not None:
            return
        self._stdout_eof = reason
        proc = self._proc
        loop = self._io_loop
        if loop is not None and not self._threaded and proc is not None and proc.stdout is not None:
            try:
                loop.remove_reader(proc.stdout.fileno())
            except (ValueError, OSError):
                pass
        if self._closing and not reason:
            self._fail_all(ClientClosed())
            return
        if loop is not None:
            self._schedule(self._on_stdout_closed(reason))

    def _schedule(self, coro: Any) -> None:
        assert self._io_loop is not None
        t = self._io_loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # Loops without add_reader (Windows' proactor): one thread reads stdout, one stderr; frames go
    # through the inbox to whatever loop the client is attached to at the time.

    def _start_threads(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        self._threaded = True
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None and not f.closed:
                os.set_blocking(f.fileno(), True)
        frames = self._frames
        assert frames is not None
        if self._wq or self._gather:  # queued while in a selector loop
            data = b"".join([bytes(m) for m in self._wq] + (self._gather or []))
            self._wq.clear()
            self._wq_size = 0
            self._gather = None
            self._write_now(data)
        stderr = proc.stderr

        def read_stdout() -> None:
            block_signals_in_thread()
            try:
                read_frames()
            finally:
                proc.stdout.close()  # type: ignore[union-attr]  # EOF (or broken): nobody reads it again

        def read_frames() -> None:
            while True:
                try:
                    n = frames.fill()
                except (OSError, ValueError) as e:
                    self._post("end", "reading its stdout failed: %s" % e, None)
                    return
                if n == 0:
                    err = frames.eof_error()
                    self._post("end", "" if err is None else "sent a malformed frame: %s" % err, None)
                    return
                try:
                    while True:
                        frame = frames.next_frame()
                        if frame is None:
                            break
                        self._post("frame", frame[0], frame[1])
                except FramingError as e:
                    self._post("end", "sent a malformed frame: %s" % e, None)
                    return

        def read_stderr() -> None:
            block_signals_in_thread()
            try:
                while True:
                    chunk = os.read(stderr.fileno(), 65536)
                    if not chunk:
                        return
                    self._stderr.add(chunk)
            except (OSError, ValueError):
                pass
            finally:
                stderr.close()

        threading.Thread(target=read_stdout, name="ckptd-aio-stdout-%d" % proc.pid, daemon=True).start()
        self._stderr_thread = threading.Thread(target=read_stderr, name="ckptd-aio-stderr-%d" % proc.pid, daemon=True)
        self._stderr_thread.start()

    def _post(self, kind: str, a: Any, b: Optional[bytes]) -> None:
        with self._inbox_lock:
            self._inbox.append((kind, a, b))
            loop = self._io_loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._drain_inbox)
            except RuntimeError:  # closed: the next loop it is attached to drains the inbox
                pass

    def _drain_inbox(self) -> None:
        while True:
            with self._inbox_lock:
                if not self._inbox:
                    return
                kind, a, b = self._inbox.popleft()
            if kind == "end":
                self._stdout_ended(a)
                return
            try:
                msg = decode_body(a)
            except FramingError as e:
                self._stdout_ended("sent a frame that is not JSON: %s" % e)
                return
            self._dispatch(msg, b)

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

    def _fail_all(self, err: CkptdError) -> None:
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(C_fresh(err))

    def add_notification_handler(self, handler: NotificationHandler) -> None:
        self._handlers.append(handler)

    def remove_notification_handler(self, handler: NotificationHandler) -> None:
        self._handlers.remove(handler)

    # -----------------------------------------------------------------------------------------
    # Methods (see ckptd.Client for the documentation of each)

    async def initialize(
        self, *, client_name: Optional[str] = None, events: Optional[Iterable[str]] = None, _internal: bool = False
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {}
        C.put(params, "clientName", client_name)
        if events is not None:
            params["events"] = list(events)
        result, _ = await self._request("initialize", params, _internal=_internal)
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
        fencing_token: Optional[int] = None,
        validation: Optional[Mapping[str, Any]] = None,
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
            fencing_token=fencing_token,
            validation=validation,
        )
        sent, middle, base = C.delta_save(self._deltas, params, att)
        try:
            result, _ = await self._request("checkpoint/save", sent, middle)
        except CkptdError as e:
            if not C.base_unusable(e, base):
                raise
            result, _ = await self._request("checkpoint/save", params, att)  # the base is gone: send it whole
        if self._deltas is not None and att is not None and isinstance(result, dict):
            self._deltas.remember(workflow_id, namespace or "", result.get("checkpointId", ""), att)
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
        validation: Optional[str] = None,
    ) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "namespace", namespace)
        C.put(params, "phase", phase)
        if metadata is not None:
            params["metadata"] = dict(metadata)
        C.put(params, "before", before)
        C.put(params, "limit", limit)
        C.put(params, "validation", validation)
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
        validation: Optional[Mapping[str, Any]] = None,
        compensation: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {"workflowId": workflow_id}
        r = C.retention_param(retention, keep_last, max_age_seconds, keep_first, idle_ttl_seconds)
        if r is not None:
            params["retention"] = r
        if validation is not None:
            params["validation"] = dict(validation)
        if compensation is not None:
            params["compensation"] = dict(compensation)
        result, _ = await self._request("workflow/configure", params)
        return result  # type: ignore[no-any-return]

    async def complete(self, workflow_id: str, *, preserve: bool = False, fencing_token: Optional[int] = None) -> Dict[str, Any]:
        params: Dict[str, Any] = {"workflowId": workflow_id}
        if preserve:
            params["preserve"] = True
        C.put(params, "fencingToken", fencing_token)
        result, _ = await self._request("workflow/complete", params)
        return result  # type: ignore[no-any-return]

    def workflows(self, *, resumable_only: bool = False, claimable: bool = False, order: Optional[str] = None,
                  page_size: Optional[int] = None) -> "AsyncWorkflows":
        """``workflow/list``, page by page: ``async for wf in client.workflows(): ...`` fetches one
        page (``page_size``, default 1000) at a time; ``await client.workflows()`` returns the list
        of every workflow (every page). ``order`` as ``Client.workflows``."""
        base = C.workflow_list_params(resumable_only, claimable, order, page_size, None)

        async def fetch(cursor: Optional[str]) -> Any:
            params = dict(base)
            if cursor is not None:
                params["cursor"] = cursor
            result, _ = await self._request("workflow/list", params)
            return result

        return AsyncWorkflows(fetch)

    async def workflow_page(self, *, resumable_only: bool = False, claimable: bool = False, order: Optional[str] = None,
                            limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """One ``workflow/list`` call: ``{workflows, cursor?}`` (as ``Client.workflow_page``)."""
        result, _ = await self._request("workflow/list", C.workflow_list_params(resumable_only, claimable, order, limit, cursor))
        return result  # type: ignore[no-any-return]

    async def put_writes(
        self,
        workflow_id: str,
        checkpoint_id: str,
        task_id: str,
        writes: Iterable[Any],
        *,
        namespace: Optional[str] = None,
        task_path: Optional[str] = None,
        fencing_token: Optional[int] = None,
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {
            "workflowId": workflow_id,
            "checkpointId": checkpoint_id,
            "taskId": task_id,
            "writes": C.writes_param(writes),
        }
        C.put(params, "namespace", namespace)
        C.put(params, "taskPath", task_path)
        C.put(params, "fencingToken", fencing_token)
        result, _ = await self._request("writes/put", params)
        return result  # type: ignore[no-any-return]

    def claim(
        self,
        workflow_id: str,
        owner: Optional[str] = None,
        lease_seconds: int = 30,
        *,
        renew_every: Optional[float] = None,
    ) -> "AsyncClaim":
        """The claim helper: ``async with client.claim(workflow_id, owner, lease_seconds) as c:``;
        renews in a task of the running loop (see :meth:`ckptd.Client.claim`)."""
        return AsyncClaim(self, workflow_id, owner, lease_seconds, renew_every=renew_every)

    async def claim_workflow(self, workflow_id: str, owner: str, lease_seconds: int) -> Dict[str, Any]:
        params = {"workflowId": workflow_id, "owner": owner, "leaseSeconds": lease_seconds}
        result, _ = await self._request("workflow/claim", params)
        return result  # type: ignore[no-any-return]

    async def renew_claim(self, workflow_id: str, fencing_token: int, lease_seconds: int) -> Dict[str, Any]:
        params = {"workflowId": workflow_id, "fencingToken": fencing_token, "leaseSeconds": lease_seconds}
        result, _ = await self._request("workflow/renew", params)
        return result  # type: ignore[no-any-return]

    async def release_claim(self, workflow_id: str, fencing_token: int) -> Dict[str, Any]:
        result, _ = await self._request("workflow/release", {"workflowId": workflow_id, "fencingToken": fencing_token})
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
        sources_root: Optional[str] = None,
        rollback: bool = False,
        to_checkpoint_id: Optional[str] = None,
    ) -> ResumePlan:
        params: Dict[str, Any] = {"workflowId": workflow_id, "attachment": True}
        C.put(params, "namespace", namespace)
        C.put(params, "checkpointId", checkpoint_id)
        C.put(params, "workflowHash", workflow_hash)
        if force:
            params["force"] = True
        if drift_as_warning:
            params["driftAsWarning"] = True
        if sources_root is not None:
            params["sourcesRoot"] = os.path.abspath(os.fspath(sources_root))
        if rollback:
            params["rollback"] = True
        C.put(params, "toCheckpointId", to_checkpoint_id)
        result, att = await self._request("resume/plan", params)
        return ResumePlan(result, att)

    async def stats(self, *, workflow_id: Optional[str] = None, thread_id: Optional[str] = None) -> Dict[str, Any]:
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "threadId", thread_id)
        result, _ = await self._request("stats", params or None)
        return result  # type: ignore[no-any-return]

    async def drift_status(
        self,
        *,
        workflow_id: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        namespace: Optional[str] = None,
        sources_root: Optional[str] = None,
    ) -> Dict[str, Any]:
        params = C.target_params(checkpoint_id, workflow_id, "drift_status", namespace)
        if sources_root is not None:
            params["sourcesRoot"] = os.path.abspath(os.fspath(sources_root))
        result, _ = await self._request("drift/status", params)
        return result  # type: ignore[no-any-return]

    async def drift_watch(
        self,
        *,
        workflow_id: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        namespace: Optional[str] = None,
        debounce_ms: Optional[int] = None,
        callback: Optional[NotificationHandler] = None,
    ) -> Dict[str, Any]:
        params = C.target_params(checkpoint_id, workflow_id, "drift_watch", namespace)
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

    async def register_compensation(
        self,
        workflow_id: str,
        action: Any,
        description: str,
        *,
        namespace: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        step_name: Optional[str] = None,
        task_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``compensation/register`` (see :meth:`ckptd.Client.register_compensation`)."""
        result, _ = await self._request(
            "compensation/register",
            C.register_params(workflow_id, action, description, namespace, checkpoint_id, step_name, task_id),
        )
        return result  # type: ignore[no-any-return]

    async def rollback_plan(
        self,
        workflow_id: str,
        *,
        namespace: Optional[str] = None,
        to_checkpoint_id: Optional[str] = None,
        full: bool = False,
    ) -> Dict[str, Any]:
        """``rollback/plan`` (see :meth:`ckptd.Client.rollback_plan`)."""
        result, _ = await self._request("rollback/plan", C.rollback_plan_params(workflow_id, namespace, to_checkpoint_id, full))
        return C.rollback_plan_result(result)

    async def compensation_done(
        self, compensation_id: str, rollback_id: str, ok: bool = True, error: Optional[str] = None
    ) -> Dict[str, Any]:
        """``compensation/done`` (see :meth:`ckptd.Client.compensation_done`)."""
        result, _ = await self._request("compensation/done", C.done_params(compensation_id, rollback_id, ok, error))
        return result  # type: ignore[no-any-return]

    async def rollback_complete(self, rollback_id: str, *, prune: bool = False) -> Dict[str, Any]:
        """``rollback/complete`` (see :meth:`ckptd.Client.rollback_complete`)."""
        params: Dict[str, Any] = {"rollbackId": rollback_id}
        if prune:
            params["prune"] = True
        result, _ = await self._request("rollback/complete", params)
        return result  # type: ignore[no-any-return]

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
        claim: Optional["AsyncClaim"] = None,
        sources_root: Optional[str] = None,
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
            claim=claim,
            sources_root=sources_root,
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
            try:
                await self.client.complete(self.workflow_id, preserve=self.preserve_on_complete, fencing_token=self._token())
            except Claimed as e:
                self._refused(e)
                raise

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
        return await self.client.drift_status(workflow_id=self.workflow_id, namespace=self.namespace or None)

    async def rollback(
        self,
        handler: Any,
        *,
        to_checkpoint_id: Optional[str] = None,
        full: bool = False,
        prune: bool = True,
    ) -> Dict[str, Any]:
        """The async twin of :meth:`ckptd.workflow.Workflow.rollback`; ``handler(action)`` may be
        a coroutine function."""
        from .workflow import RollbackFailed

        plan = await self.client.rollback_plan(
            self.workflow_id, namespace=self.namespace or None, **self._rollback_params(to_checkpoint_id, full)
        )
        rid = str(plan["rollbackId"])
        ran = []
        for act in plan.get("actions") or []:
            try:
                r = handler(act)
                if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
                    await r
            except Exception as e:
                await self.client.compensation_done(act.compensation_id, rid, ok=False, error=C.error_message(e))
                raise RollbackFailed(act, e, rid) from e
            await self.client.compensation_done(act.compensation_id, rid, ok=True)
            ran.append(act)
        done = await self.client.rollback_complete(rid, prune=prune)
        self._rolled_back(plan)
        if not plan.get("full") and plan.get("toCheckpointId"):
            p = await self.client.resume_plan(self.workflow_id, checkpoint_id=str(plan["toCheckpointId"]), **self._plan_params())
            self._apply_plan(p)
        return {"rollbackId": rid, "toCheckpointId": plan.get("toCheckpointId"), "full": bool(plan.get("full")),
                "ran": ran, "progress": done.get("progress"), "pruned": done.get("pruned", 0)}


class AsyncStep(_StepBase):
    """One step of an :class:`AsyncWorkflow`. SIGTERM during the step (when the running loop
    supports signal handlers and none is set for SIGTERM) cancels the step's task; the step saves
    ``interrupted`` and raises :class:`~ckptd.Interrupted`. Cancellation and KeyboardInterrupt
    also save ``interrupted``."""

    workflow: AsyncWorkflow

    async def compensate(self, action: Any, description: str = "", *, task_id: Optional[str] = None) -> Dict[str, Any]:
        """The async twin of :meth:`ckptd.workflow.Step.compensate`."""
        wf = self.workflow
        r = await wf.client.register_compensation(wf.workflow_id, action, description, **self._compensation_params(task_id))
        self.compensations.append(r)
        return r

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
        except BaseException as e:
            self.workflow._refused(e)
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
                wf._refused(save_err)
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
