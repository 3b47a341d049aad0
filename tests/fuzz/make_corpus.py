#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets whose inputs are files or byte layouts, under
tests/fuzz/corpus/<target>/, and the dictionaries toml_config.dict and csv.dict beside this script.

Targets: safetensors, checkpoint, update_codec, chunk_assembly, toml_config, csv, idx. Each
target's harness (tests/fuzz/<target>_fuzz.cc) documents its input layout; the seeds are what the
unit tests feed the same decoders: the TOML files and CSV texts are read out of
tests/unit/{config,client_config,sim_config}_test.cc and csv_test.cc, the IDX files are
dataset_test.cc's, the others are built here as those tests build them. Valid inputs and ones
that break one rule each. The protobuf targets' seeds (server_request, client_task, secagg) come
from fuzz_seed_gen.cc. Standard library only; deterministic. Run from anywhere:
    python3 tests/fuzz/make_corpus.py [TARGET...]
"""
import gzip
import json
import math
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
MAX_SEED_BYTES = 4096


# --- safetensors: an 8-byte little-endian header size, the JSON header, the data.

def pack(header, data, pad=True):
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def safetensors_seeds():
    return {
        "valid_f32.safetensors": pack({"a": entry("F32", [2], 0, 8)}, f32(1, 2)),
        "valid_mixed_metadata.safetensors": pack(
            {"__metadata__": {"format": "np", "round": "7"}, "c": entry("F64", [], 0, 8),
             "a": entry("F32", [2], 8, 16), "b": entry("F16", [2, 2], 16, 24)},
            struct.pack("<d", 0.25) + f32(1, -2.5) + struct.pack("<4e", 1, 0.5, -2, 65504)),
        "valid_bf16_matrix.safetensors": pack(
            {"w": entry("BF16", [2, 3], 0, 12)},
            struct.pack("<6H", 0x3F80, 0xC040, 0x4049, 0x7F7F, 0x0001, 0x8000)),
        "valid_many.safetensors": pack(
            {f"layer.{i}.w": entry("F32", [i + 1], 2 * i * (i + 1), 2 * (i + 1) * (i + 2))
             for i in range(12)}, f32(*[0.5] * 78)),
        "valid_unpadded_whitespace.safetensors": pack(
            b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} \n', f32(3), pad=False),
        "integer_i64.safetensors": pack({"ids": entry("I64", [2], 0, 16)}, struct.pack("<2q", 1, 2)),
        "unsupported_f8.safetensors": pack({"q": entry("F8_E4M3", [4], 0, 4)}, b"\x01\x02\x03\x04"),
        "zero_dim.safetensors": pack({"a": entry("F32", [0, 3], 0, 0)}, b""),
        "overlap.safetensors": pack({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)},
                                    f32(1, 2, 3)),
        "gap.safetensors": pack({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)},
                                f32(1, 2, 3)),
        "trailing_bytes.safetensors": pack({"a": entry("F32", [1], 0, 4)}, f32(1, 2)),
        "size_mismatch.safetensors": pack({"a": entry("F32", [3], 0, 8)}, f32(1, 2)),
        "offsets_past_end.safetensors": pack({"a": entry("F32", [4], 0, 16)}, f32(1, 2)),
        "duplicate_key.safetensors": pack(
            b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)),
        "header_past_end.safetensors": struct.pack("<Q", 4096) + b'{"a":{}}',
        "not_json.safetensors": pack(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}',
                                     f32(1)),
        "nan_f32.safetensors": pack({"a": entry("F32", [2], 0, 8)}, f32(1, math.nan)),
        "f64_overflow.safetensors": pack({"d": entry("F64", [1], 0, 8)}, struct.pack("<d", 1e300)),
        "huge_shape.safetensors": pack(
            {"a": entry("F32", [4294967296, 4294967296, 4294967296], 0, 4)}, f32(1)),
        "metadata_not_strings.safetensors": pack(
            {"__metadata__": {"epoch": 3}, "a": entry("F32", [1], 0, 4)}, f32(1)),
    }


# --- checkpoint: "FLCKPT01", a little-endian u64 spec length, the spec JSON, float32 payload.

def checkpoint(spec, payload, magic=b"FLCKPT01", length=None):
    text = spec if isinstance(spec, bytes) else json.dumps(spec, separators=(",", ":")).encode()
    return magic + struct.pack("<Q", len(text) if length is None else length) + text + payload


def tensor(name, shape):
    return {"name": name, "shape": shape}


def checkpoint_seeds():
    two = [tensor("w", [2, 3]), tensor("b", [3])]
    return {
        "valid_two_tensors.ckpt": checkpoint(two, f32(*range(9))),
        "valid_scalar.ckpt": checkpoint([tensor("s", [])], f32(0.5)),
        "valid_spaced_json.ckpt": checkpoint(b' [ {"shape": [2], "name": "w"} ] ', f32(1, -1)),
        "bad_magic.ckpt": checkpoint(two, f32(*range(9)), magic=b"FLCKPT02"),
        "spec_past_end.ckpt": checkpoint(two, f32(*range(9)), length=1 << 40),
        "spec_not_json.ckpt": checkpoint(b'[{"name":"w","shape":[2]', f32(1, 2)),
        "spec_not_array.ckpt": checkpoint({"name": "w", "shape": [2]}, f32(1, 2)),
        "short_payload.ckpt": checkpoint(two, f32(*range(8))),
        "trailing_bytes.ckpt": checkpoint(two, f32(*range(10))),
        "zero_dim.ckpt": checkpoint([tensor("w", [0, 3])], b""),
        "duplicate_name.ckpt": checkpoint([tensor("w", [1]), tensor("w", [1])], f32(1, 2)),
        "huge_shape.ckpt": checkpoint([tensor("w", [1 << 31, 1 << 31])], f32(1)),
        "float_dim.ckpt": checkpoint(b'[{"name":"w","shape":[1.5]}]', f32(1)),
        "header_only.ckpt": b"FLCKPT01" + struct.pack("<Q", 0),
    }


# --- update_codec: a mode byte, a parameter byte, the payload (update_codec_fuzz.cc).

def half(*values):
    return struct.pack(f"<{len(values)}e", *values)


def int8_chunk(scale, *q):
    return struct.pack("<f", scale) + struct.pack(f"<{len(q)}b", *q)


def update_codec_seeds():
    return {
        "decode_f32": b"\x00\x00" + f32(1.5, -2.0, 0.0, 3.25e38),
        "decode_f16": b"\x01\x07" + half(1.0, -0.5, 65504.0, 2 ** -24, -0.0) + b"\x01\x04",
        "decode_f16_inf": b"\x01\x00" + half(1.0) + b"\x00\x7c",
        "decode_f16_nan": b"\x01\x00" + b"\x01\x7e",
        "decode_int8": b"\x02\x00" + int8_chunk(0.5, 127, -127, 0, 3),
        "decode_int8_minus_128": b"\x02\x00" + int8_chunk(0.5, 1, -128),
        "decode_int8_negative_scale": b"\x02\x00" + int8_chunk(-1.0, 1, 2),
        "decode_int8_huge_scale": b"\x02\x00" + int8_chunk(3.0e38, 127, -127),
        "decode_f16_wrong_count": b"\x41\x03" + half(1.0, 2.0),
        "decode_int8_scale_only": b"\x42\x00" + struct.pack("<f", 1.0),
        "encode_f32": b"\x80\x01" + f32(1.0, -1.0, 1e-30, math.inf),
        "encode_f16": b"\x81\x01" + f32(65504.0, 65519.0, -65519.9, 1e-8, 2 ** -25, 3 * 2 ** -26,
                                        0.1, -0.0),
        "encode_f16_overflow": b"\x81\x01" + f32(1.0, 65520.0),
        "encode_int8": b"\x82\x05" + f32(0.25, -1.0, 0.5, 1e-3, 0.0, -0.75),
        "encode_int8_extremes": b"\x82\x09" + f32(3.4e38, -3.4e38, 1.0, 1e-45),
        "encode_int8_nan": b"\x82\x00" + f32(1.0, math.nan),
    }


# --- chunk_assembly: kind, size, flags, then records (chunk_assembly_fuzz.cc).

F32, F16, INT8, MASKED32, MASKED64, DOWNLOAD = range(6)


def record(data, offset=None, flags=0):
    if offset is not None:
        flags |= 0x01
        return bytes([flags]) + struct.pack("<I", offset) + struct.pack("<H", len(data)) + data
    return bytes([flags]) + struct.pack("<H", len(data)) + data


def upload(kind, values, flags, *records, fields=b""):
    return bytes([kind, values - 1, flags]) + fields + b"".join(records)


def chunk_assembly_seeds():
    weights = f32(0.5, -1.0, 2.0, 0.25)  # 4 values
    change16 = half(0.5, -1.0, 2.0, 0.25)
    change8 = int8_chunk(0.02, 25, -50, 100, 12)
    masked32 = struct.pack("<5I", 7, 1 << 31, 0xFFFFFFFF, 0, 12)  # 4 values + the weight
    masked64 = struct.pack("<5Q", 7, 1 << 63, (1 << 64) - 1, 0, 12)
    return {
        "f32_one_chunk": upload(F32, 4, 0, record(weights)),
        "f32_two_chunks": upload(F32, 4, 0, record(weights[:8]), record(weights[8:])),
        "f32_out_of_order": upload(F32, 4, 0, record(weights[8:], offset=8),
                                   record(weights[:8], offset=0)),
        "f32_misaligned": upload(F32, 4, 0, record(weights[:6]), record(weights[6:])),
        "f32_truncated": upload(F32, 4, 0, record(weights[:8])),
        "f32_wrong_sha": upload(F32, 4, 0x04, record(weights)),
        "f32_abandoned": upload(F32, 4, 0, record(weights[:8]), record(b"", flags=0x80)),
        "f32_nan": upload(F32, 4, 0, record(f32(0.5, math.nan, 1.0, 2.0))),
        "f32_norm_bound_nan_metric": upload(F32, 4, 0x30, record(weights),
                                            fields=struct.pack("<d", math.nan)),
        "f32_payload_size_field": upload(F32, 4, 0x01, record(weights), fields=struct.pack("<I", 15)),
        "f32_no_examples": upload(F32, 4, 0x02, record(weights), fields=struct.pack("<I", 0)),
        "f16_one_chunk": upload(F16, 4, 0, record(change16)),
        "f16_split": upload(F16, 4, 0, record(change16[:4]), record(change16[4:])),
        "f16_huge_global": upload(F16, 4, 0x08, record(half(65504.0, 1.0, 1.0, 1.0))),
        "int8_one_chunk": upload(INT8, 4, 0, record(change8)),
        "int8_overflow": upload(INT8, 4, 0, record(int8_chunk(3.0e38, 127, 1, 1, 1))),
        "int8_norm_bound": upload(INT8, 4, 0x10, record(change8)),
        "masked32_one_chunk": upload(MASKED32, 4, 0, record(masked32)),
        "masked32_two_chunks": upload(MASKED32, 4, 0, record(masked32[:8]), record(masked32[8:])),
        "masked64_one_chunk": upload(MASKED64, 4, 0, record(masked64)),
        "masked64_half_word": upload(MASKED64, 4, 0, record(masked64[:4]), record(masked64[4:])),
        "masked_with_examples": upload(MASKED32, 4, 0x02, record(masked32),
                                       fields=struct.pack("<I", 10)),
        "download_two_chunks": upload(DOWNLOAD, 4, 0, record(weights[:8]), record(weights[8:])),
        "download_past_end": upload(DOWNLOAD, 4, 0, record(weights + f32(9))),
        "download_wrong_sha": upload(DOWNLOAD, 4, 0x04, record(weights)),
    }


# --- Text from the unit tests: C++ string literals (adjacent ones joined) and raw strings.

def c_unescape(body):
    out = bytearray()
    data = body.encode("utf-8")
    i = 0
    simple = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("0"): 0, ord("\\"): 92, ord('"'): 34,
              ord("'"): 39, ord("a"): 7, ord("b"): 8, ord("f"): 12, ord("v"): 11}
    while i < len(data):
        c = data[i]
        if c != 92 or i + 1 >= len(data):
            out.append(c)
            i += 1
            continue
        n = data[i + 1]
        if n == ord("x"):
            j = i + 2
            while j < len(data) and chr(data[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(data[i + 2:j], 16) & 0xFF)
            i = j
        elif n in simple:
            out.append(simple[n])
            i += 2
        else:
            out.append(n)
            i += 2
    return bytes(out)


STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def literals(path):
    """The string literals of a C++ file: raw strings, and runs of adjacent literals joined."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = [m.group(1).encode("utf-8") for m in re.finditer(r'R"\((.*?)\)"', text, re.S)]
    text = re.sub(r'R"\((.*?)\)"', '""', text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    pos = 0
    while True:
        m = STRING.search(text, pos)
        if m is None:
            break
        joined = c_unescape(m.group(1))
        end = m.end()
        while True:
            nxt = re.compile(r'\s*"((?:[^"\\\n]|\\.)*)"').match(text, end)
            if nxt is None:
                break
            joined += c_unescape(nxt.group(1))
            end = nxt.end()
        out.append(joined)
        pos = end
    return out


def unit_test(name):
    return os.path.join(ROOT, "tests", "unit", name)


def pick(texts, n):
    """At most n of `texts`: the three longest (whole files), then evenly spaced others."""
    if len(texts) <= n:
        return texts
    longest = sorted(texts, key=len, reverse=True)[:3]
    rest = [t for t in texts if t not in longest]
    step = len(rest) / (n - 3)
    return longest + [rest[int(i * step)] for i in range(n - 3)]


def toml_config_seeds():
    seeds = {}
    for test, n in [("config_test.cc", 12), ("client_config_test.cc", 8), ("sim_config_test.cc", 6)]:
        texts = []
        for text in literals(unit_test(test)):
            if b"\n" not in text or not re.search(rb"^\s*\[[a-z_]+\]", text, re.M):
                continue
            if len(text) <= MAX_SEED_BYTES and text not in texts:
                texts.append(text)
        for i, text in enumerate(pick(texts, n)):
            seeds[f"{test[:-8]}_{i:02d}.toml"] = text
    seeds["inline_tables_and_arrays.toml"] = (
        b'[model]\nhidden = [ 64, 32, ]\n[run]\nname = """multi\nline"""\n'
        b"rounds = 0x10\n[fit]\nlearning_rate = 1e-3\n")
    seeds["dotted_keys.toml"] = b'run.rounds = 3\nfit = { epochs = 2 }\n[[run]]\n'
    return seeds


def toml_dictionary():
    tokens = set()
    for example in ["server.example.toml", "client.example.toml", "sim.example.toml"]:
        with open(os.path.join(ROOT, "deploy", example), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^\[([a-z_]+)\]", line)
                if m:
                    tokens.add("[" + m.group(1) + "]")
                m = re.match(r"^([a-z_0-9]+) = ", line)
                if m:
                    tokens.add(m.group(1) + " = ")
    tokens |= {'"""', "'''", "[[", "]]", "{ ", " }", "= [", "true", "false", "inf", "-inf", "nan",
               "0x7f", "0o17", "0b101", "1_000", "1979-05-27T07:32:00Z", "\\u00e9", "\\n", '\\"',
               "\n", "# ", "é"}
    return sorted(tokens)


def csv_seeds():
    delimiters = [b",", b";", b"\t", b"|", b":", b"#"]
    texts = []
    for text in literals(unit_test("csv_test.cc")) + literals(unit_test("dataset_test.cc")):
        if b"\n" in text and len(text) <= MAX_SEED_BYTES and b"label" in text and text not in texts:
            texts.append(text)
    seeds = {}
    for found, text in enumerate(pick(texts, 16)):
        header = text.split(b"\n", 1)[0]
        counts = [header.count(d) for d in delimiters]
        delimiter = counts.index(max(counts)) if max(counts) > 0 else 0
        options = delimiter | (0x20 if b"id," in header or b"id;" in header else 0)
        seeds[f"test_{found:02d}.csv"] = bytes([options, 0]) + text
    seeds["missing_drop_row.csv"] = b"\x08\x00a,b,label\n1,NA,0\n2,3,1\n"
    seeds["missing_impute_classes.csv"] = b"\x10\x03a,b,label\n1,,0\n?,3,2\n"
    seeds["selected_features_key.csv"] = b"\xe0\x00id,site,a,b,c,label\n7,x,1,2,3,0\n8,y,4,5,6,1\n"
    seeds["quoted_crlf_bom.csv"] = b'\x00\x80\xef\xbb\xbf"a,1",b,y\r\n"1",2,0\r\n"3,""q""",4,1\r\n'
    return seeds


def csv_dictionary():
    return ['"', '""', ",", ";", "\t", "\r\n", "\n", "label", "y", "id", "site", "a", "b", "NA",
            "N/A", "NaN", "null", "?", "nan", "inf", "-inf", "1e39", "-0", "0x10", "3.4028235e38",
            "2147483647", b"\xef\xbb\xbf"]


# --- IDX (dataset_test.cc's files): a num_classes byte, a u32 length, images, labels.

def idx_images(n, pixels, magic=0x803, rows=2, cols=3):
    return struct.pack(">4I", magic, n, rows, cols) + bytes(pixels)


def idx_labels(labels, magic=0x801):
    return struct.pack(">2I", magic, len(labels)) + bytes(labels)


def idx(images, labels, num_classes=0):
    return bytes([num_classes]) + struct.pack("<I", len(images)) + images + labels


def idx_seeds():
    two = [0, 51, 102, 153, 204, 255, 255, 0, 0, 0, 0, 51]
    images = idx_images(2, two)
    labels = idx_labels([3, 1])
    return {
        "two_images.idx": idx(images, labels),
        "two_images_ten_classes.idx": idx(images, labels, 10),
        "label_outside_classes.idx": idx(images, labels, 2),
        "gzip_images.idx": idx(gzip.compress(images, mtime=0), labels),
        "gzip_both.idx": idx(gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)),
        "wrong_image_magic.idx": idx(idx_images(2, two, magic=0x801), labels),
        "wrong_label_magic.idx": idx(images, idx_labels([3, 1], magic=0x803)),
        "truncated_images.idx": idx(idx_images(3, two), idx_labels([3, 1, 2])),
        "count_mismatch.idx": idx(images, idx_labels([3, 1, 2])),
        "short_header.idx": idx(images[:10], labels),
        "zero_dimension.idx": idx(idx_images(2, two, rows=0), labels),
        "huge_dimensions.idx": idx(idx_images(0xFFFFFFFF, two, rows=0xFFFF, cols=0xFFFF), labels),
    }


TARGETS = {
    "safetensors": safetensors_seeds,
    "checkpoint": checkpoint_seeds,
    "update_codec": update_codec_seeds,
    "chunk_assembly": chunk_assembly_seeds,
    "toml_config": toml_config_seeds,
    "csv": csv_seeds,
    "idx": idx_seeds,
}
DICTIONARIES = {"toml_config.dict": toml_dictionary, "csv.dict": csv_dictionary}


def dictionary_line(token):
    """One libFuzzer dictionary entry: printable ASCII as is, but for \\ and \\"; \\xAB else."""
    data = token if isinstance(token, bytes) else token.encode("utf-8")
    escaped = ""
    for b in data:
        if b in (0x22, 0x5C):
            escaped += "\\" + chr(b)
        elif 0x20 <= b < 0x7F:
            escaped += chr(b)
        else:
            escaped += f"\\x{b:02x}"
    return f'"{escaped}"\n'


def main():
    chosen = sys.argv[1:] or list(TARGETS)
    for target in chosen:
        if target not in TARGETS:
            sys.exit(f"unknown target {target}; known: {', '.join(TARGETS)}")
        seeds = TARGETS[target]()
        out = os.path.join(CORPUS, target)
        os.makedirs(out, exist_ok=True)
        for name, data in seeds.items():
            assert len(data) <= MAX_SEED_BYTES, (target, name, len(data))
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print(f"wrote {len(seeds)} seeds to {out}")
    for name, make in DICTIONARIES.items():
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            f.write(f"# Written by make_corpus.py: tokens of {name[:-5]}'s inputs (libFuzzer -dict).\n")
            f.writelines(dictionary_line(t) for t in make())
    print(f"wrote {', '.join(DICTIONARIES)} to {HERE}")


if __name__ == "__main__":
    main()
