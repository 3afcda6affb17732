"""The package's errors: the exit status of wsync(7) as a class, what the program
said as the message, and clear errors for what is not installed or not given right."""
import os
import subprocess
import sys

import numpy as np
import pytest

import wsync
from conftest import ROOT


def test_a_publisher_with_no_hub_raises_hub_unavailable_with_the_reason(tmp_path):
    endpoint = f"ipc://{tmp_path}/none"
    with wsync.Publisher("policy", endpoint=endpoint) as pub:
        with pytest.raises(wsync.HubUnavailable) as e:
            pub.publish({"w": np.ones(2, np.float32)})
    assert e.value.status == 69
    assert str(e.value) == (f"wsync-push: cannot reach {endpoint}: no socket there (is "
                            "wsync-serve running?)")


def test_watch_with_a_timeout_and_no_hub_raises_hub_unavailable_with_the_reason(tmp_path):
    endpoint = f"ipc://{tmp_path}/none"
    with pytest.raises(wsync.HubUnavailable) as e:
        with wsync.watch("policy", str(tmp_path / "p.wsync"), endpoint=endpoint,
                         timeout=0.5) as updates:
            next(updates)
    assert e.value.status == 69
    assert str(e.value) == (f"wsync-watch: cannot reach {endpoint} after 0.5 s (is "
                            "wsync-serve running?)")


def test_watch_once_with_a_timeout_raises_timed_out_when_the_hub_has_no_version(hub, tmp_path):
    with pytest.raises(wsync.TimedOut) as e:
        with wsync.watch("policy", str(tmp_path / "p.wsync"), endpoint=hub.endpoint,
                         once=True, timeout=0.5) as updates:
            next(updates)
    assert e.value.status == 75
    assert str(e.value) == (f"wsync-watch: policy: no version within 0.5 s (the hub at "
                            f"{hub.endpoint} has none yet)")


def _python(code, **env):
    """Runs code in a fresh python3 with the package, env changed as given."""
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), **env)
    e.pop("WSYNC_LIB", None)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)


def test_without_the_programs_on_path_watch_and_pull_raise_not_installed(tmp_path):
    r = _python("import wsync\n"
                "for call in (lambda: wsync.watch('policy', 'p.wsync'),\n"
                "             lambda: wsync.pull('policy', 'p.wsync')):\n"
                "    try:\n"
                "        call()\n"
                "    except wsync.NotInstalled as e:\n"
                "        print(e.status, e)\n", PATH=str(tmp_path))
    assert r.returncode == 0, r.stderr
    hint = "install wsync (make install), or put its build's bin directory (build/cc/bin) on PATH"
    assert r.stdout.splitlines() == [f"127 wsync-watch not found on PATH: {hint}",
                                     f"127 wsync-pull not found on PATH: {hint}"]


def test_without_libwsync_a_write_raises_not_installed_not_hub_unavailable(tmp_path):
    r = _python("import numpy as np, wsync\n"
                "try:\n"
                "    wsync.write('a.wsync', {'w': np.ones(2)})\n"
                "except wsync.NotInstalled as e:\n"
                "    print(e.status, isinstance(e, wsync.HubUnavailable), e)\n",
                PATH=str(tmp_path), LD_LIBRARY_PATH="")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("127 False libwsync.so.0 not found (beside wsync-push on PATH, nor "
                        "where the dynamic linker looks): install wsync (make install), or "
                        "set WSYNC_LIB to its path\n")


def test_meta_values_are_strings_or_numbers_and_come_back_as_strings(tmp_path):
    path = str(tmp_path / "a.wsync")
    wsync.write(path, {"w": np.ones(2)}, meta={"step": 7, "lr": 0.5, "run": "r1"})
    assert wsync.read(path)[1] == {"step": "7", "lr": "0.5", "run": "r1"}
    for bad, kind in (({"a": 1}, "dict"), (None, "NoneType"), (True, "bool")):
        with pytest.raises(wsync.UsageError) as e:
            wsync.write(path, {"w": np.ones(2)}, meta={"cfg": bad})
        assert e.value.status == 64
        assert str(e.value) == (f"meta 'cfg': a {kind} value; meta values are strings, ints "
                                "or floats (and come back as strings): json.dumps a "
                                "structure first")


def test_a_key_that_is_not_a_string_is_a_usage_error(tmp_path):
    with pytest.raises(wsync.UsageError) as e:
        wsync.write(str(tmp_path / "a.wsync"), {0: np.ones(2)})
    assert str(e.value) == "state_dict key 0 is a int, not a string: tensor names are strings"
    with pytest.raises(wsync.UsageError) as e:
        wsync.write(str(tmp_path / "a.wsync"), {"w": np.ones(2)}, meta={1: "x"})
    assert str(e.value) == "meta key 1 is a int, not a string"
