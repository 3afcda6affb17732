#!/usr/bin/python3
"""mkproto.py DIR-PROTO DIR-HUB WSYNC-FILE: writes the protocol seed corpora.

DIR-PROTO gets single messages (replies and announcements as wsync(7) gives
them); DIR-HUB gets conversations in fuzz_hub's record format:
[flags][len: u16 LE][request] and, when flags bit 0 is set, [len][data].
WSYNC-FILE is a small valid .wsync file pushed by the hub seeds.
"""
import struct
import sys

import msgpack


def pack(m):
    return msgpack.packb(m, use_bin_type=True)


def record(req, data=None, peer=0):
    body = pack(req)
    out = bytes([(1 if data is not None else 0) | peer << 1]) + struct.pack("<H", len(body)) + body
    if data is not None:
        out += struct.pack("<H", len(data)) + data
    return out


def main():
    dproto, dhub, wfile = sys.argv[1:4]
    model = open(wfile, "rb").read()
    head = {"version": 3, "size": 4096, "content": 2**64 - 1, "time": 1.5}
    replies = {
        "hello": {"id": 1, "ok": True, "hub": "h:1", "proto": 1, "pub": "ipc:///x/pub",
                  "chunk": 4 << 20, "window": 8, "heartbeat_ms": 1000},
        "heads": {"id": 2, "ok": True, "hub": "h:1", "store": "0" * 32,
                  "heads": {"policy": head, "critic": {"version": 1}}},
        "stat": dict(head, id=3, ok=True, model="policy"),
        "get": {"id": 4, "ok": True, "off": 0, "len": 4096},
        "commit": {"id": 5, "ok": True, "versions": [
            {"model": "a", "version": 1, "size": 9, "content": 7},
            {"model": "b", "version": 2, "size": 9}]},
        "refusal": {"id": 6, "ok": False, "code": 66, "error": "no model \"x\""},
        "refusal-bad-code": {"id": 6, "ok": False, "code": 300, "error": "x\x01y"},
        "wait-timeout": {"id": 7, "ok": False, "code": 75, "error": "timed out", "missing": [
            {"worker": "w1", "version": 2, "seen": 0.5, "failure": "hook exited\n\x07"},
            {"worker": "w2", "version": 0, "seen": None}, {"version": 1}]},
        "status": {"id": 8, "ok": True, "hub": "h:1", "models": [
            {"model": "policy", "head": 3, "versions": [
                dict(head, pusher="p:1", workers=None)]}],
            "workers": [{"worker": "w1", "host": "h", "pid": 1, "models": ["policy"],
                         "applied": {"policy": 3}, "seen": 0.1, "alive": True,
                         "failure": None, 7: "non-string key", "x": [-1, 2.5, b"bin"]}]},
        "announcement": {"model": "policy", "version": 4, "size": 10, "content": 9,
                         "workers": ["w1"], "group": ["policy"]},
        "no-id": {"ok": True},
    }
    for name, m in replies.items():
        open(f"{dproto}/{name}.msgpack", "wb").write(pack(m))

    files = [{"model": "policy", "size": len(model)}]
    hello = {"id": 1, "op": "hello", "proto": 1, "role": "watch", "worker": "w1",
             "host": "h", "pid": 1, "models": ["policy"]}
    convs = {
        "hello-heads-bye": [record(hello), record({"id": 2, "op": "heads",
            "models": ["policy"], "worker": "w1", "applied": {"policy": 1}}),
            record({"id": 3, "op": "bye", "worker": "w1"})],
        "put-get-ack": [record(hello, peer=1),
            record({"id": 2, "op": "put", "files": files, "pusher": "p:1"}, model),
            record({"id": 3, "op": "stat", "model": "policy", "version": 0}, peer=1),
            record({"id": 4, "op": "get", "model": "policy", "version": 1, "off": 0,
                    "len": 64, "worker": "w1"}, peer=1),
            record({"id": 5, "op": "ack", "worker": "w1", "model": "policy", "version": 1},
                   peer=1),
            record({"id": 6, "op": "status"}, peer=2)],
        "begin-chunk-commit": [
            record({"id": 1, "op": "begin", "files": files + files, "workers": ["w1"]}),
            record({"id": 2, "op": "chunk", "upload": 1, "file": 0, "off": 0}, model),
            record({"id": 3, "op": "chunk", "upload": 1, "file": 1, "off": 0}, model[:100]),
            record({"id": 4, "op": "chunk", "upload": 1, "file": 1, "off": 100}, model[100:]),
            record({"id": 5, "op": "commit", "upload": 1})],
        "begin-abort": [record({"id": 1, "op": "begin", "files": files}),
            record({"id": 2, "op": "abort", "upload": 1})],
        "wait-fail": [record(hello),
            record({"id": 2, "op": "wait", "model": "policy", "version": 1, "mode": "ids",
                    "ids": ["w1"], "timeout_ms": 10}, peer=3),
            record({"id": 3, "op": "fail", "worker": "w1", "model": "policy", "version": 1,
                    "reason": "hook exited with status 3"}),
            record({"id": 4, "op": "wait", "model": "policy", "version": 1, "mode": "count",
                    "count": 2, "timeout_ms": 0}, peer=3)],
        "parts": [
            record({"id": 1, "op": "put", "files": files, "group": 1, "part": 0, "parts": 1,
                    "timeout_ms": 10}, model),
            record({"id": 2, "op": "begin", "files": files, "group": 2, "part": 0,
                    "parts": 2}),
            record({"id": 3, "op": "begin", "files": files, "group": 2, "part": 1,
                    "parts": 3}, peer=1),
            record({"id": 4, "op": "chunk", "upload": 2, "file": 0, "off": 0}, model),
            record({"id": 5, "op": "commit", "upload": 2}),
            record({"id": 6, "op": "put", "files": files, "group": 2, "part": 1,
                    "parts": 2}, model, peer=1),
            record({"id": 7, "op": "begin", "files": files, "group": 1, "part": 0,
                    "parts": 1}, peer=2)],
        "bad-frames": [record({"op": "hello"}), record({"id": 1, "op": "nope"}),
            record({"id": 2, "op": "status"}, b"unexpected data"), b"\x00\x03\x00\x93\x01\x02"],
    }
    for name, recs in convs.items():
        open(f"{dhub}/{name}.bin", "wb").write(b"".join(recs))


main()
