#!/usr/bin/env python3
"""Trains a dense 784-1024-1024-10 MLP on Fashion-MNIST with numpy and writes its weights as
safetensors (fc1.weight [1024, 784], fc2.weight [1024, 1024], fc3.weight [10, 1024], biases).

Used to measure mask quality (e.g. Bi-Mask's retained fraction) on trained rather than random
weights until `nmsparse train` exists. Needs python3-numpy and Debian's dataset-fashion-mnist.

  scripts/train-dense-mlp.py OUT.safetensors [--epochs 3] [--seed 0]
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    path = os.path.join(DATA, name)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        sys.exit(f"cannot read {path}: {e} (apt-get install dataset-fashion-mnist)")
    magic, count = struct.unpack(">II", raw[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4 : 4 + 4 * dims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        sys.exit(f"{path}: {data.size} bytes of data for shape {shape}")
    return data.reshape(shape)


def write_safetensors(path, tensors):
    header = {}
    offset = 0
    blobs = []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)  # atomic: no partial file on interruption


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    x = read_idx("train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    xt = read_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    yt = read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    mean, std = x.mean(), x.std()
    x, xt = (x - mean) / std, (xt - mean) / std
    sizes = [784, 1024, 1024, 10]
    w = [(rng.standard_normal((o, i)) * np.sqrt(2.0 / i)).astype(np.float32)
         for i, o in zip(sizes[:-1], sizes[1:])]
    b = [np.zeros(o, np.float32) for o in sizes[1:]]
    vw = [np.zeros_like(t) for t in w]
    vb = [np.zeros_like(t) for t in b]

    def forward(batch):
        acts = [batch]
        for k in range(3):
            z = acts[-1] @ w[k].T + b[k]
            acts.append(np.maximum(z, 0) if k < 2 else z)
        return acts

    steps = len(x) // a.batch
    for epoch in range(a.epochs):
        order = rng.permutation(len(x))
        loss_sum = 0.0
        for s in range(steps):
            idx = order[s * a.batch : (s + 1) * a.batch]
            acts = forward(x[idx])
            logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss_sum += -np.log(p[np.arange(len(idx)), y[idx]] + 1e-12).mean()
            g = p
            g[np.arange(len(idx)), y[idx]] -= 1.0
            g /= len(idx)
            for k in (2, 1, 0):
                gw = g.T @ acts[k]
                gb = g.sum(axis=0)
                if k > 0:
                    g = (g @ w[k]) * (acts[k] > 0)
                vw[k] = 0.9 * vw[k] + gw
                vb[k] = 0.9 * vb[k] + gb
                w[k] -= a.lr * vw[k]
                b[k] -= a.lr * vb[k]
            if s % 100 == 0:
                print(f"\repoch {epoch + 1}/{a.epochs} step {s}/{steps} "
                      f"loss {loss_sum / (s + 1):.4f}", end="", file=sys.stderr, flush=True)
        acc = (forward(xt)[-1].argmax(axis=1) == yt).mean()
        print(f"\repoch {epoch + 1}/{a.epochs} loss {loss_sum / steps:.4f} "
              f"test accuracy {acc:.4f}          ", file=sys.stderr)
    write_safetensors(a.out, {f"fc{k + 1}.weight": w[k] for k in range(3)} |
                      {f"fc{k + 1}.bias": b[k] for k in range(3)})
    print(json.dumps({"out": a.out, "test_accuracy": float(acc), "epochs": a.epochs}))


if __name__ == "__main__":
    main()
