"""Shared, I/O-free pieces of the sync and async clients: binary lookup, state encoding,
param building and result decoding."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import BinaryNotFound, InvalidParams, TooLarge
from .framing import encode_json

__version__ = "0.1.0"

BINARY_NAME = "ckptd"
ENV_BINARY = "CKPTD_PATH"

JSON = Any
StateBytes = Union[bytes, bytearray, memoryview]
NotificationHandler = Callable[[str, Dict[str, Any]], Any]
#: Sources for drift detection: a path, a drift spec dict ({root, include, exclude, ...}), or a
#: sequence of those.
Sources = Union[str, "os.PathLike[str]", Mapping[str, Any], Sequence[Union[str, "os.PathLike[str]", Mapping[str, Any]]]]

KNOWN_EVENTS = ("checkpoint/saved", "checkpoint/pruned", "checkpoint/corrupted")


class _Unset:
    """Marker for "argument not given" where ``None`` is a meaningful value (a JSON ``null`` state)."""

    _instance: Optional["_Unset"] = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_STATE"

    def __bool__(self) -> bool:
        return False


#: Pass as ``state=`` to save a checkpoint without state (``stateType: none``). It is the default.
NO_STATE: Any = _Unset()


# ---------------------------------------------------------------------------------------------
# Finding the binary


def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _describe_missing(path: str) -> str:
    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path):
        return "is a directory"
    if not os.access(path, os.X_OK):
        return "is not executable"
    return "is not usable"


def packaged_binary() -> str:
    """Where a platform wheel puts the ckptd binary: ``ckptd/bin/ckptd`` (``ckptd.exe`` on
    Windows) inside this package. The file is absent in a client-only install."""
    name = BINARY_NAME + (".exe" if os.name == "nt" else "")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)


def _is_ckptd_command(path: str) -> bool:
    """True for the ``ckptd`` console script pip installs with this package (a small launcher that
    runs the packaged binary), which must not be taken for the binary itself."""
    try:
        if os.path.getsize(path) > (1 << 20):  # the real binary is ~10 MB
            return False
        with open(path, "rb") as f:
            return b"ckptd.__main__" in f.read()
    except OSError:
        return False


def find_binary(binary: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """Returns the path of the ckptd executable to run.

    Looks at, in order: the ``binary`` argument (a path, or a name searched on ``PATH``), the
    ``CKPTD_PATH`` environment variable, the binary shipped inside this package (platform
    wheels), and ``ckptd`` on ``PATH``. Raises :class:`BinaryNotFound` naming every place it
    looked (and why each did not do) when none gives an executable file. A given ``binary`` or a
    set ``CKPTD_PATH`` that does not work is an error, never a silent fallback to another build.
    """
    environ = os.environ if env is None else env
    searched: List[str] = []
    path_var = environ.get("PATH", os.defpath)

    if binary:
        binary = os.fspath(binary)
        if os.sep in binary or (os.altsep and os.altsep in binary):
            if _is_executable_file(binary):
                return os.path.abspath(binary)
            searched.append("binary=%r argument: %s" % (binary, _describe_missing(binary)))
        else:
            found = shutil.which(binary, path=path_var)
            if found:
                return found
            searched.append("binary=%r argument: no executable of that name on PATH (%s)" % (binary, path_var))
        raise BinaryNotFound(_not_found_message(searched), searched)

    searched.append("binary= argument: not given")
    # A set but unusable CKPTD_PATH is an error: the later places are listed, not used.
    env_value = environ.get(ENV_BINARY)
    unused = ""
    if env_value:
        if _is_executable_file(env_value):
            return os.path.abspath(env_value)
        if os.sep not in env_value and not os.path.exists(env_value):
            found = shutil.which(env_value, path=path_var)
            if found:
                return found
        searched.append("$%s=%r: %s" % (ENV_BINARY, env_value, _describe_missing(env_value)))
        unused = ", not used because $%s is set (fix or unset it)" % ENV_BINARY
    else:
        searched.append("$%s: not set" % ENV_BINARY)

    shipped = packaged_binary()
    if _is_executable_file(shipped):
        if not unused:
            return shipped
        searched.append("binary shipped with the package: found %s%s" % (shipped, unused))
    elif os.path.exists(shipped):
        searched.append("binary shipped with the package (%s): %s" % (shipped, _describe_missing(shipped)))
    else:
        searched.append("binary shipped with the package (%s): absent, this install of the client "
                        "has no binary (a client-only or source build)" % shipped)

    skipped = []
    for d in path_var.split(os.pathsep):
        found = shutil.which(BINARY_NAME, path=d) if d else None
        if not found:
            continue
        if _is_ckptd_command(found):
            skipped.append(found)
            continue
        if not unused:
            return found
        searched.append("$PATH: found %s%s" % (found, unused))
        break
    else:
        note = "; skipped %s (the pip package's launcher, not the binary)" % ", ".join(skipped) if skipped else ""
        searched.append("$PATH (%s): no executable named %r%s" % (path_var, BINARY_NAME, note))
    raise BinaryNotFound(_not_found_message(searched), searched)


def _not_found_message(searched: Sequence[str]) -> str:
    lines = ["ckptd executable not found. Looked at:"]
    lines.extend("  - " + s for s in searched)
    lines.append(
        "Install a platform wheel, which carries the binary (pip install ckptd: Linux, macOS and "
        "Windows on x86-64, Linux and macOS on arm64), or build it with `go build -o bin/ckptd "
        "./cmd/ckptd` in the ckptd repository and pass binary=PATH, set $CKPTD_PATH, or put it on $PATH."
    )
    return "\n".join(lines)


#: The daemon reads a database URL from this variable when it has no ``--db``.
ENV_DB = "CKPTD_DB"


def is_db_url(db: Optional[Union[str, "os.PathLike[str]"]]) -> bool:
    """Whether ``db`` names a PostgreSQL database (``postgres://`` or ``postgresql://``)."""
    return isinstance(db, str) and db[:13].lower().startswith(("postgres://", "postgresql://"))


#: The newest protocolVersion this client knows (docs/protocol.md).
PROTOCOL_VERSION = 1


class ProtocolVersionWarning(RuntimeWarning):
    """The daemon speaks a newer protocol version than this client knows."""


def check_protocol_version(result: Any) -> None:
    """Warns (once per daemon version, through :mod:`warnings`) when ``initialize`` reports a
    protocolVersion newer than this client knows: what it knows still works, newer features may
    not be reachable from it."""
    v = result.get("protocolVersion") if isinstance(result, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v > PROTOCOL_VERSION:
        warnings.warn(
            "ckptd %s speaks protocol version %d; this client (ckptd-python %s) knows version %d. "
            "It keeps working; upgrade the client (pip install -U ckptd) to use what is new."
            % (result.get("serverVersion", "?"), v, __version__, PROTOCOL_VERSION),
            ProtocolVersionWarning,
            stacklevel=3,
        )


def build_argv(binary: str, db: Optional[Union[str, "os.PathLike[str]"]], args: Iterable[str]) -> List[str]:
    """The daemon's command line. A database URL is not on it (it may hold a password, and a
    command line is visible to every user of the machine): :func:`spawn_env` passes it."""
    argv = [binary]
    if db is not None and not is_db_url(db):
        argv += ["--db", os.fspath(db)]
    argv.extend(str(a) for a in args)
    return argv


def spawn_env(db: Optional[Union[str, "os.PathLike[str]"]], env: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    """The daemon's environment: ``env`` (``None``: this process's), plus ``CKPTD_DB`` when ``db``
    is a database URL."""
    if not is_db_url(db):
        return dict(env) if env is not None else None
    out = dict(env if env is not None else os.environ)
    out[ENV_DB] = str(db)
    return out


# ---------------------------------------------------------------------------------------------
# States


def encode_state(state: Any, state_type: Optional[str] = None) -> Tuple[bytes, str]:
    """Returns (bytes, stateType) for a state: bytes-like states travel as they are
    (``bytes``, unless ``state_type="json"`` says they already are UTF-8 JSON text); anything else
    is JSON-encoded once."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        data = state.tobytes() if isinstance(state, memoryview) else bytes(state)
        st = state_type or "bytes"
        if st not in ("bytes", "json"):
            raise ValueError("state_type must be 'json' or 'bytes', not %r" % (st,))
        return data, st
    if state_type not in (None, "json"):
        raise ValueError("state_type=%r needs a bytes-like state" % (state_type,))
    try:
        text = encode_json(state)  # json.dumps(state, separators=(",", ":")), without its set-up
    except (TypeError, ValueError) as e:
        raise TypeError("state is not JSON-serialisable (pass bytes for opaque states): %s" % e) from None
    return text.encode("utf-8"), "json"


def decode_state(result: Mapping[str, Any], attachment: Optional[bytes]) -> Tuple[Any, Optional[bytes]]:
    """Returns (state, raw bytes) from a load / resume-plan result and its frame attachment."""
    st = result.get("stateType")
    raw: Optional[bytes]
    if result.get("stateAttachment"):
        raw = attachment if attachment is not None else b""
    elif "stateBase64" in result and result["stateBase64"] is not None:
        raw = base64.b64decode(result["stateBase64"])
    elif "state" in result:
        # inline JSON state (servers that ignore attachment: true)
        value = result["state"]
        return value, json.dumps(value, separators=(",", ":")).encode("utf-8")
    else:
        raw = attachment if st in ("json", "bytes") and attachment is not None else None
    if raw is None or st == "none":
        return None, raw
    if st == "bytes":
        return raw, raw
    # json (or unknown: best effort as JSON)
    return json.loads(raw.decode("utf-8")), raw


def check_size(size: int, limit: Optional[int]) -> None:
    if limit and size > limit:
        raise TooLarge(
            -32004,
            "too large: state is %d bytes, the daemon accepts at most %d (--max-state-size)" % (size, limit),
            {"limit": limit, "size": size},
        )


# ---------------------------------------------------------------------------------------------
# Params


def put(params: Dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        params[key] = value


def save_params(
    workflow_id: str,
    state: Any,
    *,
    namespace: Optional[str],
    checkpoint_id: Optional[str],
    parent_id: Optional[str],
    phase: Optional[str],
    step: Optional[int],
    step_name: Optional[str],
    error: Optional[Mapping[str, Any]],
    completed_tasks: Optional[Sequence[Any]],
    pending_tasks: Optional[Sequence[Any]],
    workflow_hash: Optional[str],
    metadata: Optional[Mapping[str, Any]],
    sources: Optional[Any],
    state_type: Optional[str],
    max_state_bytes: Optional[int],
    fencing_token: Optional[int] = None,
    validation: Optional[Mapping[str, Any]] = None,
) -> Tuple[Dict[str, Any], Optional[bytes]]:
    if not isinstance(workflow_id, str):
        raise TypeError("workflow_id must be a str")
    params: Dict[str, Any] = {"workflowId": workflow_id}
    put(params, "namespace", namespace)
    put(params, "checkpointId", checkpoint_id)
    put(params, "parentId", parent_id)
    put(params, "phase", phase)
    put(params, "step", step)
    put(params, "stepName", step_name)
    if error is not None:
        params["error"] = dict(error)
    put(params, "completedTasks", list(completed_tasks) if completed_tasks is not None else None)
    put(params, "pendingTasks", list(pending_tasks) if pending_tasks is not None else None)
    put(params, "workflowHash", workflow_hash)
    if metadata is not None:
        params["metadata"] = dict(metadata)
    if sources is not None:
        params["sources"] = sources_param(sources)
    put(params, "fencingToken", fencing_token)
    if validation is not None:
        params["validation"] = validation_param(validation)
    attachment: Optional[bytes] = None
    if state is not NO_STATE:
        attachment, st = encode_state(state, state_type)
        check_size(len(attachment), max_state_bytes)
        params["stateAttachment"] = True
        params["stateType"] = st
    return params, attachment


def register_params(
    workflow_id: str,
    action: Any,
    description: str,
    namespace: Optional[str],
    checkpoint_id: Optional[str],
    step_name: Optional[str],
    task_id: Optional[str],
) -> Dict[str, Any]:
    if action is None:
        raise ValueError("a compensation needs an action (the JSON your rollback handler runs)")
    params: Dict[str, Any] = {"workflowId": workflow_id, "action": action, "description": str(description)}
    put(params, "namespace", namespace)
    put(params, "checkpointId", checkpoint_id)
    put(params, "stepName", step_name)
    put(params, "taskId", task_id)
    return params


def rollback_plan_params(
    workflow_id: str, namespace: Optional[str], to_checkpoint_id: Optional[str], full: bool
) -> Dict[str, Any]:
    if full and to_checkpoint_id is not None:
        raise ValueError("give either to_checkpoint_id or full=True, not both")
    params: Dict[str, Any] = {"workflowId": workflow_id}
    put(params, "namespace", namespace)
    put(params, "toCheckpointId", to_checkpoint_id)
    if full:
        params["full"] = True
    return params


def rollback_plan_result(result: Any) -> Dict[str, Any]:
    if isinstance(result, dict):
        result = dict(result)
        result["actions"] = [CompensationAction(a) for a in result.get("actions") or []]
    return result  # type: ignore[no-any-return]


def done_params(compensation_id: str, rollback_id: str, ok: bool, error: Optional[str]) -> Dict[str, Any]:
    params: Dict[str, Any] = {"compensationId": compensation_id, "rollbackId": rollback_id, "ok": bool(ok)}
    put(params, "error", error)
    return params


def validation_param(validation: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``validation`` param of ``checkpoint/save``: ``{confidence, message?, details?}``, only
    those names. JSON has no number for NaN and the infinities (``json`` would write the invalid
    token ``NaN``): they go as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, which the
    daemon refuses with -32602 naming ``validation.confidence``, like any value outside [0, 1]."""
    unknown = set(validation) - {"confidence", "message", "details"}
    if unknown:
        raise ValueError("validation takes confidence, message and details, not %s" % ", ".join(sorted(unknown)))
    if "confidence" not in validation:
        raise ValueError("validation needs a confidence")
    out: Dict[str, Any] = {"confidence": json_number(validation["confidence"])}
    if validation.get("message") is not None:
        out["message"] = str(validation["message"])
    if validation.get("details") is not None:
        out["details"] = validation["details"]
    return out


def json_number(v: Any) -> Any:
    """v for a JSON number field; a float NaN or infinity becomes its name (a string)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _source(s: Any) -> Any:
    if isinstance(s, Mapping):
        d = dict(s)
        if isinstance(d.get("root"), (str, os.PathLike)):
            d["root"] = os.path.abspath(os.fspath(d["root"]))
        return d
    return os.path.abspath(os.fspath(s))


def sources_param(sources: Any) -> Dict[str, Any]:
    """The ``sources`` param: one drift spec ``{root, include?, exclude?, gitignore?}`` (the
    server's shape), its root made absolute. Accepts a spec dict, a path (the root), or a
    sequence holding exactly one of those; ckptd fingerprints one root per checkpoint (select
    parts of it with ``include`` / ``exclude`` globs)."""
    if isinstance(sources, Mapping):
        return _source(sources)
    if isinstance(sources, (str, os.PathLike)):
        return {"root": _source(sources)}
    items = list(sources)
    if len(items) != 1:
        raise ValueError(
            "sources: ckptd fingerprints one root per checkpoint; give one path or one "
            "{root, include, exclude} spec, not %d" % len(items)
        )
    return sources_param(items[0])


def target_params(
    checkpoint_id: Optional[str], workflow_id: Optional[str], what: str, namespace: Optional[str] = None
) -> Dict[str, Any]:
    if (checkpoint_id is None) == (workflow_id is None):
        raise ValueError("%s needs exactly one of checkpoint_id= or workflow_id=" % what)
    params: Dict[str, Any] = {}
    put(params, "checkpointId", checkpoint_id)
    put(params, "workflowId", workflow_id)
    put(params, "namespace", namespace)
    return params


def writes_param(writes: Iterable[Any]) -> List[Dict[str, Any]]:
    """Normalises writes given as dicts or (channel, value[, idx]) tuples; bytes values go as
    ``valueBase64``."""
    out: List[Dict[str, Any]] = []
    for w in writes:
        if isinstance(w, Mapping):
            d = dict(w)
        elif isinstance(w, (tuple, list)) and 2 <= len(w) <= 3:
            d = {"channel": w[0], "value": w[1]}
            if len(w) == 3:
                d["idx"] = w[2]
        else:
            raise TypeError("a write is a dict {channel, value, ...} or a (channel, value[, idx]) tuple, not %r" % (w,))
        v = d.get("value")
        if isinstance(v, (bytes, bytearray, memoryview)):
            d.pop("value")
            d["valueBase64"] = base64.b64encode(bytes(v)).decode("ascii")
        out.append(d)
    return out


def retention_param(
    retention: Optional[Mapping[str, Any]],
    keep_last: Optional[int],
    max_age_seconds: Optional[int],
    keep_first: Optional[bool],
    idle_ttl_seconds: Optional[int],
) -> Optional[Dict[str, Any]]:
    r: Dict[str, Any] = dict(retention) if retention is not None else {}
    put(r, "keepLast", keep_last)
    put(r, "maxAgeSeconds", max_age_seconds)
    put(r, "keepFirst", keep_first)
    put(r, "idleTtlSeconds", idle_ttl_seconds)
    return r if (r or retention is not None) else None


# ---------------------------------------------------------------------------------------------
# Results


class Checkpoint(Dict[str, Any]):
    """A loaded checkpoint: the raw result dict (camelCase fields as the daemon sent them) plus
    ``state`` (decoded per ``stateType``: JSON value, ``bytes``, or ``None`` for ``none``) and
    ``state_bytes`` (the state bytes exactly as stored)."""

    state: Any
    state_bytes: Optional[bytes]

    def __init__(self, result: Mapping[str, Any], attachment: Optional[bytes] = None) -> None:
        super().__init__(result)
        self.state, self.state_bytes = decode_state(result, attachment)

    # Convenience accessors for the most used fields.
    @property
    def checkpoint_id(self) -> str:
        return str(self.get("checkpointId", ""))

    @property
    def workflow_id(self) -> str:
        return str(self.get("workflowId", ""))

    @property
    def namespace(self) -> str:
        return str(self.get("namespace", ""))

    @property
    def seq(self) -> int:
        return int(self.get("seq", 0))

    @property
    def phase(self) -> str:
        return str(self.get("phase", ""))

    @property
    def step(self) -> int:
        return int(self.get("step", 0))

    @property
    def step_name(self) -> str:
        return str(self.get("stepName", ""))

    @property
    def state_type(self) -> str:
        return str(self.get("stateType", "none"))

    @property
    def error(self) -> Optional[Dict[str, Any]]:
        return self.get("error")

    @property
    def metadata(self) -> Dict[str, Any]:
        return self.get("metadata") or {}

    @property
    def completed_tasks(self) -> List[Any]:
        return self.get("completedTasks") or []

    @property
    def pending_tasks(self) -> List[Any]:
        return self.get("pendingTasks") or []

    @property
    def pending_writes(self) -> List[Dict[str, Any]]:
        return self.get("pendingWrites") or []

    @property
    def recovered_from(self) -> List[Dict[str, Any]]:
        return self.get("recoveredFrom") or []

    def __repr__(self) -> str:
        return "Checkpoint(%s, state=%s)" % (dict.__repr__(self), _short_repr(self.state))


class CompensationAction(Dict[str, Any]):
    """One action of a rollback (``rollback/plan``'s ``actions``): the raw dict plus accessors.
    ``action`` is the JSON registered with :meth:`Step.compensate`, for your handler to run."""

    @property
    def compensation_id(self) -> str:
        return str(self.get("compensationId", ""))

    @property
    def action(self) -> Any:
        return self.get("action")

    @property
    def description(self) -> str:
        return str(self.get("description", ""))

    @property
    def status(self) -> str:
        return str(self.get("status", ""))

    @property
    def seq(self) -> int:
        return int(self.get("seq", 0))

    @property
    def step_name(self) -> str:
        return str(self.get("stepName", ""))

    @property
    def error(self) -> Optional[str]:
        e = self.get("error")
        return str(e) if e else None


class ResumePlan(Checkpoint):
    """The result of ``resume/plan``: the raw dict plus the decoded ``state`` to continue from."""

    @property
    def start_step(self) -> int:
        return int(self.get("startStep", 0))

    @property
    def retry(self) -> bool:
        return bool(self.get("retry", False))

    @property
    def reason(self) -> str:
        return str(self.get("reason", ""))

    @property
    def warnings(self) -> List[Dict[str, Any]]:
        return self.get("warnings") or []

    @property
    def validation(self) -> Optional[Dict[str, Any]]:
        """The validation saved with the checkpoint, with its ``recommendation``, if any."""
        return self.get("validation")

    @property
    def rollback(self) -> Optional[Dict[str, Any]]:
        """``{rollbackId?, toCheckpointId?, full, actions}``: compensations to run before resuming
        (asked for with ``rollback=True``, or an unfinished rollback)."""
        return self.get("rollback")

    def should_run(self, index: int) -> bool:
        return index >= self.start_step

    def __repr__(self) -> str:
        return "ResumePlan(%s, state=%s)" % (dict.__repr__(self), _short_repr(self.state))


def _short_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


#: workflow/list orders: ``"updated"`` (most recently updated first, the default) or ``"id"``.
WORKFLOW_ORDERS = ("updated", "id")


def workflow_list_params(resumable_only: bool, claimable: bool, order: Optional[str], limit: Optional[int],
                         cursor: Optional[str]) -> Dict[str, Any]:
    """workflow/list's params; only the options given are sent."""
    params: Dict[str, Any] = {}
    if resumable_only:
        params["resumableOnly"] = True
    if claimable:
        params["claimable"] = True
    if order is not None:
        if order not in WORKFLOW_ORDERS:
            raise ValueError("order must be 'updated' or 'id', not %r" % (order,))
        params["order"] = order
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10000:
            raise ValueError("limit (page size) must be an int between 1 and 10000, not %r" % (limit,))
        params["limit"] = limit
    if cursor is not None:
        params["cursor"] = cursor
    return params


def page_cursor(result: Any) -> Optional[str]:
    """The cursor of a workflow/list page when more follow, else None."""
    if isinstance(result, dict):
        c = result.get("cursor")
        if isinstance(c, str) and c:
            return c
    return None


class Workflows:
    """The workflows of a ``workflow/list`` listing, fetched page by page (``Client.workflows``).

    Iterating (``for wf in client.workflows(): ...``) asks the daemon for one page at a time, so a
    database of any size costs the memory of one page. It still reads like the list earlier
    versions returned: ``len()``, indexing, ``==`` with a list and ``list()`` fetch every page
    (once, then kept). ``pages()`` yields the pages themselves (lists of workflow infos).
    """

    def __init__(self, fetch: Callable[[Optional[str]], Any]) -> None:
        self._fetch = fetch
        self._all: Optional[List[Dict[str, Any]]] = None

    def pages(self) -> Iterator[List[Dict[str, Any]]]:
        cursor: Optional[str] = None
        while True:
            result = self._fetch(cursor)
            yield list_result(result, "workflows")
            cursor = page_cursor(result)
            if cursor is None:
                return

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        if self._all is not None:
            return iter(self._all)
        return (wf for page in self.pages() for wf in page)

    def _load(self) -> List[Dict[str, Any]]:
        if self._all is None:
            self._all = [wf for page in self.pages() for wf in page]
        return self._all

    def __len__(self) -> int:
        return len(self._load())

    def __getitem__(self, i: Any) -> Any:
        return self._load()[i]

    def __bool__(self) -> bool:
        if self._all is not None:
            return bool(self._all)
        return any(True for _ in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Workflows):
            other = other._load()
        return self._load() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Workflows(%r)" % (self._load(),)


def list_result(result: Any, key: str) -> List[Dict[str, Any]]:
    if isinstance(result, dict):
        items = result.get(key)
        if isinstance(items, list):
            return items
    return []


# ---------------------------------------------------------------------------------------------
# Step outcome helpers (shared by the sync and async workflow helpers)

DEFAULT_RETRYABLE: Tuple[type, ...] = (TimeoutError, ConnectionError, OSError)


def is_retryable(exc: BaseException, retryable: Tuple[type, ...]) -> bool:
    """An exception (instance or class) may say ``retryable = True/False``; otherwise it is
    retryable when it is an instance of one of ``retryable``."""
    flag = getattr(exc, "retryable", None)
    if isinstance(flag, bool):
        return flag
    return isinstance(exc, retryable)


def error_message(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_DEFER_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)

# The C function where there is one (CPython's _signal, which the signal module imports):
# signal.pthread_sigmask wraps it and turns every returned signal number into a Signals enum
# member, which makes a block/restore pair about 3x as expensive.
_sigmask_fn: Optional[Callable[..., Any]] = getattr(sys.modules.get("_signal"), "pthread_sigmask", None) or getattr(
    signal, "pthread_sigmask", None
)
_HAVE_SIGMASK = _sigmask_fn is not None and sys.platform != "win32"
_pthread_sigmask: Callable[..., Any] = _sigmask_fn or (lambda how, mask: set())


class deferred_signals:
    """Blocks SIGINT/SIGTERM in the main thread for the duration (they are delivered on exit), so
    that a frame is never half-written or half-read and a phase save is never cut short by a
    signal. A no-op in other threads and on platforms without ``pthread_sigmask``.

    The sync client's reader threads block these signals for good (:func:`block_signals_in_thread`),
    so that while the main thread defers them the kernel cannot hand them to one of those instead
    (a thread of the application that does not block them still can)."""

    __slots__ = ("_old",)

    def __init__(self) -> None:
        self._old: Optional[Any] = None

    def __enter__(self) -> None:
        if _HAVE_SIGMASK and threading.current_thread() is threading.main_thread():
            self._old = _pthread_sigmask(signal.SIG_BLOCK, _DEFER_SIGNALS)

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            old, self._old = self._old, None
            _pthread_sigmask(signal.SIG_SETMASK, old)


def block_signals_in_thread() -> None:
    """Blocks SIGINT/SIGTERM in the calling (helper) thread for good: Python runs signal handlers
    in the main thread anyway, and a helper thread that accepted them would let them through
    while the main thread defers them. Only for threads that run no user code (a child process
    started from such a thread would inherit the mask)."""
    if _HAVE_SIGMASK and threading.current_thread() is not threading.main_thread():
        try:
            _pthread_sigmask(signal.SIG_BLOCK, _DEFER_SIGNALS)
        except (OSError, ValueError):  # pragma: no cover
            pass



# ---------------------------------------------------------------------------------------------
# Wire deltas (docs/protocol.md, "Wire deltas")

#: States up to this size are always sent whole.
DELTA_MIN_BYTES = 4 << 10
#: A delta is sent when its middle is less than this percentage of the state.
DELTA_MAX_MIDDLE_PERCENT = 50
#: What a client remembers of the states it saved: at most this many workflows (and namespaces)
#: and this many bytes, least recently saved first out.
DELTA_MEMORY_ENTRIES = 256
DELTA_MEMORY_BYTES = 64 << 20

_BLOCK = 64 << 10


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b``: equal 64 KiB blocks compared at C
    speed, then a bisection inside the first block that differs."""
    n = min(len(a), len(b))
    va, vb = memoryview(a), memoryview(b)
    i = 0
    while i + _BLOCK <= n and va[i : i + _BLOCK] == vb[i : i + _BLOCK]:
        i += _BLOCK
    lo, hi = i, min(i + _BLOCK, n)  # a[:lo] == b[:lo]; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if va[lo:mid] == vb[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: bytes, b: bytes) -> int:
    """Length of the longest common suffix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    va, vb = memoryview(a), memoryview(b)
    la, lb = len(a), len(b)
    i = 0
    while i + _BLOCK <= n and va[la - i - _BLOCK : la - i] == vb[lb - i - _BLOCK : lb - i]:
        i += _BLOCK
    lo, hi = i, min(i + _BLOCK, n)  # the last lo bytes are equal; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if va[la - mid : la - lo] == vb[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def compute_delta(prev: bytes, nxt: bytes) -> Tuple[int, int, bytes]:
    """(keepPrefix, keepSuffix, middle): the longest common prefix of ``prev`` and ``nxt``, then
    the longest common suffix of what follows it, and the bytes of ``nxt`` in between."""
    kp = common_prefix(prev, nxt)
    ks = common_suffix(memoryview(prev)[kp:], memoryview(nxt)[kp:])  # type: ignore[arg-type]
    return kp, ks, nxt[kp : len(nxt) - ks]


def delta_pays(size: int, middle: int) -> bool:
    """Whether a state of ``size`` bytes is worth sending as a delta with a middle of ``middle``
    bytes: over 4 KiB, and the middle under half of it."""
    return size > DELTA_MIN_BYTES and middle * 100 < size * DELTA_MAX_MIDDLE_PERCENT


class DeltaMemory:
    """The last state a client saved per (workflowId, namespace): the base of its next save's
    delta. Thread-safe; bounded (:data:`DELTA_MEMORY_ENTRIES`, :data:`DELTA_MEMORY_BYTES`)."""

    def __init__(self, max_entries: int = DELTA_MEMORY_ENTRIES, max_bytes: int = DELTA_MEMORY_BYTES) -> None:
        self._lock = threading.Lock()
        self._m: Dict[Tuple[str, str], Tuple[str, bytes]] = {}
        self._bytes = 0
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def get(self, workflow_id: str, namespace: str) -> Optional[Tuple[str, bytes]]:
        with self._lock:
            return self._m.get((workflow_id, namespace))

    def remember(self, workflow_id: str, namespace: str, checkpoint_id: str, state: bytes) -> None:
        key = (workflow_id, namespace)
        with self._lock:
            old = self._m.pop(key, None)
            if old is not None:
                self._bytes -= len(old[1])
            if len(state) <= DELTA_MIN_BYTES or len(state) > self.max_bytes // 4:
                return  # never sent as a delta (too small), or would crowd out the others
            self._m[key] = (checkpoint_id, state)  # last in dict order: most recent
            self._bytes += len(state)
            while self._m and (len(self._m) > self.max_entries or self._bytes > self.max_bytes):
                k = next(iter(self._m))
                self._bytes -= len(self._m.pop(k)[1])

    def forget(self, workflow_id: str, namespace: str) -> None:
        with self._lock:
            old = self._m.pop((workflow_id, namespace), None)
            if old is not None:
                self._bytes -= len(old[1])


def delta_save(
    memory: Optional[DeltaMemory], params: Dict[str, Any], attachment: Optional[bytes]
) -> Tuple[Dict[str, Any], Optional[bytes], Optional[str]]:
    """The params and attachment of a ``checkpoint/save`` sent as a delta against the last state
    saved of its workflow and namespace, when that pays; otherwise ``params`` and ``attachment``
    as they are. The third value is the base checkpoint id (``None``: sent whole)."""
    if memory is None or attachment is None or len(attachment) <= DELTA_MIN_BYTES:
        return params, attachment, None
    last = memory.get(params["workflowId"], params.get("namespace") or "")
    if last is None:
        return params, attachment, None
    base_id, base = last
    kp, ks, middle = compute_delta(base, attachment)
    if not delta_pays(len(attachment), len(middle)):
        return params, attachment, None
    p = dict(params)
    p["stateDelta"] = {
        "baseCheckpointId": base_id,
        "keepPrefix": kp,
        "keepSuffix": ks,
        "sha256": hashlib.sha256(attachment).hexdigest(),
    }
    return p, middle, base_id


def base_unusable(err: BaseException, base_id: Optional[str]) -> bool:
    """Whether a delta save failed because its base is gone (-32001) or damaged (-32002): the
    state is then sent whole."""
    if base_id is None:
        return False
    code = getattr(err, "code", None)
    data = getattr(err, "data", None)
    return code in (-32001, -32002) and isinstance(data, dict) and data.get("checkpointId") == base_id
