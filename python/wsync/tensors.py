"""Tensors in and out of wsync's dtypes: numpy arrays and torch tensors.

wsync has twelve dtypes (wsync-format(5)). numpy has no bf16 or fp8 type and
torch 1.13 (Debian 12) no fp8 one, so without ml_dtypes those travel as raw
bits of the same width, the dtype kept in the file's tree:

    dtype    numpy (read)   torch (read)      written from
    bf16     uint16 bits    torch.bfloat16    torch.bfloat16, ml_dtypes.bfloat16,
                                              or 16-bit integers with dtypes={name: "bf16"}
    f8e4m3   uint8 bits     torch.uint8 bits  ml_dtypes / torch float8_e4m3fn, or
    f8e5m2                                    8-bit integers with dtypes={name: "f8e4m3"}

Every reader of the package says which dtype each tensor has in its dtypes
mapping, so the raw bits can be written back as what they were.
"""
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from .errors import DataError, UsageError


class DType(NamedTuple):
    """One wsync dtype: its file name, its number in libwsync's ABI (wsync.h),
    its width, the numpy type a reader gives (raw bits for bf16 and fp8), and
    its name in torch."""
    name: str
    abi: int
    size: int
    numpy: str
    torch: str


DTYPES: Dict[str, DType] = {d.name: d for d in [
    DType("f64", 0, 8, "<f8", "float64"),
    DType("f32", 1, 4, "<f4", "float32"),
    DType("f16", 2, 2, "<f2", "float16"),
    DType("bf16", 3, 2, "<u2", "bfloat16"),
    DType("i64", 4, 8, "<i8", "int64"),
    DType("i32", 5, 4, "<i4", "int32"),
    DType("i16", 6, 2, "<i2", "int16"),
    DType("i8", 7, 1, "i1", "int8"),
    DType("u8", 8, 1, "u1", "uint8"),
    DType("bool", 9, 1, "?", "bool"),
    DType("f8e4m3", 10, 1, "u1", "float8_e4m3fn"),
    DType("f8e5m2", 11, 1, "u1", "float8_e5m2"),
]}
BY_ABI = {d.abi: d for d in DTYPES.values()}

# numpy's dtype names (ml_dtypes' included) -> wsync's.
_FROM_NUMPY = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
               "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8",
               "uint8": "u8", "bool": "bool", "float8_e4m3fn": "f8e4m3",
               "float8_e5m2": "f8e5m2"}


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def host_array(name: str, value: Any, dtype: Optional[str] = None) -> Tuple[DType, np.ndarray]:
    """(wsync dtype, a C-contiguous little-endian numpy array of its bytes) of one
    tensor of a state_dict: a torch tensor (on any device: a CUDA one is copied
    to the host here) or anything numpy takes. dtype names a wsync dtype for
    raw bits of the same width (an 8-bit integer tensor holding fp8, a 16-bit
    one holding bf16). Raises DataError (65) for a type wsync has not."""
    if _is_torch(value):
        import torch
        t = value.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()
        tname = str(t.dtype).replace("torch.", "")
        if tname == "bfloat16":
            a = t.view(torch.int16).numpy()
        elif tname.startswith("float8"):
            a = t.view(torch.uint8).numpy()
        else:
            try:
                a = t.numpy()
            except TypeError as e:
                raise DataError(65, f"tensor {name}: no wsync dtype for torch's {t.dtype}") from e
        own = _FROM_NUMPY.get(tname)
    else:
        a = np.asarray(value)
        own = _FROM_NUMPY.get(a.dtype.name)
    a = np.asarray(a, order="C")   # a copy when not C-contiguous (keeps 0-d arrays 0-d)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if dtype is None or dtype == own:
        if own is None:
            raise DataError(65, f"tensor {name}: no wsync dtype for {a.dtype} (wsync has "
                            f"{', '.join(DTYPES)})")
        return DTYPES[own], a
    d = DTYPES.get(dtype)
    if d is None:
        raise UsageError(64, f"tensor {name}: no wsync dtype \"{dtype}\" (wsync has "
                         f"{', '.join(DTYPES)})")
    if a.dtype.kind not in "iu" or a.dtype.itemsize != d.size:
        raise DataError(65, f"tensor {name}: {a.dtype} cannot hold {dtype} bits (it needs "
                        f"{8 * d.size}-bit integers)")
    return d, a


def view(buffer: Any, offset: int, d: DType, shape: Tuple[int, ...],
         framework: str) -> Any:
    """A tensor over buffer (no copy): numpy, or torch ("torch") sharing its memory."""
    count = 1
    for n in shape:
        count *= n
    a = np.frombuffer(buffer, d.numpy, count=count, offset=offset).reshape(shape)
    if framework == "numpy":
        return a
    import torch
    if d.name == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).reshape(shape)
    return torch.from_numpy(a)


def check_framework(framework: str) -> None:
    """Raises UsageError unless framework is "numpy" or "torch"."""
    if framework not in ("numpy", "torch"):
        raise UsageError(64, f"framework \"{framework}\": use \"numpy\" or \"torch\"")


def items(state_dict: Mapping[str, Any], dtypes: Optional[Mapping[str, str]] = None):
    """(name, DType, host array) per tensor of a state_dict, in its order."""
    dtypes = dtypes or {}
    for name in dtypes:
        if name not in state_dict:
            raise UsageError(64, f"dtypes names tensor {name}, which is not in the state_dict")
    for name, value in state_dict.items():
        if not isinstance(name, str):
            raise UsageError(64, f"state_dict key {name!r} is a {type(name).__name__}, not a "
                             "string: tensor names are strings")
        d, a = host_array(name, value, dtypes.get(name))
        yield name, d, a


def meta_key(key: Any) -> str:
    """A meta key as written: a string, else UsageError (64)."""
    if not isinstance(key, str):
        raise UsageError(64, f"meta key {key!r} is a {type(key).__name__}, not a string")
    return key


def meta_value(key: str, value: Any) -> str:
    """A meta value as written (wsync-format(5) keeps meta a map of strings): a
    string as it is, an int or float in decimal (read back as that string);
    anything else, UsageError (64): json.dumps a structure first."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise UsageError(64, f"meta {key!r}: a {type(value).__name__} value; meta values are "
                     "strings, ints or floats (and come back as strings): json.dumps a "
                     "structure first")
