"""Claims: hand a workflow over between workers safely (docs/protocol.md, "Claims").

::

    with client.claim("wf-1", "worker-7", 30) as c:      # -32008 Claimed if another worker holds it
        with client.workflow("wf-1", claim=c) as wf:     # every save carries c.fencing_token
            wf.resume()
            ...

The helper claims the workflow, renews the lease in the background (a thread for
:class:`~ckptd.Client`, a task for :class:`~ckptd.AsyncClient`) while the block runs, and releases the
claim at the end. If the lease is lost meanwhile (another worker took the workflow over after a
renewal came too late, or no renewal got through before the lease ran out), the block's saves
are refused by the daemon (:class:`~ckptd.Claimed`), :meth:`Claim.check` raises, and leaving the
block raises :class:`~ckptd.ClaimLost`. Leases are measured on this process's monotonic clock from
when each claim or renewal was *sent*, never by comparing ``expiresAt`` with the wall clock: the
database's clock decides, and this way the client's view of the lease never outlasts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

from .errors import Claimed, ClaimLost, CkptdError, ClientClosed, DaemonDied

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

__all__ = ["Claim", "AsyncClaim", "default_owner"]

log = logging.getLogger("ckptd")

#: How long to wait between renewal attempts after one failed for another reason than the claim.
RETRY_SECONDS = 0.5


def default_owner() -> str:
    """``host:pid``: names this worker in ``workflow/claim``."""
    return "%s:%d" % (socket.gethostname(), os.getpid())


class _ClaimBase:
    def __init__(
        self, workflow_id: str, owner: Optional[str], lease_seconds: int, renew_every: Optional[float]
    ) -> None:
        if not isinstance(lease_seconds, int) or isinstance(lease_seconds, bool) or lease_seconds < 1:
            raise ValueError("lease_seconds must be an integer >= 1 (the daemon counts whole seconds)")
        if renew_every is not None and not (0 < renew_every < lease_seconds):
            raise ValueError("renew_every must be between 0 and lease_seconds")
        self.workflow_id = workflow_id
        self.owner = owner if owner is not None else default_owner()
        self.lease_seconds = lease_seconds
        #: Seconds between renewals (default: a third of the lease).
        self.renew_every = renew_every if renew_every is not None else lease_seconds / 3.0
        #: The claim's fencing token (``None`` until claimed): the workflow helpers send it with
        #: every save.
        self.fencing_token: Optional[int] = None
        #: The end of the lease as the daemon last reported it (the database's clock; for people).
        self.expires_at: Optional[str] = None
        #: Renewals that succeeded.
        self.renewals = 0
        #: Set once the claim is lost: what :meth:`check` and leaving the block raise.
        self.lost: Optional[ClaimLost] = None
        self.released = False
        self._deadline = 0.0  # monotonic: the lease ends no later than this, as far as we know

    @property
    def held(self) -> bool:
        """Claimed, not released, and not known to be lost."""
        return self.fencing_token is not None and not self.released and self.lost is None

    def check(self) -> None:
        """Raises :class:`ClaimLost` if the claim was lost; call it between units of work to stop
        early."""
        if self.lost is not None:
            raise self.lost

    def _granted(self, result: Any, sent: float) -> None:
        self.fencing_token = int(result["fencingToken"])
        self.expires_at = result.get("expiresAt")
        self._deadline = sent + self.lease_seconds

    def _lose(self, err: CkptdError) -> ClaimLost:
        if self.lost is None:
            if isinstance(err, Claimed):
                lost = ClaimLost(err.code, "lost the claim on workflow %r: %s" % (self.workflow_id, err.message), err.data)
            else:
                lost = ClaimLost(
                    None,
                    "lost the claim on workflow %r: the lease of %ds ran out without a renewal (%s)"
                    % (self.workflow_id, self.lease_seconds, err),
                    {
                        "workflowId": self.workflow_id,
                        "owner": self.owner,
                        "expiresAt": self.expires_at,
                        "reason": "no renewal before the lease ran out: %s" % err,
                    },
                )
            lost.__cause__ = err
            self.lost = lost
            log.warning("%s", lost)
        return self.lost

    def _note_refusal(self, err: BaseException) -> None:
        """Marks the claim lost after the daemon refused a write made with its token (-32008)."""
        if isinstance(err, Claimed) and self.held:
            self._lose(err)

    def _next_wait(self, failed: bool) -> float:
        left = self._deadline - time.monotonic()
        if failed:
            return max(0.0, min(RETRY_SECONDS, left))
        return max(0.0, min(self.renew_every, left))

    def _params(self) -> Dict[str, Any]:
        return {"workflowId": self.workflow_id, "fencingToken": self.fencing_token}

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held" if self.fencing_token else "new"
        return "<%s %r owner=%r token=%r %s>" % (type(self).__name__, self.workflow_id, self.owner, self.fencing_token, state)


class Claim(_ClaimBase):
    """A claim held through a :class:`~ckptd.Client`; made by :meth:`ckptd.Client.claim`. A context
    manager: claims on entry (raises :class:`Claimed` when another worker's claim is live), renews
    on a daemon thread, releases on exit; exits with :class:`ClaimLost` if the claim was lost."""

    def __init__(
        self,
        client: "Client",
        workflow_id: str,
        owner: Optional[str] = None,
        lease_seconds: int = 30,
        *,
        renew_every: Optional[float] = None,
    ) -> None:
        super().__init__(workflow_id, owner, lease_seconds, renew_every)
        self.client = client
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self) -> "Claim":
        """Claims the workflow and starts renewing (what entering the block does)."""
        if self.fencing_token is not None:
            raise RuntimeError("the claim was acquired already")
        sent = time.monotonic()
        result = self.client.claim_workflow(self.workflow_id, self.owner, self.lease_seconds)
        self._granted(result, sent)
        self._thread = threading.Thread(target=self._renew_loop, name="ckptd-claim-%s" % self.workflow_id, daemon=True)
        self._thread.start()
        return self

    def renew(self) -> Dict[str, Any]:
        """Renews the lease now (the background thread does it every :attr:`renew_every`)."""
        self.check()
        sent = time.monotonic()
        try:
            result = self.client.renew_claim(self.workflow_id, self.fencing_token, self.lease_seconds)  # type: ignore[arg-type]
        except Claimed as e:
            raise self._lose(e) from e
        self._granted(result, sent)
        self.renewals += 1
        return result  # type: ignore[no-any-return]

    def _renew_loop(self) -> None:
        failed = False
        while not self._stop.wait(self._next_wait(failed)):
            try:
                self.renew()
                failed = False
            except ClaimLost:
                return
            except (DaemonDied, ClientClosed) as e:
                self._lose(e)
                return
            except CkptdError as e:  # storage busy, a timeout...: try again until the lease ends
                failed = True
                if time.monotonic() >= self._deadline:
                    self._lose(e)
                    return

    def _stop_renewing(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def release(self) -> bool:
        """Stops renewing and releases the claim (unless it was lost); True if it was released now."""
        self._stop_renewing()
        if self.released or self.fencing_token is None or self.lost is not None:
            return False
        try:
            result = self.client.release_claim(self.workflow_id, self.fencing_token)
        except Claimed as e:
            raise self._lose(e) from e
        self.released = True
        return bool(result.get("released"))

    def __enter__(self) -> "Claim":
        return self.acquire()

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if exc_type is None:
            self.release()
            self.check()
            return
        # the block failed: release what we hold, let its exception through
        self._note_refusal(exc)  # type: ignore[arg-type]
        try:
            self.release()
        except CkptdError as e:
            log.warning("could not release the claim on %r: %s", self.workflow_id, e)


class AsyncClaim(_ClaimBase):
    """The :class:`~ckptd.AsyncClient` twin of :class:`Claim` (``async with``); renews in a task
    of the client's event loop."""

    def __init__(
        self,
        client: "AsyncClient",
        workflow_id: str,
        owner: Optional[str] = None,
        lease_seconds: int = 30,
        *,
        renew_every: Optional[float] = None,
    ) -> None:
        super().__init__(workflow_id, owner, lease_seconds, renew_every)
        self.client = client
        self._task: Optional["asyncio.Task[None]"] = None

    async def acquire(self) -> "AsyncClaim":
        if self.fencing_token is not None:
            raise RuntimeError("the claim was acquired already")
        sent = time.monotonic()
        result = await self.client.claim_workflow(self.workflow_id, self.owner, self.lease_seconds)
        self._granted(result, sent)
        self._task = asyncio.get_running_loop().create_task(self._renew_loop())
        return self

    async def renew(self) -> Dict[str, Any]:
        self.check()
        sent = time.monotonic()
        try:
            result = await self.client.renew_claim(self.workflow_id, self.fencing_token, self.lease_seconds)  # type: ignore[arg-type]
        except Claimed as e:
            raise self._lose(e) from e
        self._granted(result, sent)
        self.renewals += 1
        return result  # type: ignore[no-any-return]

    async def _renew_loop(self) -> None:
        failed = False
        while True:
            await asyncio.sleep(self._next_wait(failed))
            try:
                await self.renew()
                failed = False
            except ClaimLost:
                return
            except (DaemonDied, ClientClosed) as e:
                self._lose(e)
                return
            except CkptdError as e:  # storage busy, a timeout...: try again until the lease ends
                failed = True
                if time.monotonic() >= self._deadline:
                    self._lose(e)
                    return

    async def _stop_renewing(self) -> None:
        t = self._task
        if t is not None and t is not asyncio.current_task():
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass

    async def release(self) -> bool:
        await self._stop_renewing()
        if self.released or self.fencing_token is None or self.lost is not None:
            return False
        try:
            result = await self.client.release_claim(self.workflow_id, self.fencing_token)
        except Claimed as e:
            raise self._lose(e) from e
        self.released = True
        return bool(result.get("released"))

    async def __aenter__(self) -> "AsyncClaim":
        return await self.acquire()

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if exc_type is None:
            await self.release()
            self.check()
            return
        self._note_refusal(exc)  # type: ignore[arg-type]
        try:
            await self.release()
        except CkptdError as e:
            log.warning("could not release the claim on %r: %s", self.workflow_id, e)
