"""Fixtures for the wsync package's tests: the built programs first on PATH, the
package from python/, and real hubs on ipc endpoints in each test's temp dir,
stopped by PID."""
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("WSYNC_BIN") or os.path.join(ROOT, "build", "cc", "bin")
os.environ["PATH"] = BIN + os.pathsep + os.environ.get("PATH", "")
sys.path.insert(0, os.path.join(ROOT, "python"))
# Another caller's hub must not be found, nor its keys used.
for name in ("WSYNC_ENDPOINT", "WSYNC_KEY", "WSYNC_HUB_KEY", "WSYNC_LIB"):
    os.environ.pop(name, None)


def wait_until(check, seconds=10.0, what="a condition"):
    """Polls check() until it is true, at most seconds; fails the test after."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Hub:
    """wsync-serve on ipc://TMP/hub with its store in TMP/store."""

    def __init__(self, tmp, *args):
        self.endpoint = f"ipc://{tmp}/hub"
        self.log = os.path.join(tmp, "hub.log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["wsync-serve", "-e", self.endpoint, "--store",
                                          os.path.join(tmp, "store"), *args], stderr=log)
        wait_until(lambda: self.status() is not None, what="the hub to answer")

    def status(self):
        """wsync-inspect --hub --json, parsed; None when the hub does not answer."""
        import json
        r = subprocess.run(["wsync-inspect", "-e", self.endpoint, "--json", "-t", "1"],
                           capture_output=True)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def worker(self, worker_id):
        """The status's entry of worker_id, or None."""
        st = self.status() or {"workers": []}
        return next((w for w in st["workers"] if w["worker"] == worker_id), None)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


@pytest.fixture
def hub(tmp_path):
    h = Hub(tmp_path)
    yield h
    h.stop()


@pytest.fixture
def procs():
    """A list to append Popen objects to; each is stopped by PID after the test."""
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.terminate()
    for p in started:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
