"""Weights dicts: a model's float32 tensors by name, in the order the model lists them.

``empty_weights`` lays the tensors out back to back in one buffer, which is what the SDK takes back
from ``fit`` without a copy. ``save_safetensors`` and ``load_safetensors`` read and write the
safetensors files ``fl server --initial-model`` starts a run from.
"""

from __future__ import annotations

import json
import struct
from typing import Iterable, Mapping

import numpy as np

Weights = dict[str, np.ndarray]


def _shapes(like) -> list[tuple[str, tuple[int, ...]]]:
    if isinstance(like, Mapping):
        return [(name, tuple(np.shape(a))) for name, a in like.items()]
    return [(name, tuple(shape)) for name, shape in like]


def empty_weights(like: Mapping[str, np.ndarray] | Iterable[tuple[str, Iterable[int]]]) -> Weights:
    """Writable float32 arrays shaped as ``like`` (a weights dict, or (name, shape) pairs), laid
    out back to back in one 64-byte aligned buffer: returned from ``fit``, the SDK hands this
    buffer to the server without copying it."""
    shapes = _shapes(like)
    sizes = [int(np.prod(s, dtype=np.int64)) for _, s in shapes]
    total = sum(sizes)
    raw = np.empty(total + 16, dtype=np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    flat = raw[skip : skip + total]
    out: Weights = {}
    at = 0
    for (name, shape), n in zip(shapes, sizes):
        out[name] = flat[at : at + n].reshape(shape)
        at += n
    return out


def copy_weights(weights: Mapping[str, np.ndarray]) -> Weights:
    """A writable copy of ``weights`` in one buffer (see ``empty_weights``)."""
    out = empty_weights(weights)
    for name, a in weights.items():
        np.copyto(out[name], a, casting="same_kind")
    return out


def save_safetensors(path: str, weights: Mapping[str, np.ndarray]) -> None:
    """Writes ``weights`` as a safetensors file of float32 tensors, in the dict's order."""
    header: dict[str, object] = {}
    at = 0
    arrays = []
    for name, a in weights.items():
        a = np.asarray(a, dtype="<f4", order="C")  # (ascontiguousarray makes a scalar 1-d)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
        arrays.append(a)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays:
            f.write(a.tobytes())


def load_safetensors(path: str) -> Weights:
    """The float32 tensors of a safetensors file, in the order of their data."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + length :]
    out: Weights = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor '{name}' is {info['dtype']}; only F32 is read")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(info["shape"]).copy()
    return out
