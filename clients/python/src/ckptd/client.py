"""The synchronous, thread-safe ckptd client."""

from __future__ import annotations

import atexit
import copy
import io
import itertools
import logging
import math
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _common as C
from ._common import NO_STATE, Checkpoint, NotificationHandler, ResumePlan, block_signals_in_thread, deferred_signals
from .claim import Claim
from .errors import (
    CkptdError,
    ClientClosed,
    ClientForked,
    DaemonDied,
    FramingError,
    ProtocolError,
    error_from_response,
)
from .framing import FrameReader, decode_body, encode_message

if TYPE_CHECKING:
    from .workflow import Workflow

__all__ = ["Client", "STDERR_TAIL_BYTES"]

log = logging.getLogger("ckptd")

#: How much of the daemon's stderr is kept for DaemonDied messages.
STDERR_TAIL_BYTES = 64 * 1024
#: How much of that tail goes into an exception's message (all of it is in ``.stderr_tail``).
_MESSAGE_TAIL_CHARS = 4000


def _fresh(exc: CkptdError) -> CkptdError:
    """A new instance of a stored exception, so threads never share one traceback."""
    return copy.copy(exc)


#: Callers read their own responses (see Client) where select.poll exists; elsewhere the reader
#: thread reads everything and hands each response over.
_CALLERS_READ = hasattr(select, "poll")
#: Writes up to this size to a pipe are atomic: a signal cannot leave such a frame half-written.
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)
#: While callers read for themselves, the reader thread looks again this often (seconds).
_READER_RECHECK = 0.05
#: The reader thread waits on stdout itself once no call has been in progress for this long.
_READER_IDLE_AFTER = 0.005


class _Pending:
    """One request waiting for its response. ``done`` and ``event`` change under Client._mu."""

    __slots__ = ("done", "event", "following", "result", "attachment", "error", "on_result", "method")

    def __init__(self, method: str, on_result: Optional[Callable[[Any], None]]) -> None:
        self.done = False
        #: only created if the caller has to wait for another thread to read its response
        self.event: Optional[threading.Event] = None
        #: waiting on event for the response or for its turn to read
        self.following = False
        self.result: Any = None
        self.attachment: Optional[bytes] = None
        self.error: Optional[BaseException] = None
        self.on_result = on_result
        self.method = method


class StderrTail:
    """Keeps the last ``limit`` bytes written to a stream."""

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._buf += chunk
            over = len(self._buf) - self.limit
            if over > 0:
                del self._buf[:over]

    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", "replace")


def died_error(exit_code: Optional[int], tail: str, reason: str = "") -> DaemonDied:
    if exit_code is None:
        status = "exit code unknown"
    elif exit_code < 0:
        try:
            signame = signal.Signals(-exit_code).name
        except (ValueError, AttributeError):
            signame = "signal %d" % -exit_code
        status = "exit code %d (killed by %s)" % (exit_code, signame)
    else:
        status = "exit code %d" % exit_code
    msg = "ckptd daemon died (%s)" % status
    if reason:
        msg += ": " + reason
    shown = tail.strip()
    if shown:
        if len(shown) > _MESSAGE_TAIL_CHARS:
            shown = "..." + shown[-_MESSAGE_TAIL_CHARS:]
        msg += "\n--- ckptd stderr (tail) ---\n" + shown
    else:
        msg += "; it wrote nothing to stderr"
    return DaemonDied(msg, exit_code, tail)


#: Values of the ``on_fork`` argument of the clients.
ON_FORK_MODES = ("spawn", "error")

_live_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _getcwd() -> Optional[str]:
    try:
        return os.getcwd()
    except OSError:  # removed since
        return None


def _drop_inherited(proc: Optional["subprocess.Popen[bytes]"]) -> None:
    """In a forked process: closes its copies of the fds of a daemon the parent started, without
    flushing, reading or locking anything (a buffered file's lock may be held by a parent thread
    that does not exist here, so only the raw files are closed; the buffered ones then count as
    closed), and makes sure nothing here ever waits for or kills that daemon."""
    if proc is None:
        return
    for f in (proc.stdin, proc.stdout, proc.stderr):
        raw = getattr(f, "raw", f)
        if raw is not None:
            try:
                raw.close()
            except (OSError, ValueError):
                pass
    # not our child: Popen.__del__/poll/wait would reap or signal by pid
    proc._child_created = False  # type: ignore[attr-defined]


def _close_at_process_exit(ref: "weakref.ref[Client]") -> None:
    client = ref()
    if client is not None:
        client.close()


def _after_fork_in_child() -> None:
    for client in list(_live_clients):
        try:
            client._after_fork_in_child()
        except Exception:  # pragma: no cover - never let one client break the child
            log.exception("ckptd client: dropping the parent's daemon after fork failed")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_all_at_exit() -> None:
    for client in list(_live_clients):
        try:
            client.close(timeout=5.0)
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass


atexit.register(_close_all_at_exit)


class Client:
    """Spawns ``ckptd`` and talks JSON-RPC to it over its stdin/stdout.

    Safe to share between threads: requests are pipelined (one writer lock; responses are matched
    to requests by id). A caller waiting for a response reads the daemon's stdout itself when no
    other thread is reading it, dispatching whatever else it reads (other callers' responses,
    notifications) on the way; otherwise it waits to be handed its response or the stream. A
    reader thread reads whenever no call is in progress (notifications, the daemon's exit). Use
    as a context manager, or call :meth:`close`; live clients are also closed at interpreter exit.

    :param db: database path (``--db``), or a ``postgres://`` URL (passed to the daemon in its
        environment as ``CKPTD_DB``, never on its command line); ``None`` lets the daemon use its
        default.
    :param binary: the ckptd executable; default ``$CKPTD_PATH``, else the binary shipped in
        this package (platform wheels), else ``ckptd`` on ``PATH`` (see :func:`find_binary`).
    :param args: extra command-line arguments (e.g. ``["--durability", "normal"]``).
    :param events: notifications to opt in to (``checkpoint/saved``, ``checkpoint/pruned``,
        ``checkpoint/corrupted``); they are passed to ``on_notification(method, params)``.
    :param on_notification: callback for notifications; runs on a dedicated thread, so it may
        call the client.
    :param timeout: seconds :meth:`close` waits for the daemon to exit before killing it.
    :param request_timeout: default seconds to wait for any response (``None``: no limit; a dead
        daemon is always detected regardless).
    :param initialize: send ``initialize`` on start (default); its result is :attr:`server_info`.
    :param on_fork: what the client does when used in a process forked from the one that started
        its daemon (gunicorn ``--preload``, Celery prefork, ``multiprocessing`` with fork):
        ``"spawn"`` (default) starts a daemon of its own in that process, on the same database with
        the same options, at the first call there; ``"error"`` raises :class:`ClientForked`. Either
        way the child never touches the parent's pipes, locks or threads, and the parent's client
        keeps working.
    :param deltas: send a state as a wire delta (docs/protocol.md, "Wire deltas") when it is an
        edit of the last state this client saved of the same workflow and namespace and the
        changed middle is under half of it (default); the client keeps that last state in memory
        (at most 256 workflows and 64 MiB). ``False``: every state is sent whole.
    """

    def __init__(
        self,
        db: Optional[Union[str, "os.PathLike[str]"]] = None,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        events: Iterable[str] = (),
        *,
        on_notification: Optional[NotificationHandler] = None,
        client_name: str = "ckptd-python/" + C.__version__,
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
        self.on_fork = on_fork
        self._use_deltas = deltas
        self.server_info: Dict[str, Any] = {}
        self.capabilities: Dict[str, Any] = {}
        #: Errors the daemon sent with ``id: null`` that could not be matched to a request.
        self.unmatched_errors: List[CkptdError] = []
        #: The daemon's process id (``None`` in a forked process until the client starts its own).
        self.pid: Optional[int] = None

        self._client_name = client_name
        self._initialize = initialize
        self._env = C.spawn_env(db, env)
        # A forked process starts its daemon where this one starts (a relative --db then names
        # the same file), even if it changed directory since.
        self._spawn_cwd = cwd if cwd is not None else _getcwd()
        self._handlers: List[NotificationHandler] = []
        if on_notification is not None:
            self._handlers.append(on_notification)
        self._watch_handlers: Dict[str, NotificationHandler] = {}
        self._closed = False
        self._reset()
        self._spawn(cwd)
        _live_clients.add(self)
        if initialize:
            try:
                self.initialize(client_name=client_name, events=self.events)
            except BaseException:
                self.close(timeout=min(timeout, 2.0))
                raise

    def _reset(self) -> None:
        """Fresh transport state (no daemon yet): new locks, no pending calls, no failure."""
        #: the last state saved per (workflowId, namespace): the base of the next save's delta
        self._deltas: Optional[C.DeltaMemory] = C.DeltaMemory() if self._use_deltas else None
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending: Dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._failure: Optional[CkptdError] = None
        # The read side: whoever holds _read_lock is the only thread reading stdout (through
        # _frames); _mu guards the done/event/following fields of the pending calls.
        self._read_lock = threading.Lock()
        self._mu = threading.Lock()
        #: set (to the reason, "" for a plain EOF) once stdout ended or became unusable
        self._stdout_done: Optional[str] = None
        self._last_release = time.monotonic()
        self._closing = False
        self._max_state_bytes: Optional[int] = None
        self._stderr = StderrTail()
        self._notify_queue: "queue.SimpleQueue[Optional[Tuple[str, Dict[str, Any]]]]" = queue.SimpleQueue()
        self._fork_lock = threading.Lock()  # one thread of a forked process starts its daemon
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._owner_pid = 0  # the process that started _proc
        self._waker: Optional[io.FileIO] = None
        self._wake_r = -1
        self.pid = None

    def _spawn(self, cwd: Optional[str]) -> None:
        """Starts the daemon and the client's threads (after _reset)."""
        self._proc = proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            cwd=cwd,
            # Own session: a Ctrl-C in the terminal reaches the agent (which may still want to
            # save an "interrupted" checkpoint), not the daemon.
            start_new_session=True,
        )
        self._owner_pid = os.getpid()
        assert proc.stdin and proc.stdout and proc.stderr
        self._stdin = proc.stdin
        self._stdin_raw = proc.stdin.raw  # type: ignore[attr-defined]  # frames are written whole
        self._frames = FrameReader(proc.stdout.raw)  # type: ignore[attr-defined]
        self._stdout_fd = proc.stdout.fileno()
        if _CALLERS_READ:
            self._wake_r, wake_w = os.pipe()  # wakes the reader thread
            os.set_blocking(self._wake_r, False)
            os.set_blocking(wake_w, False)
            self._waker = io.FileIO(wake_w, "wb")  # a file object: a write after close() fails
            self._lead_poll = select.poll()  # used by the thread holding _read_lock
            self._lead_poll.register(self._stdout_fd, select.POLLIN)
        self.pid = proc.pid
        self._stderr_thread = threading.Thread(target=self._stderr_loop, name="ckptd-stderr-%d" % self.pid, daemon=True)
        self._reader_thread = threading.Thread(target=self._read_loop, name="ckptd-reader-%d" % self.pid, daemon=True)
        self._notify_thread = threading.Thread(target=self._notify_loop, name="ckptd-notify-%d" % self.pid, daemon=True)
        self._stderr_thread.start()
        self._reader_thread.start()
        self._notify_thread.start()

    # -----------------------------------------------------------------------------------------
    # Fork safety. A forked process inherits the client with the parent's daemon pipes, locks
    # (possibly held by threads that do not exist in it) and pending calls. _after_fork_in_child
    # (run by os.register_at_fork in the child, before anything else can use the client) drops all
    # of it: it closes the child's copies of the pipe fds (the parent's stay open, so the parent's
    # daemon sees neither EOF nor a byte from the child) and never writes, reads, waits or kills.
    # The client is left "failed" with ClientForked: the hot path pays nothing (its existing
    # failure check), and the first call in the child either raises it or starts a new daemon.

    def _after_fork_in_child(self) -> None:
        proc, waker, wake_r, parent = self._proc, self._waker, self._wake_r, self._owner_pid
        if proc is None and isinstance(self._failure, ClientForked):  # forked again before use
            parent = self._failure.parent_pid
        closed = self._closed
        self._reset()
        self._closed = closed
        self._watch_handlers = {}  # watches live in the parent's daemon
        _drop_inherited(proc)
        if waker is not None:
            try:
                waker.close()
                os.close(wake_r)
            except OSError:
                pass
        if not closed:
            self._failure = ClientForked(parent, os.getpid())

    def _restart_after_fork(self) -> None:
        """Called with _failure a ClientForked: starts this process's own daemon (on_fork="spawn")
        or raises."""
        failure = self._failure
        if self.on_fork != "spawn" or self._closed:
            raise _fresh(failure)  # type: ignore[arg-type]
        with self._fork_lock:
            if self._failure is not failure:
                return  # another thread of this process started it
            self._spawn(self._spawn_cwd)
            _live_clients.add(self)
            self._failure = None
        log.debug("ckptd client forked from pid %s: started daemon pid %s", failure.parent_pid, self.pid)  # type: ignore[union-attr]
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:
            # multiprocessing's children end with os._exit (no atexit), after running these
            mp_util.Finalize(None, _close_at_process_exit, args=(weakref.ref(self),), exitpriority=10)
        if self._initialize:
            self.initialize(client_name=self._client_name, events=self.events)

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def returncode(self) -> Optional[int]:
        """The daemon's exit code once it has exited, else ``None``."""
        return self._proc.poll() if self._proc is not None else None

    def stderr_tail(self) -> str:
        """The last ~64 KB the daemon wrote to stderr."""
        return self._stderr.text()

    def close(self, timeout: Optional[float] = None) -> None:
        """Stops the daemon cleanly: ``shutdown`` (which waits for every acknowledged save to be
        committed), close its stdin, wait up to ``timeout`` seconds (default: the client's), and
        kill it only if it has not exited by then. Idempotent."""
        if timeout is None:
            timeout = self.timeout
        if self._proc is not None and self._owner_pid != os.getpid():
            self._after_fork_in_child()  # forked by something that skips os.register_at_fork
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            self._closing = True
        proc = self._proc
        if proc is None:  # forked, and never used here: nothing of ours to stop
            _live_clients.discard(self)
            return
        try:
            if self._failure is None and proc.poll() is None:
                try:
                    self._request("shutdown", None, timeout=timeout, _closing_ok=True)
                except (CkptdError, TimeoutError, OSError) as e:
                    log.debug("shutdown request failed: %s", e)
            with self._write_lock:
                try:
                    self._stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("ckptd (pid %d) did not exit within %.1fs of shutdown; killing it", self.pid, timeout)
                proc.kill()
                proc.wait()
        finally:
            self._wake_reader()
            self._reader_thread.join(timeout=5)
            self._stderr_thread.join(timeout=5)
            self._fail_all(ClientClosed())
            if not self._reader_thread.is_alive() and self._waker is not None:
                self._waker.close()
                os.close(self._wake_r)
            self._notify_queue.put(None)
            if threading.current_thread() is not self._notify_thread:
                self._notify_thread.join(timeout=5)
            for f in (proc.stdout, proc.stderr):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
            _live_clients.discard(self)

    def kill(self) -> None:
        """Kills the daemon process (SIGKILL) without a clean shutdown (for tests and emergencies)."""
        if self._proc is not None:
            self._proc.kill()

    # -----------------------------------------------------------------------------------------
    # Transport

    def request(
        self,
        method: str,
        params: Any = None,
        attachment: Optional[bytes] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Tuple[Any, Optional[bytes]]:
        """Sends any JSON-RPC request and returns ``(result, attachment)``; raises the matching
        :class:`CkptdError` subclass for an error response."""
        return self._request(method, params, attachment, timeout=timeout)

    def _request(
        self,
        method: str,
        params: Any,
        attachment: Optional[bytes] = None,
        *,
        timeout: Optional[float] = None,
        on_result: Optional[Callable[[Any], None]] = None,
        _closing_ok: bool = False,
    ) -> Tuple[Any, Optional[bytes]]:
        if self._failure is not None:
            if self._failure.__class__ is not ClientForked:
                raise _fresh(self._failure)
            self._restart_after_fork()
        if self._closed and not _closing_ok:
            raise ClientClosed()
        p = _Pending(method, on_result)
        rid = next(self._ids)
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        frame = encode_message(msg, attachment)
        broken: Optional[BaseException] = None
        try:
            with self._write_lock:
                if self._failure is not None:
                    raise _fresh(self._failure)
                self._pending[rid] = p
                try:
                    if len(frame) <= _PIPE_BUF:
                        self._write(frame)  # one atomic write(2): a signal cannot cut it short
                    else:
                        with deferred_signals():
                            self._write(frame)
                except (OSError, ValueError) as e:  # broken pipe / closed: the daemon is gone
                    broken = e
            if broken is not None:
                self._on_broken_pipe(broken)
            self._wait(p, self.request_timeout if timeout is None else timeout)
        finally:
            self._pending.pop(rid, None)
        if p.error is not None:
            raise p.error
        return p.result, p.attachment

    def _write(self, frame: bytes) -> None:
        raw = self._stdin_raw
        n = raw.write(frame)
        if n != len(frame):
            with memoryview(frame) as mv:
                while n < len(frame):
                    n += raw.write(mv[n:])

    def _on_broken_pipe(self, err: BaseException) -> None:
        # The reader turns the daemon's exit into DaemonDied for every pending call; make sure it
        # does exit (a daemon that closed stdin but not stdout is killed).
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            log.warning("ckptd stopped reading its stdin (%s) but is still running; killing it", err)
            self._proc.kill()

    # Reading. Whoever holds _read_lock reads stdout through _frames and dispatches every frame
    # it reads (_pump). A caller waiting for its response takes the lock if it is free and reads
    # until its own response is dispatched (no hand-over between threads on the common path);
    # otherwise it "follows": waits on its event, which is set when another thread dispatches
    # its response or when the lock is released (_release_read hands the stream to one follower).
    # The reader thread takes the lock only when stdout has data and no call is in progress, or
    # as a fallback when calls wait and nobody reads for them; it never blocks in a read while
    # holding the lock. Whoever finds stdout ended records it in _stdout_done; the reader thread
    # then fails every pending call (_on_stdout_closed).

    def _wait(self, p: _Pending, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not p.done:
                remaining: Optional[float] = None
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError("ckptd did not answer %s within %ss" % (p.method, timeout))
                if _CALLERS_READ and self._stdout_done is None and self._read_lock.acquire(False):
                    try:
                        self._lead(p, deadline)
                    finally:
                        self._release_read()
                    continue
                with self._mu:
                    if p.done:
                        return
                    ev = p.event
                    if ev is None:
                        ev = p.event = threading.Event()
                    else:
                        ev.clear()
                    p.following = True
                # released between our acquire() and following = True: _release_read may have
                # found nobody to hand the stream to, so look again
                if _CALLERS_READ and self._stdout_done is None and not self._read_lock.locked():
                    p.following = False
                    continue
                ev.wait(remaining)
                p.following = False
        except BaseException:
            # a timeout or an interrupt: if the stream was just handed to us, pass it on
            if not p.done and not self._read_lock.locked():
                self._hand_over()
            raise

    def _lead(self, p: _Pending, deadline: Optional[float]) -> None:
        """Reads and dispatches frames until p is answered, stdout ends or the deadline passes
        (holding _read_lock)."""
        main = threading.current_thread() is threading.main_thread()
        if self._frames.buffered():
            with deferred_signals():
                self._pump(False)  # frames left behind by an interrupted reader
        while not p.done and self._stdout_done is None:
            if main or deadline is not None:
                # wait with poll: interruptible (Ctrl-C), and with a timeout; the main thread
                # then consumes what it got with SIGINT/SIGTERM deferred, so that an interrupt
                # never drops bytes read from the pipe or a frame not yet dispatched
                wait_ms = None if deadline is None else max(0, math.ceil((deadline - time.monotonic()) * 1000))
                if not self._lead_poll.poll(wait_ms):
                    if deadline is not None and time.monotonic() >= deadline:
                        return
                    continue
                if main:
                    with deferred_signals():
                        self._pump(True)
                    continue
            self._pump(True)

    def _pump(self, read: bool) -> None:
        """Reads once from stdout (if ``read``: blocks until there is data) and dispatches every
        complete frame buffered. Called holding _read_lock."""
        frames = self._frames
        try:
            if read and frames.fill() == 0:
                err = frames.eof_error()
                self._stdout_ended("" if err is None else "sent a malformed frame: %s" % err)
                return
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
        except (OSError, ValueError) as e:
            self._stdout_ended("reading its stdout failed: %s" % e)
        except Exception as e:  # pragma: no cover - a bug in dispatch: fail the calls, do not hang
            log.exception("ckptd client reader crashed")
            self._stdout_ended("client reader crashed: %r" % e)

    def _stdout_ended(self, reason: str) -> None:
        if self._stdout_done is None:
            self._stdout_done = reason
        self._wake_reader()  # it reports the end to every pending call

    def _release_read(self) -> None:
        """Releases _read_lock after a caller read (_wait)."""
        self._last_release = time.monotonic()
        self._read_lock.release()
        if len(self._pending) > 1:  # not just the releasing caller's own call
            self._hand_over()

    def _hand_over(self) -> None:
        """Wakes one caller that follows, so that it reads for itself."""
        ev = None
        with self._mu:
            # a copy: callers add and remove their calls without _mu (a thread of LangGraph's
            # executor could change the dict while this loop walked it)
            for q in list(self._pending.values()):
                if q.following and not q.done:
                    q.following = False
                    ev = q.event
                    break
        if ev is not None:
            ev.set()

    def _finish(self, p: _Pending) -> None:
        with self._mu:
            p.done = True
            ev = p.event
        if ev is not None:
            ev.set()

    def _wake_reader(self) -> None:
        if self._waker is not None:
            try:
                self._waker.write(b"!")
            except (OSError, ValueError):  # closed
                pass

    def _read_loop(self) -> None:
        block_signals_in_thread()
        try:
            if _CALLERS_READ:
                self._watch_stdout()
            else:
                while self._stdout_done is None:
                    with self._read_lock:
                        self._pump(True)
        except BaseException as e:  # pragma: no cover - a bug
            log.exception("ckptd reader thread crashed")
            if self._stdout_done is None:
                self._stdout_done = "client reader crashed: %r" % e
        self._on_stdout_closed(self._stdout_done or "")

    def _watch_stdout(self) -> None:
        fd, wake = self._stdout_fd, self._wake_r
        idle = select.poll()  # stdout or a wake-up
        idle.register(fd, select.POLLIN)
        idle.register(wake, select.POLLIN)
        nap = select.poll()  # only a wake-up
        nap.register(wake, select.POLLIN)
        probe = select.poll()  # stdout, without waiting
        probe.register(fd, select.POLLIN)

        def read_available() -> None:
            # never blocks: dispatches what is buffered, reads only what stdout already has
            if not self._read_lock.acquire(False):
                return  # a caller is reading
            try:
                if self._stdout_done is None and self._frames.buffered():
                    self._pump(False)  # frames left behind by an interrupted caller
                while self._stdout_done is None and probe.poll(0):
                    self._pump(True)
            finally:
                self._read_lock.release()
                self._hand_over()

        while self._stdout_done is None:
            if self._pending or self._read_lock.locked():
                # Calls in progress read for themselves. Fallback for calls that wait while
                # nobody reads (still writing their request, or a hand-over raced with a
                # timeout): read what is there and hand the stream to one of them.
                if nap.poll(_READER_RECHECK * 1000):
                    self._drain_wake()
                if self._pending and self._stdout_done is None:
                    read_available()
                continue
            quiet = time.monotonic() - self._last_release
            if quiet < _READER_IDLE_AFTER:
                # between two calls of a busy caller: do not race it for its next response
                if nap.poll(math.ceil((_READER_IDLE_AFTER - quiet) * 1000)):
                    self._drain_wake()
                continue
            if self._frames.buffered():
                read_available()
            ready = idle.poll()  # until the daemon writes, stdout ends, or a wake-up
            if any(r == wake for r, _ in ready):
                self._drain_wake()
            if self._stdout_done is None and any(r == fd for r, _ in ready):
                read_available()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except OSError:  # empty (BlockingIOError) or closed
            pass

    def _dispatch(self, msg: Any, attachment: Optional[bytes]) -> None:
        if not isinstance(msg, dict):
            log.warning("ignoring non-object message from ckptd: %r", msg)
            return
        if "id" not in msg or ("method" in msg and "result" not in msg and "error" not in msg):
            method = msg.get("method")
            if isinstance(method, str) and "id" not in msg:
                params = msg.get("params")
                self._notify_queue.put((method, params if isinstance(params, dict) else {}))
            else:
                log.warning("ignoring unexpected message from ckptd: %r", msg)
            return
        rid = msg["id"]
        p = self._pending.get(rid) if isinstance(rid, int) else None
        if "error" in msg:
            err = error_from_response(msg["error"])
            if p is None:
                self._unmatched(rid, err)
                return
            if p.done:
                return
            p.error = err
        else:
            if p is None or p.done:
                log.debug("dropping response to unknown or abandoned request id %r", rid)
                return
            p.result = msg.get("result")
            p.attachment = attachment
            if p.on_result is not None:
                try:
                    p.on_result(p.result)
                except Exception:  # pragma: no cover
                    log.exception("result hook failed")
        self._finish(p)

    def _unmatched(self, rid: Any, err: CkptdError) -> None:
        # Errors with id null answer a frame the daemon could not attribute (e.g. a frame over its
        # size limit). If exactly one request is waiting, it is the one: fail it rather than hang.
        self.unmatched_errors.append(err)
        pending = list(self._pending.items())
        if rid is None and len(pending) == 1:
            p = pending[0][1]
            if not p.done:
                p.error = err
                self._finish(p)
            return
        log.warning("ckptd error not matched to a request (id %r): %s", rid, err)

    def _on_stdout_closed(self, reason: str) -> None:
        if self._closing and not reason:
            err: CkptdError = ClientClosed()
        else:
            code = self._reap(reason)
            self._stderr_thread.join(timeout=2)
            err = died_error(code, self._stderr.text(), reason)
            if not self._closing:
                log.error("%s", err.message.splitlines()[0])
        with self._write_lock:
            if self._failure is None:
                self._failure = err
        self._fail_all(err)

    def _reap(self, reason: str) -> Optional[int]:
        """Waits for the daemon's exit after its stdout ended (or went bad), making sure it ends:
        a daemon that is still running after sending garbage gets SIGTERM (a clean shutdown),
        then SIGKILL."""
        if reason and self._proc.poll() is None:
            self._proc.terminate()
        for wait, action in ((5.0 if not reason else 2.0, "terminate"), (2.0, "kill"), (5.0, "")):
            try:
                return self._proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                if action == "terminate":
                    self._proc.terminate()
                elif action == "kill":
                    self._proc.kill()
        return None  # pragma: no cover

    def _fail_all(self, err: CkptdError) -> None:
        events = []
        with self._mu:
            for p in list(self._pending.values()):
                if not p.done:
                    p.error = _fresh(err)
                    p.done = True
                    if p.event is not None:
                        events.append(p.event)
        for ev in events:
            ev.set()

    def _stderr_loop(self) -> None:
        block_signals_in_thread()
        f = self._proc.stderr
        assert f is not None
        try:
            while True:
                chunk = f.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    break
                self._stderr.add(chunk)
        except (OSError, ValueError):
            pass

    def _notify_loop(self) -> None:
        while True:
            item = self._notify_queue.get()
            if item is None:
                return
            method, params = item
            if method == "drift/changed":
                h = self._watch_handlers.get(str(params.get("watchId")))
                if h is not None:
                    self._call_handler(h, method, params)
            for h in list(self._handlers):
                self._call_handler(h, method, params)

    @staticmethod
    def _call_handler(h: NotificationHandler, method: str, params: Dict[str, Any]) -> None:
        try:
            h(method, params)
        except Exception:
            log.exception("ckptd notification handler failed for %s", method)

    def add_notification_handler(self, handler: NotificationHandler) -> None:
        """Adds a ``handler(method, params)`` for every notification (see ``events``)."""
        self._handlers.append(handler)

    def remove_notification_handler(self, handler: NotificationHandler) -> None:
        self._handlers.remove(handler)

    # -----------------------------------------------------------------------------------------
    # Lifecycle methods

    def initialize(self, *, client_name: Optional[str] = None, events: Optional[Iterable[str]] = None) -> Dict[str, Any]:
        """``initialize``: called automatically on start; returns the server's hello."""
        params: Dict[str, Any] = {}
        C.put(params, "clientName", client_name)
        if events is not None:
            params["events"] = list(events)
        result, _ = self._request("initialize", params)
        self._on_initialized(result)
        return result  # type: ignore[no-any-return]

    def _on_initialized(self, result: Any) -> None:
        C.check_protocol_version(result)
        if isinstance(result, dict):
            self.server_info = result
            caps = result.get("capabilities")
            self.capabilities = caps if isinstance(caps, dict) else {}
            limit = self.capabilities.get("maxStateBytes")
            self._max_state_bytes = limit if isinstance(limit, int) and limit > 0 else None

    def has_capability(self, name: str) -> bool:
        """True if ``initialize`` reported a truthy capability ``name`` (e.g. ``"drift"``)."""
        return bool(self.capabilities.get(name))

    def shutdown(self) -> None:
        """``shutdown``: the daemon commits every save received, answers, and exits. Later calls
        fail with :class:`ShuttingDown` / :class:`DaemonDied`; prefer :meth:`close`."""
        self._request("shutdown", None)

    # -----------------------------------------------------------------------------------------
    # Checkpoints

    def save(
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
        """``checkpoint/save``. ``state`` travels as the frame's attachment: bytes-like states as
        they are (``stateType: bytes``), anything else JSON-encoded once (``stateType: json``);
        omit it to save without state. A state that is an edit of the last one this client saved
        of the workflow goes as a wire delta, only its changed middle (see ``deltas``); if the
        daemon no longer has that base, it is sent whole. Returns ``{checkpointId, seq,
        createdAt, sizeBytes, storedBytes, sha256, deduplicated}``."""
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
            result, _ = self._request("checkpoint/save", sent, middle)
        except CkptdError as e:
            if not C.base_unusable(e, base):
                raise
            result, _ = self._request("checkpoint/save", params, att)  # the base is gone: send it whole
        if self._deltas is not None and att is not None and isinstance(result, dict):
            self._deltas.remember(workflow_id, namespace or "", result.get("checkpointId", ""), att)
        return result  # type: ignore[no-any-return]

    def load(
        self,
        *,
        checkpoint_id: Optional[str] = None,
        workflow_id: Optional[str] = None,
        namespace: Optional[str] = None,
    ) -> Checkpoint:
        """``checkpoint/load`` by ``checkpoint_id``, or the latest of ``workflow_id``. The state
        comes back as the frame's attachment and is decoded per ``stateType``."""
        params = C.target_params(checkpoint_id, workflow_id, "load", namespace)
        params["attachment"] = True
        result, att = self._request("checkpoint/load", params)
        return Checkpoint(result, att)

    def list(
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
        """``checkpoint/list``: checkpoint summaries, newest first."""
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "namespace", namespace)
        C.put(params, "phase", phase)
        if metadata is not None:
            params["metadata"] = dict(metadata)
        C.put(params, "before", before)
        C.put(params, "limit", limit)
        C.put(params, "validation", validation)
        result, _ = self._request("checkpoint/list", params)
        return C.list_result(result, "checkpoints")

    def delete(self, *, checkpoint_id: Optional[str] = None, workflow_id: Optional[str] = None) -> Dict[str, Any]:
        """``checkpoint/delete`` one checkpoint, or a whole workflow. Returns ``{deleted}``."""
        params = C.target_params(checkpoint_id, workflow_id, "delete")
        result, _ = self._request("checkpoint/delete", params)
        return result  # type: ignore[no-any-return]

    def prune(
        self,
        workflow_id: Optional[str] = None,
        *,
        keep_last: Optional[int] = None,
        older_than_seconds: Optional[int] = None,
        dry_run: bool = False,
    ) -> Dict[str, Any]:
        """``checkpoint/prune``. Returns ``{deleted, freedBytes, dryRun}``."""
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "keepLast", keep_last)
        C.put(params, "olderThanSeconds", older_than_seconds)
        if dry_run:
            params["dryRun"] = True
        result, _ = self._request("checkpoint/prune", params)
        return result  # type: ignore[no-any-return]

    # -----------------------------------------------------------------------------------------
    # Workflows

    def configure(
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
        """``workflow/configure``: sets the retention policy, and with ``validation``
        (``{minConfidence?, warningThreshold?, rollbackOnFailure?, steps?}``) and ``compensation``
        (``{required: [stepName...]}``) the validation and compensation rules. Returns
        ``{workflowId, retention, validation?, compensation?}``."""
        params: Dict[str, Any] = {"workflowId": workflow_id}
        r = C.retention_param(retention, keep_last, max_age_seconds, keep_first, idle_ttl_seconds)
        if r is not None:
            params["retention"] = r
        if validation is not None:
            params["validation"] = dict(validation)
        if compensation is not None:
            params["compensation"] = dict(compensation)
        result, _ = self._request("workflow/configure", params)
        return result  # type: ignore[no-any-return]

    def complete(self, workflow_id: str, *, preserve: bool = False, fencing_token: Optional[int] = None) -> Dict[str, Any]:
        """``workflow/complete``: no longer resumable; checkpoints deleted unless ``preserve``."""
        params: Dict[str, Any] = {"workflowId": workflow_id}
        if preserve:
            params["preserve"] = True
        C.put(params, "fencingToken", fencing_token)
        result, _ = self._request("workflow/complete", params)
        return result  # type: ignore[no-any-return]

    def workflows(self, *, resumable_only: bool = False, claimable: bool = False, order: Optional[str] = None,
                  page_size: Optional[int] = None) -> C.Workflows:
        """``workflow/list``, page by page: ``for wf in client.workflows(): ...`` yields
        ``{workflowId, count, latest, resumable, completed, updatedAt, storedBytes}`` one page
        (``page_size``, default 1000) at a time. ``order``: ``"updated"`` (newest first, the
        default) or ``"id"``; claimable workflows come oldest first unless ``"id"``. The result
        also reads as a list (``len``, indexing, ``==``), fetching every page."""
        base = C.workflow_list_params(resumable_only, claimable, order, page_size, None)

        def fetch(cursor: Optional[str]) -> Any:
            params = dict(base)
            if cursor is not None:
                params["cursor"] = cursor
            result, _ = self._request("workflow/list", params)
            return result

        return C.Workflows(fetch)

    def workflow_page(self, *, resumable_only: bool = False, claimable: bool = False, order: Optional[str] = None,
                      limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """One ``workflow/list`` call: ``{workflows, cursor?}``; ``cursor`` is present when more
        follow (pass it back for the next page). ``limit``: 1-10000 (default 1000)."""
        result, _ = self._request("workflow/list", C.workflow_list_params(resumable_only, claimable, order, limit, cursor))
        return result  # type: ignore[no-any-return]

    def put_writes(
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
        """``writes/put``: pending writes of a task; each write is a dict ``{channel, value, idx?,
        type?}`` or a ``(channel, value[, idx])`` tuple (bytes values go base64). Returns ``{stored}``."""
        params: Dict[str, Any] = {
            "workflowId": workflow_id,
            "checkpointId": checkpoint_id,
            "taskId": task_id,
            "writes": C.writes_param(writes),
        }
        C.put(params, "namespace", namespace)
        C.put(params, "taskPath", task_path)
        C.put(params, "fencingToken", fencing_token)
        result, _ = self._request("writes/put", params)
        return result  # type: ignore[no-any-return]

    # -----------------------------------------------------------------------------------------
    # Claims

    def claim(
        self,
        workflow_id: str,
        owner: Optional[str] = None,
        lease_seconds: int = 30,
        *,
        renew_every: Optional[float] = None,
    ) -> "Claim":
        """A claim helper: ``with client.claim(workflow_id, owner, lease_seconds) as c:`` claims the
        workflow (raises :class:`Claimed` while another worker's claim is live), renews the lease
        on a background thread every ``renew_every`` seconds (default: a third of the lease) while
        the block runs, and releases it at the end; ``c.fencing_token`` is the claim's token, and
        ``client.workflow(..., claim=c)`` sends it with every save. A lost lease raises
        :class:`ClaimLost` (see :mod:`ckptd.claim`). ``owner`` defaults to ``host:pid``."""
        return Claim(self, workflow_id, owner, lease_seconds, renew_every=renew_every)

    def claim_workflow(self, workflow_id: str, owner: str, lease_seconds: int) -> Dict[str, Any]:
        """``workflow/claim``: returns ``{workflowId, owner, expiresAt, fencingToken}``; raises
        :class:`Claimed` (``.owner``, ``.expires_at``) while another worker's claim is live."""
        params = {"workflowId": workflow_id, "owner": owner, "leaseSeconds": lease_seconds}
        result, _ = self._request("workflow/claim", params)
        return result  # type: ignore[no-any-return]

    def renew_claim(self, workflow_id: str, fencing_token: int, lease_seconds: int) -> Dict[str, Any]:
        """``workflow/renew``: extends the lease of the claim holding ``fencing_token``."""
        params = {"workflowId": workflow_id, "fencingToken": fencing_token, "leaseSeconds": lease_seconds}
        result, _ = self._request("workflow/renew", params)
        return result  # type: ignore[no-any-return]

    def release_claim(self, workflow_id: str, fencing_token: int) -> Dict[str, Any]:
        """``workflow/release``: returns ``{workflowId, fencingToken, released}``."""
        result, _ = self._request("workflow/release", {"workflowId": workflow_id, "fencingToken": fencing_token})
        return result  # type: ignore[no-any-return]

    def resume_plan(
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
        """``resume/plan``: where to restart, with the state to continue from. Raises
        :class:`ResumeValidationError` (``.problems``) unless ``force``. Source drift since the
        checkpoint (when it was saved with ``sources``) is a problem, or with
        ``drift_as_warning`` a warning; the plan's ``drift`` field has the report. With ``rollback``
        (or ``to_checkpoint_id``) the plan starts from a rollback's target and its ``rollback``
        lists the compensations to run first."""
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
        result, att = self._request("resume/plan", params)
        return ResumePlan(result, att)

    def stats(self, *, workflow_id: Optional[str] = None, thread_id: Optional[str] = None) -> Dict[str, Any]:
        """``stats``: counters, latency percentiles, database sizes, and what the database's values
        take (``db.storage``: logical and stored bytes, their ratio). With ``workflow_id`` /
        ``thread_id``, also that workflow's (``workflow``) or thread's (``thread``) footprint."""
        params: Dict[str, Any] = {}
        C.put(params, "workflowId", workflow_id)
        C.put(params, "threadId", thread_id)
        result, _ = self._request("stats", params or None)
        return result  # type: ignore[no-any-return]

    # -----------------------------------------------------------------------------------------
    # Drift

    def drift_status(
        self,
        *,
        workflow_id: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        namespace: Optional[str] = None,
        sources_root: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``drift/status``: ``{drifted, changed, added, deleted: [{path, oldSize, newSize, oldHash,
        newHash}], filesChecked, elapsedMs, checkpointId, ...}`` for the sources recorded with a
        workflow's latest checkpoint (in ``namespace``, default ``""``) or a given checkpoint."""
        params = C.target_params(checkpoint_id, workflow_id, "drift_status", namespace)
        if sources_root is not None:
            params["sourcesRoot"] = os.path.abspath(os.fspath(sources_root))
        result, _ = self._request("drift/status", params)
        return result  # type: ignore[no-any-return]

    def drift_watch(
        self,
        *,
        workflow_id: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        namespace: Optional[str] = None,
        debounce_ms: Optional[int] = None,
        callback: Optional[NotificationHandler] = None,
    ) -> Dict[str, Any]:
        """``drift/watch``: returns ``{watchId}``; ``drift/changed`` notifications for it go to
        ``callback(method, params)`` (and to every notification handler)."""
        params = C.target_params(checkpoint_id, workflow_id, "drift_watch", namespace)
        C.put(params, "debounceMs", debounce_ms)

        def register(result: Any) -> None:
            # runs in the thread that reads the response, before any later notification is
            # dispatched
            if callback is not None and isinstance(result, dict) and "watchId" in result:
                self._watch_handlers[str(result["watchId"])] = callback

        result, _ = self._request("drift/watch", params, on_result=register)
        return result  # type: ignore[no-any-return]

    def drift_unwatch(self, watch_id: str) -> Any:
        """``drift/unwatch``: stops a watch."""
        self._watch_handlers.pop(str(watch_id), None)
        result, _ = self._request("drift/unwatch", {"watchId": watch_id})
        return result

    # -----------------------------------------------------------------------------------------
    # Compensation log

    def register_compensation(
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
        """``compensation/register``: records how to undo a side effect (``action``: JSON your
        rollback handler runs), durably once it returns; call it before the side effect. Returns
        ``{compensationId, seq}``."""
        result, _ = self._request(
            "compensation/register",
            C.register_params(workflow_id, action, description, namespace, checkpoint_id, step_name, task_id),
        )
        return result  # type: ignore[no-any-return]

    def rollback_plan(
        self,
        workflow_id: str,
        *,
        namespace: Optional[str] = None,
        to_checkpoint_id: Optional[str] = None,
        full: bool = False,
    ) -> Dict[str, Any]:
        """``rollback/plan``: begins (or continues: same ``rollbackId``) a rollback; returns
        ``{rollbackId, toCheckpointId?, full, actions, progress, ...}``, ``actions`` the
        compensations still to run, newest first (:class:`CompensationAction` each)."""
        result, _ = self._request("rollback/plan", C.rollback_plan_params(workflow_id, namespace, to_checkpoint_id, full))
        return C.rollback_plan_result(result)

    def compensation_done(
        self, compensation_id: str, rollback_id: str, ok: bool = True, error: Optional[str] = None
    ) -> Dict[str, Any]:
        """``compensation/done``: records durably that a rollback ran an action (``ok``) or that
        it failed (``error``). Returns ``{compensationId, status, remaining}``."""
        result, _ = self._request("compensation/done", C.done_params(compensation_id, rollback_id, ok, error))
        return result  # type: ignore[no-any-return]

    def rollback_complete(self, rollback_id: str, *, prune: bool = False) -> Dict[str, Any]:
        """``rollback/complete``: ends a rollback whose actions all ran; ``prune`` deletes the
        rolled-back checkpoints. Returns ``{rollbackId, progress, pruned}``."""
        params: Dict[str, Any] = {"rollbackId": rollback_id}
        if prune:
            params["prune"] = True
        result, _ = self._request("rollback/complete", params)
        return result  # type: ignore[no-any-return]

    # -----------------------------------------------------------------------------------------
    # Workflow helper

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
        claim: Optional["Claim"] = None,
        sources_root: Optional[str] = None,
    ) -> "Workflow":
        """A step-by-step checkpointing helper; see :class:`ckptd.workflow.Workflow`."""
        from .workflow import Workflow

        return Workflow(
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
