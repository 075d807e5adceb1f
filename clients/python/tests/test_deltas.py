"""Wire deltas (docs/protocol.md, "Wire deltas"): the client sends a state that is an edit of the
last one it saved of the workflow as its changed middle only, through the real daemon; the
daemon rebuilds it byte for byte; a base that is gone makes the client send the state whole."""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any, Dict, List, Tuple

import pytest

import ckptd
from ckptd import _common as C


def counters(c: "ckptd.Client") -> Dict[str, int]:
    return c.stats()["counters"]  # type: ignore[no-any-return]


def grown_state(n: int) -> Dict[str, Any]:
    return {"messages": [{"role": "user", "content": "message %d %s" % (i, "lorem ipsum " * 80)} for i in range(n)], "step": n}


def test_common_prefix_and_suffix_match_a_plain_loop() -> None:
    rng = random.Random(7)

    def plain(a: bytes, b: bytes) -> Tuple[int, int]:
        p = 0
        while p < min(len(a), len(b)) and a[p] == b[p]:
            p += 1
        s = 0
        while s < min(len(a), len(b)) - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
            s += 1
        return p, s

    for t in range(200):
        a = bytes(rng.getrandbits(8) % 3 for _ in range(rng.randint(0, 3000)))
        b = bytearray(a)
        for _ in range(rng.randint(0, 3)):
            p = rng.randint(0, len(b))
            op = rng.randint(0, 2)
            if op == 0:
                b[p:p] = bytes(rng.getrandbits(8) % 3 for _ in range(rng.randint(1, 40)))
            elif op == 1:
                del b[p : p + rng.randint(1, 40)]
            else:
                b[p : p + 3] = b"xyz"
        kp, ks, middle = C.compute_delta(a, bytes(b))
        assert (kp, ks) == plain(a, bytes(b)), t
        assert a[:kp] + middle + a[len(a) - ks :] == bytes(b)
    big = os.urandom(300_000)
    nxt = big[:1000] + b"changed" + big[1000:]
    kp, ks, middle = C.compute_delta(big, nxt)
    assert (kp, ks, middle) == (1000, len(big) - 1000, b"changed")
    assert C.delta_pays(len(nxt), len(middle)) and not C.delta_pays(4096, 1) and not C.delta_pays(10_000, 5_000)


def test_growing_state_goes_as_deltas(client: "ckptd.Client") -> None:
    before = counters(client)
    states: List[Tuple[str, Dict[str, Any]]] = []
    for step in range(1, 8):
        st = grown_state(50 + step)
        r = client.save("wf", st, step=step)
        states.append((r["checkpointId"], st))
    after = counters(client)
    assert after["deltaSaves"] - before["deltaSaves"] == 6, "every save after the first is a delta"
    whole = len(json.dumps(states[0][1], separators=(",", ":")))
    # the first save sends the state; each later one about one message
    assert after["bytesIn"] - before["bytesIn"] < whole + 6 * 2000
    for cid, st in states:
        assert client.load(checkpoint_id=cid).state == st
    assert client.load(workflow_id="wf").state == states[-1][1]


def test_bytes_states_and_namespaces(client: "ckptd.Client") -> None:
    blob = os.urandom(100_000)
    client.save("wf", blob, namespace="a")
    client.save("wf", blob[:50_000] + b"!" + blob[50_000:], namespace="b")  # nothing remembered for b: whole
    edited = blob[:70_000] + b"edit" + blob[70_004:]
    r = client.save("wf", edited, namespace="a")
    assert client.load(checkpoint_id=r["checkpointId"]).state == edited
    assert counters(client)["deltaSaves"] == 1


def test_base_gone_sends_the_state_whole(client: "ckptd.Client") -> None:
    st = grown_state(60)
    first = client.save("wf", st)
    assert client.delete(checkpoint_id=first["checkpointId"])["deleted"] == 1
    st["messages"].append({"role": "assistant", "content": "after the delete"})
    r = client.save("wf", st)  # the delta's base is gone: -32001, then the state whole
    assert client.load(checkpoint_id=r["checkpointId"]).state == st
    assert counters(client)["deltaSaves"] == 0
    st["messages"].append({"role": "assistant", "content": "and again"})
    client.save("wf", st)  # the new base is there
    assert counters(client)["deltaSaves"] == 1


def test_unrelated_state_goes_whole(client: "ckptd.Client") -> None:
    client.save("wf", os.urandom(50_000))
    client.save("wf", os.urandom(50_000))
    assert counters(client)["deltaSaves"] == 0


def test_deltas_off(ckptd_bin: str, db_path: str) -> None:
    with ckptd.Client(db=db_path, binary=ckptd_bin, deltas=False) as c:
        st = grown_state(60)
        c.save("wf", st)
        st["step"] = 61
        r = c.save("wf", st)
        assert c.load(checkpoint_id=r["checkpointId"]).state == st
        assert counters(c)["deltaSaves"] == 0


def test_the_daemon_refuses_a_wrong_delta(client: "ckptd.Client") -> None:
    st = grown_state(60)
    r = client.save("wf", st)
    raw = json.dumps(st, separators=(",", ":")).encode()
    params = {"workflowId": "wf", "stateAttachment": True,
              "stateDelta": {"baseCheckpointId": r["checkpointId"], "keepPrefix": 10, "keepSuffix": 10, "sha256": "0" * 64}}
    with pytest.raises(ckptd.InvalidParams) as e:
        client.request("checkpoint/save", params, b"middle")
    assert e.value.data["field"] == "stateDelta.sha256"
    params["stateDelta"]["baseCheckpointId"] = "gone"
    with pytest.raises(ckptd.CheckpointNotFound) as nf:
        client.request("checkpoint/save", params, raw)
    assert nf.value.data["checkpointId"] == "gone"


def test_async_client_sends_deltas(ckptd_bin: str, db_path: str) -> None:
    async def main() -> None:
        async with ckptd.AsyncClient(db=db_path, binary=ckptd_bin) as c:
            st = grown_state(60)
            await c.save("wf", st)
            for i in range(3):
                st["messages"].append({"role": "tool", "content": "result %d" % i})
                r = await c.save("wf", st)
                assert (await c.load(checkpoint_id=r["checkpointId"])).state == st
            assert (await c.stats())["counters"]["deltaSaves"] == 3

    asyncio.run(main())
