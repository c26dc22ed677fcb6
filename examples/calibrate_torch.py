#!/usr/bin/env python3
"""Calibration statistics for nmsparse's post-training pruners, gathered in PyTorch.

`nmsparse prune` (Wanda, SparseGPT, AdaPrune) reads, per linear layer y = W x + b, statistics of
the layer's inputs x over calibration data (docs/calibration.md):

    L.hessian    F32 [in, in]  H = sum_s x_s x_s^T   (a sum, not a mean)
    L.act_norm   F32 [in]      ||X_j||_2 = sqrt(sum_s x_sj^2)
    L.input_sum  F32 [in]      sum_s x_s
    L.samples    I64 []        number of input rows (tokens) summed

in a safetensors file whose metadata holds {"nmsparse.calibration": "1"}. L is the layer's name
such that its weight tensor is "L.weight" in the model file that is pruned.

`CalibrationCollector` gathers these for every torch.nn.Linear of ANY model with forward
pre-hooks (leading dimensions of the input are flattened: every token is a sample), accumulating
in float64. `write_calibration` writes the file by hand (the format is an 8-byte little-endian
header length, a JSON header, then the raw tensor bytes), so the `safetensors` package is not
needed.

`main` demonstrates it on a model trained by `nmsparse train --model mlp`: it reads the training
checkpoint (tensors model.layers.N.weight/bias and model.head.weight/bias, config in the metadata
"nmsparse.train.config"), rebuilds the same MLP in PyTorch, feeds it the first --samples
Fashion-MNIST training images (normalised as in train.cpp when the run was) and writes the layers
as "model.layers.N" (and "model.head" with --include-head), exactly what `nmsparse calibrate`
computes for the same checkpoint and --samples. The MLP here multiplies the weights as stored, so
it matches `nmsparse calibrate` for runs with a dense recipe and for checkpoints whose weights
already have the recipe's N:M pattern (e.g. pruned copies); for a checkpoint trained with a sparse
recipe, `nmsparse calibrate` applies the recipe's forward masks.

    python3 examples/calibrate_torch.py RUN_DIR/checkpoint.safetensors calib.safetensors \\
        --samples 1024
"""

import argparse
import gzip
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MEAN = 0.2860  # train.cpp: (x/255 - mean) / std, computed in float32
FASHION_STD = 0.3530

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


class CalibrationCollector:
    """Accumulates H, ||X_j||^2 and sum x (float64) for the inputs of every nn.Linear of `model`.

    names: module path -> calibration layer name (default: prefix + module path). Modules listed
    in `skip` (module paths) are not observed. Call remove() to detach the hooks.
    """

    def __init__(self, model, prefix="", skip=(), with_hessian=True):
        self.stats = {}
        self._handles = []
        for path, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear) or path in skip:
                continue
            name = prefix + path
            n = module.in_features
            self.stats[name] = {
                "hessian": torch.zeros(n, n, dtype=torch.float64) if with_hessian else None,
                "sum_squares": torch.zeros(n, dtype=torch.float64),
                "input_sum": torch.zeros(n, dtype=torch.float64),
                "samples": 0,
            }
            self._handles.append(module.register_forward_pre_hook(self._hook(name, n)))

    def _hook(self, name, n):
        def hook(_module, inputs):
            x = inputs[0].detach().reshape(-1, n).to(torch.float64)
            s = self.stats[name]
            if s["hessian"] is not None:
                s["hessian"] += x.T @ x
            s["sum_squares"] += (x * x).sum(0)
            s["input_sum"] += x.sum(0)
            s["samples"] += x.shape[0]
        return hook

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def layers(self):
        """name -> {"hessian" (or None), "act_norm", "input_sum", "samples"} as numpy float64."""
        out = {}
        for name, s in self.stats.items():
            if s["samples"] == 0:
                raise RuntimeError(f"calibration layer '{name}' saw no input")
            out[name] = {
                "hessian": None if s["hessian"] is None else s["hessian"].numpy(),
                "act_norm": np.sqrt(s["sum_squares"].numpy()),
                "input_sum": s["input_sum"].numpy(),
                "samples": s["samples"],
            }
        return out


def write_safetensors(path, tensors, metadata):
    """Writes {name: numpy array} (F32/F64/I64) atomically: temporary file, then rename."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
    header = {"__metadata__": dict(metadata)}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keeps the data 8-byte aligned
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".calibration-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_calibration(path, layers, metadata=None):
    """Writes the layers of CalibrationCollector.layers() as an nmsparse calibration file (F32)."""
    tensors = {}
    for name, l in layers.items():
        if l["hessian"] is not None:
            tensors[name + ".hessian"] = l["hessian"].astype(np.float32)
        tensors[name + ".act_norm"] = l["act_norm"].astype(np.float32)
        tensors[name + ".input_sum"] = l["input_sum"].astype(np.float32)
        tensors[name + ".samples"] = np.array(l["samples"], dtype=np.int64)
    meta = {"nmsparse.calibration": "1"}
    meta.update(metadata or {})
    write_safetensors(path, tensors, meta)


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata) of a safetensors file (the dtypes of _DTYPES)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(raw[base + begin:base + end], dtype=dtype).reshape(
            info["shape"])
    return tensors, metadata


def read_idx_images(path, count):
    """The first `count` images of a (gzipped) IDX3 file as uint8 [count, rows, cols]."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic, total, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            raise ValueError(f"{path}: not an IDX3 image file (magic {magic:#x})")
        if count > total:
            raise ValueError(f"--samples ({count}) exceeds the {total} training images")
        data = f.read(count * rows * cols)
    return np.frombuffer(data, dtype=np.uint8).reshape(count, rows, cols)


class Mlp(torch.nn.Module):
    """nmsparse's mlp (models.h): 784 -> hidden... -> 10, ReLU; same module paths."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(sizes[:-2], sizes[1:-1]))
        self.head = torch.nn.Linear(sizes[-2], sizes[-1])

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def load_mlp(checkpoint):
    """The MLP of an nmsparse training checkpoint, and its training config."""
    tensors, metadata = read_safetensors(checkpoint)
    if "nmsparse.train.config" not in metadata:
        raise ValueError(f"{checkpoint} is not an nmsparse training checkpoint")
    config = json.loads(metadata["nmsparse.train.config"])
    if config["model"]["kind"] != "mlp":
        raise ValueError(f"{checkpoint}: this example rebuilds mlp models, not "
                         f"{config['model']['kind']}")
    model = Mlp([784] + list(config["model"]["hidden"]) + [10])
    state = {name: torch.from_numpy(np.array(tensors["model." + name]))
             for name in model.state_dict()}
    model.load_state_dict(state)
    return model, config


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="nmsparse training checkpoint (.safetensors) of an mlp")
    p.add_argument("output", help="calibration file to write (.safetensors)")
    p.add_argument("--samples", type=int, default=1024, help="first N training images")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--include-head", action="store_true", help="calibrate the head too")
    p.add_argument("--no-hessian", action="store_true")
    p.add_argument("--data-dir", default=os.environ.get("NMSPARSE_FASHION_MNIST", FASHION_DIR))
    args = p.parse_args(argv)

    model, config = load_mlp(args.checkpoint)
    model.eval()
    images = read_idx_images(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"),
                             args.samples)
    x = torch.from_numpy(images.copy()).reshape(-1, 1, 28, 28).to(torch.float32).div_(255.0)
    if config.get("normalize", True):
        x.sub_(FASHION_MEAN).div_(FASHION_STD)  # float32 ops in train.cpp's order: bit-identical
    skip = () if args.include_head else ("head",)
    collector = CalibrationCollector(model, prefix="model.", skip=skip,
                                     with_hessian=not args.no_hessian)
    with torch.no_grad():
        for i in range(0, args.samples, args.batch):
            model(x[i:i + args.batch])
    collector.remove()
    layers = collector.layers()
    write_calibration(args.output, layers, {
        "nmsparse.calibration.source": args.checkpoint,
        "nmsparse.calibration.tool": "examples/calibrate_torch.py"})
    for name, l in layers.items():
        print(f"{name:24s} in {l['act_norm'].shape[0]:5d}  samples {l['samples']:6d}  "
              f"mean |X_j| {l['act_norm'].mean():.3f}", file=sys.stderr)
    print(f"{len(layers)} layers written to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
