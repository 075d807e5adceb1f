"""LangGraph checkpointer on ckptd: :class:`CkptdSaver`.

Needs the optional extra: ``pip install 'ckptd[langgraph]'`` (it pulls ``langgraph-checkpoint``).
``import ckptd`` alone never imports LangGraph; only this module does.

Channel values are stored once per ``(thread, namespace, channel, version)`` (docs/protocol.md,
"LangGraph channel storage"): ``put`` sends only the channels named in ``new_versions``, and
``get_tuple`` fetches a checkpoint with every channel value it refers to in one round trip; each
checkpoint reads the values its own put stored, also when a replayed branch makes a version another
branch used. Every value goes through the saver's ``serde`` (``dumps_typed`` / ``loads_typed``) and
travels as raw bytes in the frame attachment, never as base64 or JSON; values that do not fit one
frame together (``--max-state-size`` applies per value) are sent ahead one by one.

The saver behaves like LangGraph's ``SqliteSaver``: ``list(filter=...)`` compares metadata with
Python's ``==`` (``{"flag": 1}`` matches ``True``, ``{"key": None}`` matches a checkpoint without
the key), any ``thread_id`` is taken (``""`` too; up to 2048 bytes), metadata floats ``nan`` and
``inf`` come back as the floats they were, and ``get_tuple`` with a ``checkpoint_id`` hands back the
caller's config. ``retention=`` bounds long threads (opt-in; see :class:`CkptdSaver`).

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
import hashlib
import json
import math
import numbers
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

from . import _common as C
from .client import Client
from .errors import CkptdError

__all__ = ["CkptdSaver", "EMPTY_TYPE"]

#: Blob type meaning "this channel has this version but no value" (protocol: ``type: "empty"``).
EMPTY_TYPE = "empty"
#: Largest ``limit`` one ``lg/list`` request takes; larger limits are paged.
_MAX_LIMIT = 100000
#: Attachment budget of one request when the daemon does not say (its default --max-state-size).
_DEFAULT_MAX_BYTES = 64 << 20
#: Metadata tags (docs/protocol.md, lg/put): JSON has no NaN or infinities, so such a float is
#: stored as {"$ckptd.float": "NaN" | "Infinity" | "-Infinity"}; an object of the caller's that
#: looks like a tag (one member named "$ckptd....") is stored wrapped in {"$ckptd.object": {...}}.
_TAG_PREFIX = "$ckptd."
_FLOAT_TAG = "$ckptd.float"
_OBJECT_TAG = "$ckptd.object"
#: Retention keys of ``CkptdSaver(retention=...)`` and their wire names.
_RETENTION_KEYS = {
    "keep_last": "keepLast",
    "keep_first": "keepFirst",
    "max_age_seconds": "maxAgeSeconds",
    "idle_ttl_seconds": "idleTtlSeconds",
}
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


def _tag(v: Any) -> Any:
    """v with NaN and infinities (which JSON cannot carry) as float tags, and objects that look
    like a tag wrapped (see _FLOAT_TAG)."""
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {_FLOAT_TAG: "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")}
    if isinstance(v, dict):
        out = {k: _tag(x) for k, x in v.items()}
        if len(out) == 1 and next(iter(out)).startswith(_TAG_PREFIX):
            return {_OBJECT_TAG: out}
        return out
    if isinstance(v, list):
        return [_tag(x) for x in v]
    return v


def _untag(v: Any) -> Any:
    """The inverse of _tag."""
    if isinstance(v, dict):
        if len(v) == 1:
            k, x = next(iter(v.items()))
            if k == _FLOAT_TAG and x in ("NaN", "Infinity", "-Infinity"):
                return float(x)
            if k == _OBJECT_TAG and isinstance(x, dict):
                return {kk: _untag(xx) for kk, xx in x.items()}
        return {k: _untag(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_untag(x) for x in v]
    return v


def _json_value(v: Any) -> Any:
    """A JSON-ready copy of v (as json.loads(json.dumps(v)) gives, what SqliteSaver stores), with
    NaN and infinities tagged so that they come back as the floats they were."""
    return _tag(json.loads(json.dumps(v, default=_json_default, ensure_ascii=False)))


def _has_nan(v: Any) -> bool:
    if isinstance(v, float):
        return v != v
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_nan(x) for x in v)
    return False


def _retention_params(retention: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The wire form of a ``retention=`` option (ValueError naming what is wrong)."""
    if retention is None:
        return None
    if not isinstance(retention, Mapping):
        raise ValueError("retention must be a dict such as {'keep_last': 20, 'idle_ttl_seconds': 2592000}")
    out: Dict[str, Any] = {}
    for key, value in retention.items():
        wire = _RETENTION_KEYS.get(key)
        if wire is None:
            raise ValueError(
                "retention: unknown key %r (known: %s)" % (key, ", ".join(sorted(_RETENTION_KEYS)))
            )
        if key == "keep_first":
            if not isinstance(value, bool):
                raise ValueError("retention: keep_first must be True or False")
            out[wire] = value
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0 or value != int(value):
            raise ValueError("retention: %s must be a whole number >= 0 (0 = off), not %r" % (key, value))
        out[wire] = int(value)
    return out


#: How far past the common prefix a value delta looks for a small replacement (a msgpack
#: list's count) followed by a long common run.
_DELTA_SKIP = 16


def _value_delta(base: bytes, new: bytes) -> Optional[Tuple[int, int, bytes, List[List[int]]]]:
    """(keepPrefix, keepSuffix, segment, copies) of ``new`` as a delta against ``base`` when it
    pays (docs/protocol.md, lg/put "Value deltas"), else None. One middle first; failing that, a
    replacement of at most 16 bytes after the common prefix (the count in the header of a msgpack
    list that grew), the long common run after it copied from the base, then the middle and the
    common suffix of the rest."""
    if len(new) <= C.DELTA_MIN_BYTES:
        return None
    kp, ks, middle = C.compute_delta(base, new)
    if C.delta_pays(len(new), len(middle)):
        return kp, ks, middle, []
    vb, vn = memoryview(base), memoryview(new)
    for j in range(1, _DELTA_SKIP + 1):
        at = kp + j
        if at >= len(base) or at >= len(new):
            break
        run = C.common_prefix(vb[at:], vn[at:])  # type: ignore[arg-type]
        if run * 100 < len(new) * C.DELTA_MAX_MIDDLE_PERCENT:
            continue
        end = at + run
        ks = C.common_suffix(vb[end:], vn[end:])  # type: ignore[arg-type]
        segment = new[kp:at] + new[end : len(new) - ks]
        if C.delta_pays(len(new), len(segment)):
            return kp, ks, segment, [[j, at, run]]
        break
    return None


def _delta_refused(e: CkptdError) -> bool:
    """Whether an lg/put failed because of one of its value deltas (its base missing, damaged or
    not what the delta was computed from): the put is then sent again with every value whole."""
    if e.code == -32002:
        return True
    field = e.data.get("field") if isinstance(e.data, dict) else None
    return e.code in (-32001, -32602) and isinstance(field, str) and ".delta" in field


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
    :param deltas: send a channel value as a wire delta against the channel's previous version
        (docs/protocol.md, lg/put "Value deltas") when the daemon takes them and that pays: the
        saver remembers the last value it put of each channel (at most 256 channels and 64 MiB,
        least recently put first out); a refused delta is sent again whole.
    :param retention: opt-in retention of the threads this saver writes (LangGraph keeps every
        checkpoint by default): ``{"keep_last": 20, "keep_first": False, "max_age_seconds": 0,
        "idle_ttl_seconds": 2592000}``, keys optional, 0 = off. After each put the daemon keeps
        the ``keep_last`` newest checkpoints of the put's thread and namespace (and the first one
        with ``keep_first``, none older than ``max_age_seconds``), plus every checkpoint a kept
        one's delta-channel replay needs and the put's parent; a thread no put has touched for
        ``idle_ttl_seconds`` is deleted by the daemon's next sweep. Sent with each put, it becomes
        the thread's own retention (docs/protocol.md, ``lg/configure``).

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
        retention: Optional[Mapping[str, Any]] = None,
        deltas: bool = True,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(serde=serde)
        self._retention = _retention_params(retention)
        # the last value put of each (thread, namespace, channel): the base of its next delta
        self._values: Optional[C.DeltaMemory] = C.DeltaMemory() if deltas else None
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
        if self._retention is not None and not self._lg_capability("retention"):
            self.close()
            raise ValueError("retention needs a ckptd that keeps LangGraph retention (lg/configure): upgrade the ckptd binary")

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
        that forks of one thread rarely make a version twice (a fork that does still reads its own
        values: each checkpoint refers to the values its put stored)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return "%032d.%016d" % (current_v + 1, int(random.random() * 10**16))

    # ------------------------------------------------------------------------------------------
    # Wire helpers

    def _lg_capability(self, name: str) -> Any:
        caps = self.client.capabilities.get("langgraph")
        return caps.get(name) if isinstance(caps, dict) else None

    def _frame_budget(self) -> int:
        """The largest attachment one request may carry (the daemon's --max-state-size)."""
        limit = self.client.capabilities.get("maxStateBytes")
        return limit if isinstance(limit, int) and limit > 0 else _DEFAULT_MAX_BYTES

    def _send(
        self, method: str, params: Dict[str, Any], segments: List[Tuple[Dict[str, Any], bytes]], thread: str
    ) -> Any:
        """Sends a request whose byte strings are segments (each a param dict to complete and its
        bytes): in one attachment when they fit one frame, else the largest go ahead one by one
        with lg/putValue and the request names them by valueId."""
        total = sum(len(b) for _, b in segments)
        staged = set()
        if total > self._frame_budget() and self._lg_capability("putValue"):
            for i in sorted(range(len(segments)), key=lambda i: -len(segments[i][1])):
                if total <= self._frame_budget():
                    break
                seg, data = segments[i]
                if not data:
                    break
                if "delta" in seg:
                    continue  # a delta's middle travels as a segment
                res, _ = self.client.request(
                    "lg/putValue", {"threadId": thread, "type": seg["type"], "offset": 0, "length": len(data)}, data
                )
                del seg["type"]
                seg["valueId"] = res["valueId"]
                staged.add(i)
                total -= len(data)
        pk = _Packer()
        for i, (seg, data) in enumerate(segments):
            if i not in staged:
                seg.update(pk.add(seg["type"], data))
        res, _ = self.client.request(method, params, pk.attachment())
        return res

    def _loads(self, seg: Mapping[str, Any], att: Optional[bytes]) -> Any:
        off, n = seg["offset"], seg["length"]
        data = att[off : off + n] if (att is not None and n) else b""
        return self.serde.loads_typed((seg["type"], data))

    def _tuple(self, t: Mapping[str, Any], att: Optional[bytes], config: Optional[RunnableConfig] = None) -> CheckpointTuple:
        checkpoint = self._loads(t["checkpoint"], att)
        checkpoint["channel_values"] = {b["channel"]: self._loads(b, att) for b in t["blobs"]}
        thread, ns = t["threadId"], t["namespace"]
        if config is None:
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": t["checkpointId"]}}
        parent = t.get("parentId")
        parent_config = (
            {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None
        )
        writes = [(w["taskId"], w["channel"], self._loads(w, att)) for w in t["writes"]]
        return CheckpointTuple(config, checkpoint, _untag(t.get("metadata") or {}), parent_config, writes)

    def _put_request(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> Tuple[Dict[str, Any], List[Tuple[Dict[str, Any], bytes]], RunnableConfig]:
        conf = config["configurable"]
        thread = _thread_id(config)
        ns = conf.get("checkpoint_ns") or ""
        stored = dict(checkpoint)
        values = stored.pop("channel_values", None) or {}
        typ, data = self.serde.dumps_typed(stored)
        cp_seg: Dict[str, Any] = {"type": typ}
        segments: List[Tuple[Dict[str, Any], bytes]] = [(cp_seg, data)]
        blobs = []
        for channel, version in new_versions.items():
            if channel in values:
                typ, data = self.serde.dumps_typed(values[channel])
            else:
                typ, data = EMPTY_TYPE, b""
            seg: Dict[str, Any] = {"channel": channel, "version": version, "type": typ}
            segments.append((seg, data))
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
        if self._retention is not None:
            params["retention"] = self._retention
        next_config = {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}
        return params, segments, next_config

    def _writes_request(
        self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str, task_path: str
    ) -> Tuple[Dict[str, Any], List[Tuple[Dict[str, Any], bytes]]]:
        conf = config["configurable"]
        segments: List[Tuple[Dict[str, Any], bytes]] = []
        items = []
        for idx, (channel, value) in enumerate(writes):
            typ, data = self.serde.dumps_typed(value)
            seg: Dict[str, Any] = {"channel": channel, "idx": WRITES_IDX_MAP.get(channel, idx), "type": typ}
            segments.append((seg, data))
            items.append(seg)
        params = {
            "threadId": _thread_id(config),
            "namespace": conf.get("checkpoint_ns") or "",
            "checkpointId": conf["checkpoint_id"],
            "taskId": task_id,
            "taskPath": task_path,
            "writes": items,
        }
        return params, segments

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
            params["metadataMatch"] = "python"
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
        namespace) with its channel values and pending writes; ``None`` if there is none. As
        SqliteSaver, a ``config`` naming a ``checkpoint_id`` is the tuple's config as given."""
        res, att = self.client.request("lg/get", self._get_params(config))
        t = res.get("tuple")
        if t is None:
            return None
        return self._tuple(t, att, config if get_checkpoint_id(config) else None)

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
        keys with Python's ``==`` (as SqliteSaver: ``{"k": None}`` also matches checkpoints without
        ``k``, ``1`` matches ``True``); ``before`` is a config whose checkpoint id bounds the result."""
        if limit is not None and limit <= 0:
            return
        if filter and _has_nan(filter):
            return  # nan == x is never true
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

    def _delta_put(
        self, params: Dict[str, Any], segments: List[Tuple[Dict[str, Any], bytes]]
    ) -> Optional[Tuple[Dict[str, Any], List[Tuple[Dict[str, Any], bytes]]]]:
        """The put with each value that pays sent as a delta against the channel's last value
        put (docs/protocol.md, lg/put "Value deltas"); None when none pays."""
        if self._values is None or not self._lg_capability("valueDeltas"):
            return None
        thread, ns = params["threadId"], params["namespace"]
        out: List[Tuple[Dict[str, Any], bytes]] = [(dict(segments[0][0]), segments[0][1])]
        blobs = []
        any_delta = False
        for seg, data in segments[1:]:
            seg = dict(seg)
            last = self._values.get(json.dumps([thread, seg["channel"]]), ns) if len(data) > C.DELTA_MIN_BYTES else None
            d = _value_delta(last[1], data) if last is not None else None
            if last is not None and d is not None:
                kp, ks, middle, copies = d
                seg["delta"] = {"baseVersion": json.loads(last[0]), "keepPrefix": kp, "keepSuffix": ks,
                                "sha256": hashlib.sha256(data).hexdigest()}
                if copies:
                    seg["delta"]["copies"] = copies
                data = middle
                any_delta = True
            out.append((seg, data))
            blobs.append(seg)
        if not any_delta:
            return None
        p = dict(params)
        p["checkpoint"], p["blobs"] = out[0][0], blobs
        return p, out

    def _remember_values(self, params: Dict[str, Any], segments: List[Tuple[Dict[str, Any], bytes]]) -> None:
        if self._values is None:
            return
        thread, ns = params["threadId"], params["namespace"]
        for seg, data in segments[1:]:
            if data:
                self._values.remember(json.dumps([thread, seg["channel"]]), ns, json.dumps(seg["version"]), data)

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """Stores ``checkpoint`` with the values of the channels in ``new_versions``; returns once it
        is committed at the daemon's durability. A value that grew from the channel's previous
        version goes as a wire delta (see ``deltas``)."""
        params, segments, next_config = self._put_request(config, checkpoint, metadata, new_versions)
        whole = [(dict(seg), data) for seg, data in segments]  # _send fills in the segments it sends
        delta = self._delta_put(params, segments)
        if delta is None:
            self._send("lg/put", params, segments, params["threadId"])
        else:
            try:
                self._send("lg/put", delta[0], delta[1], params["threadId"])
            except CkptdError as e:
                if not _delta_refused(e):
                    raise
                self._send("lg/put", params, segments, params["threadId"])  # the base is gone: send it whole
        self._remember_values(params, whole)
        return next_config

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Stores a task's pending writes against the checkpoint ``config`` names."""
        params, segments = self._writes_request(config, writes, task_id, task_path)
        self._send("lg/putWrites", params, segments, params["threadId"])

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

    def configure_retention(
        self, thread_id: Optional[str] = None, retention: Optional[Mapping[str, Any]] = None, *, inherit: bool = False
    ) -> Dict[str, Any]:
        """Sets or reads the retention of LangGraph threads (``lg/configure``): ``thread_id``'s own,
        or without it the database's, for every thread without its own; ``retention`` as the
        constructor's (``{"keep_last": 20, ...}``, keys not given are 0 = off), ``inherit=True``
        removes it instead, neither only reads. Returns the retention in force and where it comes
        from: ``{"threadId"?, "retention": {"keepLast", "keepFirst", "maxAgeSeconds",
        "idleTtlSeconds"}, "source": "thread" | "database" | "daemon"}``."""
        params: Dict[str, Any] = {}
        if thread_id is not None:
            params["threadId"] = str(thread_id)
        wire = _retention_params(retention)
        if wire is not None:
            params["retention"] = wire
        if inherit:
            params["inherit"] = True
        res, _ = self.client.request("lg/configure", params)
        return res  # type: ignore[no-any-return]

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
        if filter and _has_nan(filter):
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

    async def aconfigure_retention(
        self, thread_id: Optional[str] = None, retention: Optional[Mapping[str, Any]] = None, *, inherit: bool = False
    ) -> Dict[str, Any]:
        return await self._run(lambda: self.configure_retention(thread_id, retention, inherit=inherit))  # type: ignore[no-any-return]

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        if not channels:
            return {}
        return await self._run(self._history, config, channels)
