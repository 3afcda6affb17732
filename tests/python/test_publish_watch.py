"""wsync.Publisher, watch, push and pull against a real hub, with numpy arrays."""
import numpy as np
import pytest

import wsync
from conftest import wait_until


def arrays(step):
    return {"actor.weight": np.full((4, 8), step, np.float32), "steps": np.array(step)}


def test_watch_yields_each_version_and_acks_when_told(hub, tmp_path):
    with wsync.watch("policy", str(tmp_path / "w.wsync"), worker="w1",
                     endpoint=hub.endpoint) as updates, \
            wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        wait_until(lambda: (hub.worker("w1") or {}).get("alive"), what="w1")
        for step in (1, 2):
            pub.publish(arrays(step), meta={"step": step})
            update = next(updates)
            assert (update.model, update.version, update.meta) == ("policy", step,
                                                                   {"step": str(step)})
            assert np.array_equal(update.tensors["actor.weight"], arrays(step)["actor.weight"])
            assert hub.worker("w1")["applied"].get("policy", 0) == step - 1
            update.ack()
            wait_until(lambda: hub.worker("w1")["applied"].get("policy") == step, what="ack")


def test_a_failed_update_is_reported_with_its_reason_and_not_applied(hub, tmp_path):
    with wsync.watch("policy", str(tmp_path / "w.wsync"), worker="w1",
                     endpoint=hub.endpoint) as updates, \
            wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        wait_until(lambda: (hub.worker("w1") or {}).get("alive"), what="w1")
        pub.publish(arrays(1))
        next(updates).fail("out of\nmemory")
        wait_until(lambda: hub.worker("w1")["failure"] is not None, what="the failure")
        w = hub.worker("w1")
        assert w["applied"] == {} and w["failures"] == {"policy": 1}
        assert w["failure"] == {"model": "policy", "version": 1, "reason": "out of memory"}


def test_an_update_left_unanswered_is_reported_failed_at_the_next(hub, tmp_path):
    with wsync.watch("policy", str(tmp_path / "w.wsync"), worker="w1",
                     endpoint=hub.endpoint) as updates, \
            wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        wait_until(lambda: (hub.worker("w1") or {}).get("alive"), what="w1")
        pub.publish(arrays(1))
        assert next(updates).version == 1
        pub.publish(arrays(2))
        update = next(updates)
        assert update.version == 2
        assert hub.worker("w1")["failure"]["reason"] == \
            "the worker went on without acknowledging it"
        update.ack()


def test_a_publisher_of_two_models_commits_them_together(hub, tmp_path):
    (tmp_path / "out").mkdir()
    with wsync.Publisher(["policy", "value"], endpoint=hub.endpoint) as pub:
        assert pub.publish({"policy": arrays(1), "value": arrays(2)}) == \
            {"policy": 1, "value": 1}
        with pytest.raises(wsync.UsageError) as e:
            pub.publish(arrays(1))
        assert str(e.value) == "publish wants {model: state_dict} for every model of the " \
            "publisher: policy, value"
    with wsync.watch(["policy", "value"], str(tmp_path / "out"), endpoint=hub.endpoint,
                     once=True) as updates:
        got = {}
        for u in updates:
            got[u.model] = int(u.tensors["steps"])
            u.ack()
    assert got == {"policy": 1, "value": 2}


def test_push_and_pull_go_through_the_programs(hub, tmp_path):
    wsync.write(str(tmp_path / "a.safetensors"), arrays(3))
    assert wsync.push("policy", str(tmp_path / "a.safetensors"), endpoint=hub.endpoint) == 1
    assert wsync.pull("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint) == 1
    assert np.array_equal(wsync.read(str(tmp_path / "p.wsync"))[0]["steps"], np.array(3))


def test_a_failed_program_raises_its_exit_status_as_a_typed_error(hub, tmp_path):
    with pytest.raises(wsync.NotFound) as e:
        wsync.pull("nothing", str(tmp_path / "x.wsync"), endpoint=hub.endpoint, timeout=5)
    assert e.value.status == 66
    assert str(e.value) == 'wsync-pull: model "nothing" has no version'
    with pytest.raises(wsync.HubUnavailable) as e:
        wsync.pull("policy", str(tmp_path / "x.wsync"), endpoint=f"ipc://{tmp_path}/none",
                   timeout=0.5)
    assert e.value.status == 69


def test_a_watcher_process_killed_outright_leaves_no_wsync_watch_behind(hub, procs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    code = ("import sys, wsync\n"
            "w = wsync.watch('policy', sys.argv[2], worker='k1', endpoint=sys.argv[1])\n"
            "print(w.proc.pid, flush=True)\n"
            "sys.stdin.read()\n")
    p = subprocess.Popen([sys.executable, "-c", code, hub.endpoint, str(tmp_path / "k.wsync")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    procs.append(p)
    child = int(p.stdout.readline())
    wait_until(lambda: (hub.worker("k1") or {}).get("alive"), what="k1")
    p.send_signal(signal.SIGKILL)
    p.wait()

    def gone():
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        # A zombie of init's is gone too: it no longer runs.
        with open(f"/proc/{child}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    wait_until(gone, what=f"wsync-watch {child} to end with its parent")
