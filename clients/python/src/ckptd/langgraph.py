"""LangGraph checkpointer on ckptd: :class:`CkptdSaver`.

Needs the optional extra: ``pip install 'ckptd[langgraph]'`` (it pulls ``langgraph-checkpoint``).
``import ckptd`` alone never imports LangGraph; only this module does.

Channel values are stored once per ``(thread, namespace, channel, version)`` (docs/protocol.md,
"LangGraph channel storage"): ``put`` sends only the channels named in ``new_versions``, and
``get_tuple`` fetches a checkpoint with every channel value it refers to in one round trip. Every
value goes through the saver's ``serde`` (``dumps_typed`` / ``loads_typed``) and travels as raw bytes
in the frame attachment, never as base64 or JSON.

Example::

    from ckptd.langgraph import CkptdSaver

    with CkptdSaver(db="agent.db") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

The saver has the sync methods (``put``, ``get_tuple``, ``list``, ...) and their async twins
(``aput``, ``aget_tuple``, ``alist``, ...), which run the same calls on the event loop's default
executor: the underlying :class:`ckptd.Client` is thread-safe and pipelines concurrent requests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import enum
import json
import math
import os
import random
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any, Dict, List, Optional, Tuple, Union

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ckptd.langgraph needs LangGraph's checkpoint package: pip install 'ckptd[langgraph]' "
        "(or pip install langgraph-checkpoint)"
    ) from e

from .client import Client

__all__ = ["CkptdSaver", "EMPTY_TYPE"]

#: Blob type meaning "this channel has this version but no value" (protocol: ``type: "empty"``).
EMPTY_TYPE = "empty"
#: Largest ``limit`` one ``lg/list`` request takes; larger limits are paged.
_MAX_LIMIT = 100000
# Threads for the async methods (CkptdSaver._run): calls in flight at once.
_ASYNC_THREADS = 32

_Segment = Dict[str, Any]


class _Packer:
    """Collects byte strings into one attachment and describes each as {offset, length}."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: List[bytes] = []
        self.size = 0

    def add(self, typ: str, data: Union[bytes, bytearray, memoryview]) -> _Segment:
        seg = {"type": typ, "offset": self.size, "length": len(data)}
        if data:
            self.parts.append(bytes(data) if not isinstance(data, bytes) else data)
            self.size += len(data)
        return seg

    def attachment(self) -> Optional[bytes]:
        if not self.parts:
            return None
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


def _json_default(o: Any) -> Any:
    """Makes metadata values JSON: what json cannot encode becomes its closest JSON form."""
    if isinstance(o, (datetime.datetime, datetime.date, datetime.time)):
        return o.isoformat()
    if isinstance(o, (uuid.UUID, PurePath)):
        return str(o)
    if isinstance(o, enum.Enum):
        return o.value
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", "replace")
    if hasattr(o, "model_dump"):
        return o.model_dump()
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return repr(o)


def _finite(v: Any) -> Any:
    """v with NaN and infinities (which JSON cannot carry) replaced by their names."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _json_value(v: Any) -> Any:
    """A JSON-ready copy of v (as json.loads(json.dumps(v)) would give, NaN made a string)."""
    return _finite(json.loads(json.dumps(v, default=_json_default, ensure_ascii=False)))


def _thread_id(config: RunnableConfig) -> str:
    try:
        return str(config["configurable"]["thread_id"])
    except KeyError:
        raise ValueError("config['configurable']['thread_id'] is required by the ckptd saver") from None


class CkptdSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver that stores checkpoints in ckptd.

    :param db: database path (``--db``) or ``postgres://`` URL for the ckptd daemon this saver starts.
    :param binary: the ckptd executable (default ``$CKPTD_PATH``, else the binary shipped in the
        package, else ``ckptd`` on ``PATH``).
    :param client: an existing :class:`ckptd.Client` to use instead of starting a daemon; the saver
        then leaves it open on :meth:`close`.
    :param serde: LangGraph serializer (default: LangGraph's ``JsonPlusSerializer``).
    :param args: extra daemon arguments (e.g. ``["--durability", "normal"]``) when the saver starts it.

    Other keyword arguments go to :class:`ckptd.Client` (``request_timeout``, ``on_fork``, ...).
    A saver created before a fork (gunicorn ``--preload``, Celery prefork, ``multiprocessing``) is
    safe to use in the forked processes: its client starts a daemon of its own there (see
    :class:`ckptd.Client`, ``on_fork``) and the parent's saver keeps working.

    Use it as a context manager (sync or async) or call :meth:`close`.
    """

    def __init__(
        self,
        db: Optional[str] = None,
        binary: Optional[str] = None,
        client: Optional[Client] = None,
        *,
        serde: Optional[SerializerProtocol] = None,
        args: Sequence[str] = (),
        **client_kwargs: Any,
    ) -> None:
        super().__init__(serde=serde)
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._executor_pid = 0
        if client is not None:
            if db is not None or binary is not None or args or client_kwargs:
                raise ValueError("give either client or db/binary/args, not both")
            self.client = client
            self._owns_client = False
        else:
            self.client = Client(db=db, binary=binary, args=args, client_name="ckptd-langgraph", **client_kwargs)
            self._owns_client = True

    # ------------------------------------------------------------------------------------------
    # Lifecycle

    def close(self) -> None:
        """Stops the daemon the saver started (everything acknowledged is on disk); idempotent."""
        ex, self._executor = self._executor, None
        if ex is not None and self._executor_pid == os.getpid():
            ex.shutdown(wait=False)
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> "CkptdSaver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "CkptdSaver":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def get_next_version(self, current: Optional[str], channel: None = None) -> str:
        """Versions like LangGraph's SQL savers: a zero-padded counter plus a random fraction, so
        that forks of one thread never reuse a (channel, version) key."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return "%032d.%016d" % (current_v + 1, int(random.random() * 10**16))

    # ------------------------------------------------------------------------------------------
    # Wire helpers

    def _loads(self, seg: Mapping[str, Any], att: Optional[bytes]) -> Any:
        off, n = seg["offset"], seg["length"]
        data = att[off : off + n] if (att is not None and n) else b""
        return self.serde.loads_typed((seg["type"], data))

    def _tuple(self, t: Mapping[str, Any], att: Optional[bytes]) -> CheckpointTuple:
        checkpoint = self._loads(t["checkpoint"], att)
        checkpoint["channel_values"] = {b["channel"]: self._loads(b, att) for b in t["blobs"]}
        thread, ns = t["threadId"], t["namespace"]
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": t["checkpointId"]}}
        parent = t.get("parentId")
        parent_config = (
            {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None
        )
        writes = [(w["taskId"], w["channel"], self._loads(w, att)) for w in t["writes"]]
        return CheckpointTuple(config, checkpoint, t.get("metadata") or {}, parent_config, writes)

    def _put_request(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> Tuple[Dict[str, Any], Optional[bytes], RunnableConfig]:
        conf = config["configurable"]
        thread = _thread_id(config)
        ns = conf.get("checkpoint_ns") or ""
        stored = dict(checkpoint)
        values = stored.pop("channel_values", None) or {}
        pk = _Packer()
        cp_seg = pk.add(*self.serde.dumps_typed(stored))
        blobs = []
        for channel, version in new_versions.items():
            if channel in values:
                typ, data = self.serde.dumps_typed(values[channel])
            else:
                typ, data = EMPTY_TYPE, b""
            seg = pk.add(typ, data)
            seg["channel"] = channel
            seg["version"] = version
            blobs.append(seg)
        params: Dict[str, Any] = {
            "threadId": thread,
            "namespace": ns,
            "checkpointId": checkpoint["id"],
            "checkpoint": cp_seg,
            "channelVersions": checkpoint.get("channel_versions") or {},
            "metadata": _json_value(get_checkpoint_metadata(config, metadata)),
            "blobs": blobs,
        }
        parent = conf.get("checkpoint_id")
        if parent:
            params["parentId"] = parent
        next_config = {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}
        return params, pk.attachment(), next_config

    def _writes_request(
        self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str, task_path: str
    ) -> Tuple[Dict[str, Any], Optional[bytes]]:
        conf = config["configurable"]
        pk = _Packer()
        items = []
        for idx, (channel, value) in enumerate(writes):
            seg = pk.add(*self.serde.dumps_typed(value))
            seg["channel"] = channel
            seg["idx"] = WRITES_IDX_MAP.get(channel, idx)
            items.append(seg)
        params = {
            "threadId": _thread_id(config),
            "namespace": conf.get("checkpoint_ns") or "",
            "checkpointId": conf["checkpoint_id"],
            "taskId": task_id,
            "taskPath": task_path,
            "writes": items,
        }
        return params, pk.attachment()

    @staticmethod
    def _get_params(config: RunnableConfig) -> Dict[str, Any]:
        conf = config["configurable"]
        params: Dict[str, Any] = {"threadId": _thread_id(config), "namespace": conf.get("checkpoint_ns") or ""}
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            params["checkpointId"] = checkpoint_id
        return params

    @staticmethod
    def _list_params(
        config: Optional[RunnableConfig], filter: Optional[Dict[str, Any]], before: Optional[RunnableConfig]
    ) -> Dict[str, Any]:
        params: Dict[str, Any] = {}
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            params["threadId"] = str(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            params["namespace"] = conf["checkpoint_ns"]
        if conf.get("checkpoint_id"):
            params["checkpointId"] = conf["checkpoint_id"]
        if filter:
            params["metadata"] = _json_value(filter)
        if before is not None:
            before_id = get_checkpoint_id(before)
            if before_id:
                params["before"] = before_id
        return params

    def _list_page(self, params: Dict[str, Any], remaining: Optional[int]) -> Tuple[List[CheckpointTuple], Optional[str]]:
        if remaining is not None:
            params["limit"] = min(remaining, _MAX_LIMIT)
        res, att = self.client.request("lg/list", params)
        return [self._tuple(t, att) for t in res["tuples"]], res.get("cursor")

    def _history(self, config: RunnableConfig, channels: Sequence[str]) -> Dict[str, Any]:
        params = self._get_params(config)
        params["channels"] = list(channels)
        res, att = self.client.request("lg/channelHistory", params)
        out: Dict[str, Any] = {}
        for ch in channels:
            h = res["channels"].get(ch) or {"writes": []}
            entry: Dict[str, Any] = {"writes": [(w["taskId"], w["channel"], self._loads(w, att)) for w in h["writes"]]}
            if h.get("seed") is not None:
                entry["seed"] = self._loads(h["seed"], att)
            out[ch] = entry
        return out

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: sync

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the latest of its thread and
        namespace) with its channel values and pending writes; ``None`` if there is none."""
        res, att = self.client.request("lg/get", self._get_params(config))
        t = res.get("tuple")
        return None if t is None else self._tuple(t, att)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id). ``config`` without ``thread_id``: every
        thread; without ``checkpoint_ns``: every namespace. ``filter`` matches top-level metadata
        keys exactly; ``before`` is a config whose checkpoint id bounds the result."""
        if limit is not None and limit <= 0:
            return
        params = self._list_params(config, filter, before)
        remaining = limit
        while True:
            tuples, cursor = self._list_page(params, remaining)
            yield from tuples
            if remaining is not None:
                remaining -= len(tuples)
                if remaining <= 0:
                    return
            if not cursor:
                return
            params["cursor"] = cursor

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """Stores ``checkpoint`` with the values of the channels in ``new_versions``; returns once it
        is committed at the daemon's durability."""
        params, att, next_config = self._put_request(config, checkpoint, metadata, new_versions)
        self.client.request("lg/put", params, att)
        return next_config

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Stores a task's pending writes against the checkpoint ``config`` names."""
        params, att = self._writes_request(config, writes, task_id, task_path)
        self.client.request("lg/putWrites", params, att)

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every checkpoint, write and channel value of the thread (all namespaces)."""
        self.client.request("thread/delete", {"threadId": str(thread_id)})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (and their writes) whose ``metadata.run_id`` is in ``run_ids``."""
        self.client.request("lg/deleteForRuns", {"runIds": [str(r) for r in run_ids]})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, write and channel value of a thread to another thread."""
        self.client.request(
            "thread/copy", {"sourceThreadId": str(source_thread_id), "targetThreadId": str(target_thread_id)}
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keeps the latest checkpoint of each namespace (and the ancestors its
        delta channels replay from); ``delete``: deletes the threads."""
        self.client.request("thread/prune", {"threadIds": [str(t) for t in thread_ids], "strategy": strategy})

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        """The ancestor writes and seed of each channel, walked by the daemon in one round trip."""
        if not channels:
            return {}
        return self._history(config, channels)

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: async (the sync calls on the saver's own threads)

    async def _run(self, fn: Any, *args: Any) -> Any:
        # The client pipelines calls from many threads over one daemon, whose writer commits
        # the writes that arrive together in one transaction: the more calls in flight, the
        # fewer commits. The loop's default executor has cpu_count + 4 threads (6 on two
        # cores), which capped concurrent graphs at 6 calls in flight (#18).
        ex = self._executor
        if ex is None or self._executor_pid != os.getpid():  # threads do not survive a fork
            ex = self._executor = concurrent.futures.ThreadPoolExecutor(_ASYNC_THREADS, thread_name_prefix="ckptd-saver")
            self._executor_pid = os.getpid()
        return await asyncio.get_running_loop().run_in_executor(ex, fn, *args)

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        params = self._list_params(config, filter, before)
        remaining = limit
        while True:
            tuples, cursor = await self._run(self._list_page, params, remaining)
            for t in tuples:
                yield t
            if remaining is not None:
                remaining -= len(tuples)
                if remaining <= 0:
                    return
            if not cursor:
                return
            params["cursor"] = cursor

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(lambda: self.prune(thread_ids, strategy=strategy))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        if not channels:
            return {}
        return await self._run(self._history, config, channels)
