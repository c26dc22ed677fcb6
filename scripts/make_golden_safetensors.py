#!/usr/bin/env python3
"""Regenerates tests/data/safetensors/golden/: small files written by the reference Python
`safetensors` package (pip install safetensors numpy), read back by tests/io/golden_test.cpp with
exact expected values. If you change a value here, change the test too.

  scripts/make_golden_safetensors.py [OUTPUT_DIR]

Files:
  all_dtypes.safetensors   one tensor per supported dtype, a 0-d scalar, an empty tensor, metadata
  no_metadata.safetensors  one F32 tensor, no __metadata__
  sharded/                 model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json
"""
import json
import os
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file


def bf16_bits(values):
    """bfloat16 bit patterns of float32 values that bfloat16 represents exactly."""
    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0), "value not exactly representable in bfloat16"
    return (bits >> 16).astype(np.uint16)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors", "golden")
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)

    tensors = {
        "f64": np.array([[1.5, -2.25, 1e300], [0.0, -0.0, 3.0]], dtype=np.float64),
        "f32": np.array([1.0, -0.5, 3.25, 1e-40, np.inf], dtype=np.float32),
        "f16": np.array([1.0, -2.0, 0.5, 65504.0, 2.0**-24, -np.inf], dtype=np.float16),
        "i64": np.array([-(2**62), 7], dtype=np.int64),
        "i32": np.array([[1, -2], [3, -4]], dtype=np.int32),
        "i16": np.array([-32768, 32767, 5], dtype=np.int16),
        "i8": np.array([-128, 127, 0, -1], dtype=np.int8),
        "u8": np.array([0, 255, 17], dtype=np.uint8),
        "bool": np.array([True, False, True], dtype=np.bool_),
        "scalar": np.array(2.5, dtype=np.float32),  # 0-d
        "empty": np.zeros((0, 3), dtype=np.float32),
        "layer.0.weight": np.arange(12, dtype=np.float32).reshape(3, 4) / 4,
    }
    specs = {}
    for name, array in tensors.items():
        specs[name] = TensorSpec(dtype=array.dtype.name, shape=list(array.shape),
                                 data_ptr=array.ctypes.data, data_len=array.nbytes)
    # bfloat16 has no numpy dtype: hand the raw bit patterns to the serializer.
    bf16 = bf16_bits([1.0, -3.5, 0.15625, 2.0**100, -(2.0**-130), 0.0]).reshape(2, 3)
    specs["bf16"] = TensorSpec(dtype="bfloat16", shape=[2, 3], data_ptr=bf16.ctypes.data,
                               data_len=bf16.nbytes)
    # One metadata key only: the package writes metadata in hash-map order, so several keys would
    # make the output differ from run to run.
    serialize_file(specs, os.path.join(out, "all_dtypes.safetensors"),
                   metadata={"producer": "make_golden_safetensors.py"})

    save_file({"w": np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)},
              os.path.join(out, "no_metadata.safetensors"))

    shard_tensors = [
        {"a.weight": np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32),
         "a.bias": np.array([0.5], dtype=np.float32)},
        {"b.weight": np.array([[-1.0, -2.0], [-3.0, -4.0]], dtype=np.float16)},
    ]
    weight_map = {}
    total = 0
    for i, group in enumerate(shard_tensors, start=1):
        name = f"model-{i:05d}-of-{len(shard_tensors):05d}.safetensors"
        save_file(group, os.path.join(out, "sharded", name), metadata={"format": "pt"})
        for tensor, array in group.items():
            weight_map[tensor] = name
            total += array.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
