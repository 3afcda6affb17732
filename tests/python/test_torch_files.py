"""torch state_dicts in and out of files: bf16 native, fp8 as uint8 bits, no copy."""
import numpy as np
import pytest

import wsync

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def test_a_bf16_module_state_dict_comes_back_equal_as_torch(tmp_path):
    torch.manual_seed(1)
    module = torch.nn.Linear(8, 4).to(torch.bfloat16)
    path = str(tmp_path / "m.wsync")
    wsync.write(path, module.state_dict())
    w = wsync.load(path, framework="torch")
    assert w.dtypes == {"weight": "bf16", "bias": "bf16"}
    for k, v in module.state_dict().items():
        assert w.tensors[k].dtype == torch.bfloat16 and torch.equal(w.tensors[k], v)
    other = torch.nn.Linear(8, 4).to(torch.bfloat16)
    other.load_state_dict(w.tensors)
    assert all(torch.equal(a, b) for a, b in zip(other.parameters(), module.parameters()))


def test_every_torch_dtype_of_wsync_round_trips(tmp_path):
    sd = {"f64": torch.arange(3, dtype=torch.float64), "f32": torch.ones(2, 2),
          "f16": torch.full((3,), 0.5, dtype=torch.float16),
          "bf16": torch.tensor(1.5, dtype=torch.bfloat16),
          "i64": torch.arange(2), "i32": torch.arange(2, dtype=torch.int32),
          "i16": torch.arange(2, dtype=torch.int16), "i8": torch.arange(-2, 2, dtype=torch.int8),
          "u8": torch.arange(3, dtype=torch.uint8), "bool": torch.tensor([True, False]),
          "fp8": torch.arange(4, dtype=torch.uint8)}
    path = str(tmp_path / "all.wsync")
    wsync.write(path, sd, dtypes={"fp8": "f8e4m3"})
    w = wsync.load(path, framework="torch")
    assert w.dtypes["fp8"] == "f8e4m3" and w.dtypes["bf16"] == "bf16"
    for k, v in sd.items():
        assert w.tensors[k].dtype == v.dtype and torch.equal(w.tensors[k], v), k


def test_a_non_contiguous_tensor_is_written_as_its_values(tmp_path):
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()
    path = str(tmp_path / "t.wsync")
    wsync.write(path, {"t": t})
    assert torch.equal(wsync.read(path, framework="torch")[0]["t"], t)


def test_torch_tensors_share_the_mapping(tmp_path):
    path = str(tmp_path / "t.wsync")
    wsync.write(path, {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)})
    t = wsync.read(path, framework="torch")[0]
    a, b = t["a"].numpy(), t["b"].numpy()
    # One mapping: the two tensors are 64 bytes apart in it.
    assert b.__array_interface__["data"][0] - a.__array_interface__["data"][0] == 64
