#!/usr/bin/env python3
"""Golden data for nmsparse's compressed-tensors `sparse-24-bitmask` import/export.

Runs the compressed-tensors package itself (its Sparse24BitMaskTensor / sparse24_bitmask_compress /
sparse24_bitmask_decompress) on small deterministic matrices and writes, under
tests/data/sparse24/:

  manifest.txt                 one line per case: <name> <rows> <cols> <mode>
                               mode = sparse (input is 2:4 sparse; nmsparse must match exactly)
                                    | prune  (input is not; the package keeps the top-2 |x| of
                                              every group, ties broken the way torch.topk does)
  <name>.dense.bin             float32 little-endian, rows*cols, the input
  <name>.compressed.bin        float32 LE, rows*(cols/2), the package's `<prefix>.compressed`
  <name>.bitmask.bin           uint8, rows*ceil(cols/8), the package's `<prefix>.bitmask`
  <name>.decompressed.bin      float32 LE, rows*cols, the package's decompression of the above

With --table it instead prints the C++ tie table used by src/format/sparse24_bitmask.cpp: for
each 4-vector of "beat counts" (r_i = number of j whose |x_j| element i beats, NaN beating every
non-NaN, in 2 bits each), the 4-bit mask torch.topk(|x|, 2) keeps.

The sparse-24-bitmask compressor was removed from compressed-tensors after 0.14.0. Install that
version somewhere private and point PYTHONPATH at it, e.g.
  python3 -m pip install --no-deps --target /tmp/ct014 compressed-tensors==0.14.0
  PYTHONPATH=/tmp/ct014 python3 scripts/make_golden_sparse24.py
"""

import argparse
import itertools
import math
import os
import struct
import sys

import numpy as np
import torch

try:
    import compressed_tensors
    from compressed_tensors.compressors.sparse_compressors.sparse_24_bitmask import (
        Sparse24BitMaskTensor,
        get_24_bytemasks,
        sparse24_bitmask_decompress,
    )
except ImportError as e:  # pragma: no cover
    sys.exit(
        "needs compressed-tensors <= 0.14.0 (the sparse-24-bitmask compressor was removed "
        f"afterwards): {e}\nsee the docstring of this script"
    )

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "sparse24")


def f32(bits):
    """A float32 from its bit pattern (for NaN payloads)."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def beat_counts(group):
    def beats(x, y):
        return (math.isnan(x) and not math.isnan(y)) or abs(x) > abs(y)

    return [sum(beats(group[i], group[j]) for j in range(4)) for i in range(4)]


def tie_table():
    """table[r0 | r1 << 2 | r2 << 4 | r3 << 6] = kept mask (bit i = element i kept)."""
    keys = list(itertools.product(range(4), repeat=4))  # (r0, r1, r2, r3)
    t = torch.tensor([list(k) for k in keys], dtype=torch.float32)
    masks = get_24_bytemasks(t).tolist()
    table = [0] * 256
    for (r0, r1, r2, r3), mk in zip(keys, masks):
        table[r0 | r1 << 2 | r2 << 4 | r3 << 6] = sum(1 << i for i in range(4) if mk[i])
    return table


def case_sparse(rng):
    """6 x 12, 2:4 sparse along rows: every kept pattern of 0, 1 and 2 nonzeros, negatives, -0.0."""
    patterns = [()] + [(i,) for i in range(4)] + list(itertools.combinations(range(4), 2))
    groups = []
    for g in range(18):
        keep = patterns[g % len(patterns)]
        vals = []
        for i in range(4):
            if i in keep:
                vals.append(float(rng.integers(1, 40)) * 0.25 * (-1.0 if rng.random() < 0.4 else 1.0))
            else:
                vals.append(-0.0 if rng.random() < 0.35 else 0.0)
        groups.append(vals)
    return np.array(groups, dtype=np.float32).reshape(6, 12)


def case_special():
    """4 x 8, 2:4 sparse, with NaN (several payloads), +-Inf, denormals, extremes, -0.0."""
    nan_payload = f32(0x7FC00123)
    neg_nan = f32(0xFFC00000)
    rows = [
        [float("nan"), 0.0, 0.0, float("inf"), -0.0, -float("inf"), 0.0, 0.0],
        [0.0, nan_payload, 0.0, -0.0, 1e-45, 0.0, -1e-45, 0.0],
        [3.4028235e38, 0.0, -3.4028235e38, 0.0, 0.0, neg_nan, -0.0, 0.0],
        [-0.0, -0.0, -0.0, -0.0, 0.0, 0.0, 0.0, float("inf")],
    ]
    return np.array(rows, dtype=np.float32)


def case_ties(rng):
    """20 x 16 (80 groups), not sparse: one group per weak order of |x| over 4 elements (75), then
    5 groups with NaN. Magnitudes are the beat counts themselves, signs random, zeros +-0.0."""
    seen = {}
    for combo in itertools.product(range(4), repeat=4):
        key = tuple(beat_counts([float(c) for c in combo]))
        seen.setdefault(key, combo)
    groups = []
    for key in sorted(seen):
        g = []
        for r in key:
            sign = -1.0 if rng.random() < 0.5 else 1.0
            g.append(sign * float(r))  # r == 0 gives +-0.0
        groups.append(g)
    assert len(groups) == 75
    nan = float("nan")
    groups += [[nan, 0.0, nan, 1.0], [1.0, nan, -nan, nan], [nan, nan, nan, nan],
               [0.0, float("inf"), nan, -float("inf")], [-0.0, 0.0, nan, -0.0]]
    return np.array(groups, dtype=np.float32).reshape(20, 16)


def case_straddle():
    """4 x 6: cols % 4 == 2, so the package's flat groups of 4 straddle rows. 2:4 sparse per flat
    group (not per row: row 0 keeps 4 of its 6 values)."""
    flat = [1.0, 0.0, 2.0, 0.0,  # group 0 = row 0 [0..3]
            3.0, -4.0, 0.0, 0.0,  # group 1 = row 0 [4..5] + row 1 [0..1]
            0.0, 0.0, 5.0, 0.0,  # group 2 = row 1 [2..5]
            -0.0, 0.0, 0.0, 0.0,  # group 3
            6.0, 7.0, 0.0, 0.0,  # group 4
            0.0, -8.0, 0.0, 9.0]  # group 5
    return np.array(flat, dtype=np.float32).reshape(4, 6)


def case_random_prune(rng):
    """8 x 8 dense random values (distinct magnitudes with high probability) pruned by the package."""
    return (rng.integers(-64, 65, size=(8, 8)).astype(np.float32) * 0.125).astype(np.float32)


def run_package(dense):
    t = torch.from_numpy(dense.copy())
    bt = Sparse24BitMaskTensor.from_dense(t, "2:4")
    d = bt.dict("layer.weight")
    shape = d["layer.shape"]
    assert shape.dtype == torch.int64 and list(shape.shape) == [2, 1], shape
    assert shape.flatten().tolist() == list(dense.shape)
    compressed = d["layer.compressed"]
    bitmask = d["layer.bitmask"]
    assert compressed.dtype == torch.float32 and bitmask.dtype == torch.uint8
    rows, cols = dense.shape
    assert list(compressed.shape) == [rows, cols // 2], compressed.shape
    assert list(bitmask.shape) == [rows, (cols + 7) // 8], bitmask.shape
    back = sparse24_bitmask_decompress(compressed, bitmask, list(dense.shape))
    return compressed.numpy(), bitmask.numpy(), back.numpy()


def is_24_sparse(dense):
    flat = dense.reshape(-1, 4)
    return bool(((flat != 0) | np.isnan(flat)).sum(axis=1).max(initial=0) <= 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="print the C++ tie table and exit")
    ap.add_argument("--out", default=OUT_DIR)
    args = ap.parse_args()

    if args.table:
        table = tie_table()
        lines = []
        for row in range(16):
            lines.append("    " + ", ".join(f"0x{v:x}" for v in table[row * 16:(row + 1) * 16]) + ",")
        print("\n".join(lines))
        return

    rng = np.random.default_rng(20240611)
    cases = [
        ("sparse_6x12", case_sparse(rng)),
        ("special_4x8", case_special()),
        ("straddle_4x6", case_straddle()),
        ("ties_20x16", case_ties(rng)),
        ("random_8x8", case_random_prune(rng)),
    ]
    os.makedirs(args.out, exist_ok=True)
    manifest = [
        "# sparse-24-bitmask golden data, written by scripts/make_golden_sparse24.py",
        f"# compressed-tensors {compressed_tensors.__version__}, torch {torch.__version__}, "
        f"numpy {np.__version__}",
        "# <name> <rows> <cols> <mode: sparse|prune>; files <name>.{dense,compressed,bitmask,"
        "decompressed}.bin, little-endian",
    ]
    for name, dense in cases:
        dense = np.ascontiguousarray(dense, dtype=np.float32)
        compressed, bitmask, back = run_package(dense)
        mode = "sparse" if is_24_sparse(dense) else "prune"
        rows, cols = dense.shape
        manifest.append(f"{name} {rows} {cols} {mode}")
        for suffix, arr in (("dense", dense), ("compressed", compressed), ("bitmask", bitmask),
                            ("decompressed", back)):
            dt = "<u1" if suffix == "bitmask" else "<f4"
            with open(os.path.join(args.out, f"{name}.{suffix}.bin"), "wb") as f:
                f.write(np.ascontiguousarray(arr).astype(dt).tobytes())
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
