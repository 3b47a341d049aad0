#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target: tests/fuzz/corpus/safetensors/.

Valid files are laid out exactly as Python's safetensors writes them (compact JSON, tensors by
dtype size then name, the header padded with spaces to a multiple of 8 bytes); the others each
break one rule that fl::ParseSafetensors enforces. Standard library only. Run from anywhere:
    python3 tests/fuzz/make_safetensors_corpus.py
"""
import json
import math
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")


def pack(header, data, pad=True):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


SEEDS = {
    "valid_f32": pack({"a": entry("F32", [2], 0, 8)}, f32(1, 2)),
    "valid_mixed_metadata": pack(
        {"__metadata__": {"format": "np", "round": "7"}, "c": entry("F64", [], 0, 8),
         "a": entry("F32", [2], 8, 16), "b": entry("F16", [2, 2], 16, 24)},
        struct.pack("<d", 0.25) + f32(1, -2.5) + struct.pack("<4e", 1, 0.5, -2, 65504)),
    "valid_bf16_matrix": pack({"w": entry("BF16", [2, 3], 0, 12)},
                              struct.pack("<6H", 0x3F80, 0xC040, 0x4049, 0x7F7F, 0x0001, 0x8000)),
    "valid_many": pack({f"layer.{i}.w": entry("F32", [i + 1], 2 * i * (i + 1), 2 * (i + 1) * (i + 2))
                        for i in range(12)}, f32(*[0.5] * 78)),
    "valid_unpadded_whitespace": pack(b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} \n',
                                      f32(3), pad=False),
    "integer_i64": pack({"ids": entry("I64", [2], 0, 16)}, struct.pack("<2q", 1, 2)),
    "unsupported_f8": pack({"q": entry("F8_E4M3", [4], 0, 4)}, b"\x01\x02\x03\x04"),
    "zero_dim": pack({"a": entry("F32", [0, 3], 0, 0)}, b""),
    "overlap": pack({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, f32(1, 2, 3)),
    "gap": pack({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, f32(1, 2, 3)),
    "trailing_bytes": pack({"a": entry("F32", [1], 0, 4)}, f32(1, 2)),
    "size_mismatch": pack({"a": entry("F32", [3], 0, 8)}, f32(1, 2)),
    "offsets_past_end": pack({"a": entry("F32", [4], 0, 16)}, f32(1, 2)),
    "duplicate_key": pack(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                          b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)),
    "header_past_end": struct.pack("<Q", 4096) + b'{"a":{}}',
    "not_json": pack(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}', f32(1)),
    "nan_f32": pack({"a": entry("F32", [2], 0, 8)}, f32(1, math.nan)),
    "f64_overflow": pack({"d": entry("F64", [1], 0, 8)}, struct.pack("<d", 1e300)),
    "huge_shape": pack({"a": entry("F32", [4294967296, 4294967296, 4294967296], 0, 4)}, f32(1)),
    "metadata_not_strings": pack({"__metadata__": {"epoch": 3}, "a": entry("F32", [1], 0, 4)}, f32(1)),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
