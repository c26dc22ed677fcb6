#!/usr/bin/env python3
"""`nmsparse calibrate` and examples/calibrate_torch.py agree on the same checkpoint and samples.

Trains a tiny mlp with `nmsparse train` (dense, 1 epoch on 512 Fashion-MNIST images), calibrates
it with both tools over the first 300 training images (head included), and compares the files.

Tolerance, relative 1e-4 (H: max |ΔH| / max |H|; act_norm and input_sum: the same per vector):
both accumulate in float64 and store float32 (rounding 6e-8 relative). The first layer's inputs
are bitwise the same (the same float32 normalisation ops), so its statistics differ only by
summation order and rounding. Later layers' inputs come out of float32 GEMMs of different
implementations (nmsparse/LibTorch vs PyTorch), which differ by a few ulps (~1e-6 relative)
per element, plus the odd ReLU input near 0 that flips: far below 1e-4 of the largest entry.
Exit 77 (skip) without torch/numpy or Fashion-MNIST.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

SKIP = 77
FASHION = os.environ.get("NMSPARSE_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", required=True)
    p.add_argument("--example", required=True)
    args = p.parse_args()
    try:
        import numpy as np  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {sys.executable} cannot import torch/numpy ({e}); "
              "apt-get install python3-torch python3-numpy")
        return SKIP
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not in {FASHION} (apt-get install dataset-fashion-mnist)")
        return SKIP
    spec = importlib.util.spec_from_file_location("calibrate_torch", args.example)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    with tempfile.TemporaryDirectory(prefix="nmsparse_calib_py_") as d:
        def run(cmd):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("FAILED:", " ".join(cmd), "\n", r.stdout, r.stderr)
                sys.exit(1)
            return r

        run([args.cli, "train", "--model", "mlp", "--hidden", "64,32", "--epochs", "1",
             "--batch", "64", "--limit-train", "512", "--limit-test", "256", "--threads", "2",
             "--no-plot", "-q", "--out", os.path.join(d, "run")])
        ckpt = os.path.join(d, "run", "checkpoint.safetensors")
        cpp = os.path.join(d, "cpp.safetensors")
        py = os.path.join(d, "py.safetensors")
        run([args.cli, "calibrate", "--from", ckpt, "--samples", "300", "--batch", "128",
             "--include-head", "--threads", "2", "-q", cpp])
        run([sys.executable, args.example, ckpt, py, "--samples", "300", "--batch", "128",
             "--include-head"])
        a, meta_a = example.read_safetensors(cpp)
        b, meta_b = example.read_safetensors(py)

    assert meta_a["nmsparse.calibration"] == meta_b["nmsparse.calibration"] == "1"
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    layers = sorted({k.rsplit(".", 1)[0] for k in a})
    assert layers == ["model.head", "model.layers.0", "model.layers.1"], layers
    worst = 0.0
    for layer in layers:
        assert int(a[layer + ".samples"]) == int(b[layer + ".samples"]) == 300, layer
        for stat in ("hessian", "act_norm", "input_sum"):
            x = a[f"{layer}.{stat}"].astype("float64")
            y = b[f"{layer}.{stat}"].astype("float64")
            assert x.shape == y.shape, (layer, stat, x.shape, y.shape)
            err = abs(x - y).max() / max(abs(y).max(), 1e-30)
            print(f"{layer:16s} {stat:9s} max rel diff {err:.2e}")
            worst = max(worst, err)
            assert err <= 1e-4, f"{layer}.{stat}: relative difference {err:.3e} > 1e-4"
    print(f"OK: the files agree (worst {worst:.2e} <= 1e-4)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
