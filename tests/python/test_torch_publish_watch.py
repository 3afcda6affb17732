"""A PyTorch trainer publishes a bf16 module with wsync.Publisher; workers in
their own processes follow it with wsync.watch, load each version and ack."""
import os
import select
import subprocess
import sys

import pytest

import wsync
from conftest import wait_until

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
sys.path.insert(0, os.path.dirname(__file__))
from torch_worker import digest, make_module  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "torch_worker.py")


def start_worker(hub, procs, tmp, worker, *args):
    p = subprocess.Popen([sys.executable, WORKER, hub.endpoint, worker,
                          str(tmp / f"{worker}.wsync"), *args], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    procs.append(p)
    return p


def read_line(p, seconds=30):
    """The next line the worker prints, waiting at most seconds."""
    ready, _, _ = select.select([p.stdout], [], [], seconds)
    assert ready, "the worker printed nothing"
    return p.stdout.readline().split()


def train_step(module, step):
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.full_like(param, 0.125 * step))


def test_three_workers_hold_the_trainers_module_at_every_version(hub, procs, tmp_path):
    workers = [start_worker(hub, procs, tmp_path, f"w{i}") for i in (1, 2, 3)]
    for i in (1, 2, 3):
        wait_until(lambda: (hub.worker(f"w{i}") or {}).get("alive"), 30, f"worker w{i}")
    torch.manual_seed(0)
    module = make_module()
    with wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        for step in range(1, 6):
            train_step(module, step)
            version = pub.publish(module.state_dict(), meta={"step": step}, wait="all",
                                  timeout=30)
            assert version == step
            want = digest(module.state_dict())
            # Each worker acked (the wait returned) before printing: its module now.
            for p in workers:
                assert read_line(p) == [str(version), want]
    st = hub.status()
    assert sorted((w["worker"], w["applied"]["policy"]) for w in st["workers"]) == \
        [("w1", 5), ("w2", 5), ("w3", 5)]


def test_a_worker_whose_load_raises_shows_in_the_trainers_wait(hub, procs, tmp_path):
    start_worker(hub, procs, tmp_path, "good")
    start_worker(hub, procs, tmp_path, "bad", "--fail-at", "2")
    for w in ("good", "bad"):
        wait_until(lambda: (hub.worker(w) or {}).get("alive"), 30, f"worker {w}")
    module = make_module()
    with wsync.Publisher("policy", endpoint=hub.endpoint) as pub:
        assert pub.publish(module.state_dict(), wait="all", timeout=30) == 1
        train_step(module, 1)
        with pytest.raises(wsync.DataError) as e:
            pub.publish(module.state_dict(), wait="all", timeout=30)
    assert e.value.status == 65
    lines = str(e.value).split("; ")
    assert lines[0] == ("policy version 2: 1 of 2 workers could not apply it (a failed "
                        "version is never retried)")
    assert len(lines) == 2 and lines[1].startswith("bad: has version 1, last seen ")
    assert lines[1].endswith(", last failure: load_state_dict: Error(s) in loading "
                             "state_dict for Sequential:")
    bad = hub.worker("bad")
    assert bad["applied"] == {"policy": 1} and bad["failures"] == {"policy": 1}
    assert bad["failure"]["version"] == 2
    assert bad["failure"]["reason"] == "load_state_dict: Error(s) in loading state_dict " \
        "for Sequential:"
