"""Signed publishes: a Publisher (and push) given a secret key signs each
publish, and workers that verify (wsync-watch and wsync-pull --verify-key, the
package's watch and pull) take it; a number not above the last is refused."""
import json
import os
import subprocess

import numpy as np
import pytest

import wsync
from conftest import wait_until


def arrays(step):
    return {"actor.weight": np.full((4, 8), step, np.float32), "steps": np.array(step)}


@pytest.fixture
def keys(tmp_path):
    """(secret, public, key id) of a new pair, and a second public key."""
    for name in ("key", "other"):
        subprocess.run(["wsync-keygen", "--sign", str(tmp_path / name)], check=True,
                       capture_output=True)
    with open(tmp_path / "key.pub") as f:
        key_id = f.readline().rsplit(" ", 1)[1].strip()
    return str(tmp_path / "key.key"), str(tmp_path / "key.pub"), key_id


def inspect(path, pub):
    """wsync-inspect --json --verify-key pub path, parsed."""
    r = subprocess.run(["wsync-inspect", "--json", "--verify-key", pub, path],
                       capture_output=True, check=True)
    return json.loads(r.stdout)


def signed(path, pub):
    """(key id, seq, models, signature) wsync-inspect reads in the file at path."""
    doc = inspect(path, pub)
    return doc["signed"]["key"], doc["signed"]["seq"], doc["signed"]["models"], \
        doc["signature"]


def start_watcher(procs, hub, tmp_path, worker, pub, models="policy"):
    """wsync-watch --verify-key pub following models into tmp_path/worker.wsync
    (a directory for several); its stdout lines go to tmp_path/worker.out."""
    out = open(tmp_path / f"{worker}.out", "w")
    p = subprocess.Popen(["wsync-watch", "-e", hub.endpoint, "--id", worker, "-m", models,
                          "-o", str(tmp_path / f"{worker}.wsync"), "--verify-key", pub],
                         stdout=out, stderr=subprocess.DEVNULL)
    out.close()
    procs.append(p)
    return p


def printed(tmp_path, worker):
    with open(tmp_path / f"{worker}.out") as f:
        return f.read().splitlines()


def test_a_signed_publish_is_applied_by_a_verifying_watcher_and_pull(hub, tmp_path, keys,
                                                                     procs):
    secret, pub, key_id = keys
    w1 = str(tmp_path / "w1.wsync")
    start_watcher(procs, hub, tmp_path, "w1", pub)
    wait_until(lambda: (hub.worker("w1") or {}).get("alive"), what="w1")
    with wsync.Publisher("policy", endpoint=hub.endpoint, sign_key=secret) as pub_:
        assert pub_.publish(arrays(1), meta={"step": 1}, seq=100, wait="all") == 1
        assert pub_.seq == 100
        assert pub_.slots        # written into the hub's slot, signed first
        assert pub_.publish(arrays(2), meta={"step": 2}, wait="all") == 2
        assert pub_.seq == 101   # the counter's next
    assert printed(tmp_path, "w1") == [f"policy 1 {w1}", f"policy 2 {w1}"]
    assert signed(w1, pub) == (key_id, 101, ["policy"], {"holds": True, "reason": "ok"})
    assert hub.worker("w1")["failure"] is None
    with open(secret + ".seq") as f:
        assert f.read() == "101\n"
    assert wsync.pull("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint,
                      verify_key=pub) == 2
    assert signed(str(tmp_path / "p.wsync"), pub)[1] == 101
    got, meta = wsync.read(str(tmp_path / "p.wsync"))
    assert np.array_equal(got["actor.weight"], arrays(2)["actor.weight"])
    assert meta["step"] == "2"


def test_a_signed_publish_pushed_as_a_file_is_signed_too(hub, tmp_path, keys):
    secret, pub, key_id = keys
    with wsync.Publisher("policy", endpoint=hub.endpoint, sign_key=secret,
                         directory=str(tmp_path)) as pub_:
        pub_.slots = False       # as off the hub's host: a file in the private directory
        assert pub_.publish(arrays(1), seq=7) == 1
    p = str(tmp_path / "p.wsync")
    assert wsync.pull("policy", p, endpoint=hub.endpoint, verify_key=pub) == 1
    assert signed(p, pub) == (key_id, 7, ["policy"], {"holds": True, "reason": "ok"})


def test_two_models_of_one_publish_are_one_signed_manifest(hub, tmp_path, keys, procs):
    secret, pub, key_id = keys
    (tmp_path / "w1.wsync").mkdir()
    with wsync.watch(["policy", "value"], str(tmp_path / "w1.wsync"), worker="w1",
                     endpoint=hub.endpoint, verify_key=[str(tmp_path / "other.pub"), pub]) \
            as updates, \
            wsync.Publisher(["policy", "value"], endpoint=hub.endpoint,
                            sign_key=secret) as pub_:
        wait_until(lambda: (hub.worker("w1") or {}).get("alive"), what="w1")
        assert pub_.publish({"policy": arrays(1), "value": arrays(2)}, seq=5) == \
            {"policy": 1, "value": 1}
        got = {}
        for _ in range(2):
            u = next(updates)
            got[u.model] = int(u.tensors["steps"])
            assert signed(u.path, pub) == (key_id, 5, ["policy", "value"],
                                           {"holds": True, "reason": "ok"})
            u.ack()
    assert got == {"policy": 1, "value": 2}


def test_a_seq_not_above_the_last_is_refused_with_status_65(hub, tmp_path, keys):
    secret, pub, _ = keys
    with wsync.Publisher("policy", endpoint=hub.endpoint, sign_key=secret) as pub_:
        assert pub_.publish(arrays(1), seq=10) == 1
        for seq in (10, 3):
            with pytest.raises(wsync.DataError) as e:
                pub_.publish(arrays(2), seq=seq)
            assert e.value.status == 65
            assert str(e.value) == (
                f"sequence number {seq} is not above 10, the last sequence number signed with "
                f"{secret} (kept in {secret}.seq): workers refuse a number not above the "
                "one they applied")
        assert pub_.seq == 10
        # Nothing was published, nor a slot left open: the next publish is version 2.
        assert wsync.pull("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint,
                          verify_key=pub) == 1
        assert pub_.publish(arrays(2), seq=11) == 2
    assert hub.status()["counters"]["uploads_open"] == 0


def test_push_signs_with_a_key_and_seq(hub, tmp_path, keys):
    secret, pub, key_id = keys
    wsync.write(str(tmp_path / "a.safetensors"), arrays(3))
    assert wsync.push("policy", str(tmp_path / "a.safetensors"), endpoint=hub.endpoint,
                      sign_key=secret, seq=42) == 1
    with pytest.raises(wsync.DataError) as e:
        wsync.push("policy", str(tmp_path / "a.safetensors"), endpoint=hub.endpoint,
                   sign_key=secret, seq=42)
    assert e.value.status == 65
    p = str(tmp_path / "p.wsync")
    assert wsync.pull("policy", p, endpoint=hub.endpoint, verify_key=pub) == 1
    assert signed(p, pub) == (key_id, 42, ["policy"], {"holds": True, "reason": "ok"})


def test_an_unsigned_publisher_signs_nothing_and_takes_no_seq(hub, tmp_path, keys):
    _, pub, _ = keys
    with wsync.Publisher("policy", endpoint=hub.endpoint) as pub_:
        with pytest.raises(wsync.UsageError) as e:
            pub_.publish(arrays(1), seq=1)
        assert str(e.value) == "seq goes with sign_key: an unsigned publish has no " \
            "sequence number"
        assert pub_.publish(arrays(1)) == 1
        assert pub_.seq is None
    p = str(tmp_path / "p.wsync")
    assert wsync.pull("policy", p, endpoint=hub.endpoint) == 1
    assert "wsync.signature" not in wsync.read(p)[1]
    with pytest.raises(wsync.PermissionDenied) as e:
        wsync.pull("policy", str(tmp_path / "v.wsync"), endpoint=hub.endpoint, verify_key=pub)
    assert e.value.status == 77
    assert not os.path.exists(tmp_path / "v.wsync")


def test_a_bad_signing_key_is_refused_before_anything_is_published(hub, tmp_path, keys):
    secret, _, _ = keys
    os.chmod(secret, 0o644)
    with pytest.raises(wsync.PermissionDenied) as e:
        wsync.Publisher("policy", endpoint=hub.endpoint, sign_key=secret)
    assert e.value.status == 77
    with pytest.raises(wsync.NotFound) as e:
        wsync.Publisher("policy", endpoint=hub.endpoint, sign_key=str(tmp_path / "none.key"))
    assert e.value.status == 66
    assert hub.status()["models"] == []
