"""wsync.write, read and load: every dtype of wsync, numpy and torch, no ml_dtypes."""
import os
import subprocess

import numpy as np
import pytest

import wsync


def numpy_state():
    """One numpy array per dtype numpy has natively, a scalar and a zero-size one."""
    return {"actor.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
            "actor.0.bias": np.linspace(0, 1, 3), "half": np.ones(2, np.float16),
            "steps": np.array(5, np.int64), "i32": np.arange(3, dtype=np.int32),
            "i16": np.arange(2, dtype=np.int16), "i8": np.zeros((0, 3), np.int8),
            "u8": np.arange(4, dtype=np.uint8), "mask": np.array([True, False])}


@pytest.mark.parametrize("name", ["a.wsync", "a.safetensors"])
def test_numpy_arrays_come_back_equal_with_meta(tmp_path, name):
    path = str(tmp_path / name)
    a = numpy_state()
    wsync.write(path, a, meta={"step": 7}, model="policy")
    got, meta = wsync.read(path)
    assert meta == {"step": "7"}
    assert sorted(got) == sorted(a)
    for k in a:
        assert got[k].dtype == a[k].dtype and got[k].shape == a[k].shape
        assert np.array_equal(got[k], a[k])


def test_a_wsync_file_verifies_and_names_its_model(tmp_path):
    path = str(tmp_path / "policy.wsync")
    wsync.write(path, numpy_state())
    r = subprocess.run(["wsync-inspect", "--verify", path], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == f"{path}: OK\n"
    assert wsync.load(path).model == "policy"


def test_fp8_and_bf16_bits_keep_their_dtype_through_numpy(tmp_path):
    path = str(tmp_path / "q.wsync")
    bits = np.array([0x3f80, 0x4000, 0xc040], np.uint16)      # bf16 1, 2, -3
    fp8 = np.arange(6, dtype=np.uint8).reshape(2, 3)
    wsync.write(path, {"w": bits, "q": fp8}, dtypes={"w": "bf16", "q": "f8e5m2"})
    w = wsync.load(path)
    assert w.dtypes == {"w": "bf16", "q": "f8e5m2"}
    assert w.tensors["w"].dtype == np.uint16 and np.array_equal(w.tensors["w"], bits)
    assert w.tensors["q"].dtype == np.uint8 and np.array_equal(w.tensors["q"], fp8)
    r = subprocess.run(["wsync-inspect", "--json", path], capture_output=True, text=True)
    assert '"dtype": "bf16"' in r.stdout and '"dtype": "f8e5m2"' in r.stdout


def test_a_dtype_wsync_has_not_raises_data_error(tmp_path):
    with pytest.raises(wsync.DataError) as e:
        wsync.write(str(tmp_path / "c.wsync"), {"z": np.zeros(2, np.complex64)})
    assert e.value.status == 65
    assert str(e.value).startswith("tensor z: no wsync dtype for complex64")


def test_raw_bits_of_the_wrong_width_are_refused(tmp_path):
    with pytest.raises(wsync.DataError) as e:
        wsync.write(str(tmp_path / "c.wsync"), {"q": np.zeros(2, np.int16)},
                    dtypes={"q": "f8e4m3"})
    assert str(e.value) == "tensor q: int16 cannot hold f8e4m3 bits (it needs 8-bit integers)"


def test_a_spoiled_wsync_file_is_refused_when_read(tmp_path):
    path = str(tmp_path / "a.wsync")
    wsync.write(path, {"w": np.arange(64, dtype=np.float32)})
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(wsync.DataError) as e:
        wsync.read(path)
    assert e.value.status == 65 and "tensor w" in str(e.value)


def test_tensors_are_private_views_of_the_mapped_file(tmp_path):
    path = str(tmp_path / "a.wsync")
    wsync.write(path, {"w": np.zeros(16, np.float32)})
    before = open(path, "rb").read()
    w = wsync.load(path)
    w.tensors["w"][:] = 7           # this process's pages, not the file
    assert w.tensors["w"].base is not None
    assert open(path, "rb").read() == before
    assert np.array_equal(wsync.read(path)[0]["w"], np.zeros(16, np.float32))


def test_a_loaded_file_holds_its_lease_while_its_tensors_live(tmp_path):
    import fcntl
    path = str(tmp_path / "a.wsync")
    wsync.write(path, {"w": np.zeros(16, np.float32)})
    tensors, _ = wsync.read(path)

    def exclusive_free():
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    assert not exclusive_free()
    del tensors
    assert exclusive_free()


def test_a_missing_file_raises_not_found(tmp_path):
    with pytest.raises(wsync.NotFound) as e:
        wsync.read(str(tmp_path / "none.wsync"))
    assert e.value.status == 66
    assert str(e.value) == f"{tmp_path}/none.wsync: No such file or directory"
