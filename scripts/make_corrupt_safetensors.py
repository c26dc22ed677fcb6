#!/usr/bin/env python3
"""Regenerates tests/data/safetensors/corrupt/: one small file per defect the reader must reject.
tests/io/corrupt_test.cpp holds the expected error fragment of each file, and fails on a file it
has no expectation for. Standard library only (the Python safetensors package refuses to write
most of these).

  scripts/make_corrupt_safetensors.py [OUTPUT_DIR]
"""
import json
import os
import struct
import sys


def frame(header, data=b"", length=None, pad=True):
    """8-byte little-endian header length + header + data. `header` is a dict (dumped compactly)
    or raw str/bytes; `length` overrides the length field."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


F32X2 = b"\x00\x00\x80\x3f\x00\x00\x00\x40"  # [1.0, 2.0]

CASES = {
    "truncated": b"\x10\x00\x00",
    "header_past_end": frame({"a": t("F32", [2], 0, 8)}, F32X2, length=4096),
    "huge_header_length": frame({"a": t("F32", [2], 0, 8)}, F32X2, length=2**63 + 5),
    "empty_header": struct.pack("<Q", 0),
    "invalid_json": frame('{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]', F32X2),
    "trailing_garbage_json": frame('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x',
                                   F32X2),
    "nul_padding": frame(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\x00\x00\x00',
                         F32X2, pad=False),
    "non_object_header": frame("[1, 2, 3]"),
    "invalid_utf8_name": frame(b'{"\xff\xfe":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
                               F32X2),
    "deep_nesting": frame('{"__metadata__":{"a":' + "[" * 20 + "]" * 20 + "}}"),
    "unknown_dtype": frame({"a": t("Q4_K", [2], 0, 8)}, F32X2),
    "unsupported_dtype_f8": frame({"a": t("F8_E4M3", [8], 0, 8)}, F32X2),
    "dtype_not_string": frame({"a": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}}, F32X2),
    "entry_not_object": frame({"a": 5}),
    "missing_dtype": frame({"a": {"shape": [2], "data_offsets": [0, 8]}}, F32X2),
    "extra_key": frame({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}},
                       F32X2),
    "empty_name": frame({"": t("F32", [2], 0, 8)}, F32X2),
    "duplicate_names": frame('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                             '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', F32X2),
    "duplicate_inner_key": frame('{"a":{"dtype":"F32","dtype":"F32","shape":[2],'
                                 '"data_offsets":[0,8]}}', F32X2),
    "negative_shape": frame({"a": t("F32", [-2], 0, 8)}, F32X2),
    "float_shape": frame('{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', F32X2),
    "shape_dim_too_large": frame({"a": t("U8", [2**64 - 1], 0, 8)}, F32X2),
    "shape_overflow": frame({"a": t("U8", [2**32, 2**32, 2**32], 0, 8)}, F32X2),
    "byte_size_overflow": frame({"a": t("F64", [2**61], 0, 8)}, F32X2),
    "shape_bytes_mismatch": frame({"a": t("F32", [3], 0, 8)}, F32X2),
    "offsets_wrong_length": frame({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}},
                                  F32X2),
    "offsets_begin_after_end": frame({"a": t("F32", [0], 8, 4)}, F32X2),
    "offsets_huge_float": frame('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,1e30]}}',
                                F32X2),
    "out_of_bounds_offsets": frame({"a": t("F32", [4], 0, 16)}, F32X2),
    "overlapping_offsets": frame({"a": t("F32", [2], 0, 8), "b": t("F32", [1], 4, 8)}, F32X2),
    "gap_between_tensors": frame({"a": t("F32", [1], 0, 4), "b": t("U8", [2], 6, 8)}, F32X2),
    "gap_at_start": frame({"a": t("F32", [1], 4, 8)}, F32X2),
    "trailing_bytes": frame({"a": t("F32", [1], 0, 4)}, F32X2),
    "metadata_non_string": frame({"__metadata__": {"k": 1}, "a": t("F32", [2], 0, 8)}, F32X2),
    "metadata_not_object": frame({"__metadata__": ["k"], "a": t("F32", [2], 0, 8)}, F32X2),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors", "corrupt")
    os.makedirs(out, exist_ok=True)
    for name, data in CASES.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
