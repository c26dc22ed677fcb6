#!/usr/bin/env bash
# `make demo`: nmsparse end to end.
#  1. The main job: sparse training of an MLP (784-1024-1024-10) on Fashion-MNIST, dense against
#     Bi-Mask + MVUE, transposable + MVUE and transposable + top-N (all 2:4), one table and one plot
#     (demo-out/train/compare.png). 3 epochs of the 60000 training images: about 3 minutes on
#     2 idle cores (2 epochs of 12000 images took 23 s), well inside 10 minutes on busy ones
#     (DEMO_EPOCHS, DEMO_TRAIN, DEMO_THREADS override it).
#  2. The tool chain on a generated model: generate -> info -> mask -> verify -> pack -> unpack.
set -euo pipefail
build=${1:-build}
tool="$build/tools/cli/nmsparse"
out=demo-out
rm -rf "$out"
mkdir -p "$out"

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

epochs=${DEMO_EPOCHS:-3}
train_images=${DEMO_TRAIN:-60000}
threads=${DEMO_THREADS:-$(nproc)}
if ! "$tool" train --help 2>&1 | grep -q "needs LibTorch"; then
  start=$(date +%s)
  step "Sparse training on Fashion-MNIST: dense vs 2:4 Bi-Mask/transposable weights with MVUE/top-N gradients" \
    "$tool" train --compare dense,bimask+mvue,transposable+mvue,transposable+topn --model mlp \
    --nm 2:4 --epochs "$epochs" --batch 128 --limit-train "$train_images" --lr 0.05 --seed 0 \
    --threads "$threads" --out "$out/train"
  printf '\ntraining comparison took %ss; curves: %s/train/compare.png, table: %s/train/compare.json,\n' \
    "$(($(date +%s) - start))" "$out" "$out"
  printf 'per-run checkpoints and report.json: %s/train/<config>/\n' "$out"
else
  echo "nmsparse was built without LibTorch: skipping the training comparison" \
    "(apt-get install libtorch-dev, or scripts/install-deps.sh, then rebuild)" >&2
fi

step "Generate a deterministic model (4 blocks, hidden 512, MLP 1376, vocab 4096, BF16)" \
  "$tool" generate "$out/model.safetensors" --layers 4 --hidden 512 --intermediate 1376 \
  --vocab 4096 --dtype BF16 --seed 0
step "What is in it, and what can be 2:4" "$tool" info "$out/model.safetensors" --nm 2:4 \
  --include 'layers.0|lm_head|vision|embed'
step "Mask 2:4 (keep 2 of every 4 along the input dim), skipping embeddings and the head" \
  "$tool" mask --nm 2:4 "$out/model.safetensors" "$out/model-2of4.safetensors" \
  --exclude 'embed|lm_head' --json "$out/mask-report.json"
step "Verify: the masked model is 2:4 along rows" "$tool" verify --nm 2:4 \
  "$out/model-2of4.safetensors" --exclude 'embed|lm_head' --dense "$out/model.safetensors" \
  --include 'layers.0|vision'
printf '\n(a standard mask is not transposable: the column check fails, exit status 1)\n'
set +e
"$tool" verify --nm 2:4 --transposable "$out/model-2of4.safetensors" --include 'layers.0.mlp' -q
echo "exit status: $?"
set -e
step "Transposable 4:8 (exact optimum per 8x8 tile): W and W^T both 4:8" "$tool" mask --nm 4:8 \
  --transposable --method exact "$out/model.safetensors" "$out/model-t4of8.safetensors" \
  --include 'layers.0.(self_attn|mlp)'
step "Verify in both directions" "$tool" verify --nm 4:8 --transposable \
  "$out/model-t4of8.safetensors" --include 'layers.0.(self_attn|mlp)' -q --json "$out/verify-t.json"
echo "transposable 4:8 verifies: $(grep -o '"valid": [a-z]*' "$out/verify-t.json")"
step "Pack into the compressed N:M format (values + 2-bit indices)" "$tool" pack --nm 2:4 \
  "$out/model-2of4.safetensors" "$out/model-2of4.packed.safetensors" --exclude 'embed|lm_head' \
  --include 'layers.0|vision'
step "Pack as compressed-tensors sparse-24-bitmask" "$tool" pack --nm 2:4 \
  --format sparse-24-bitmask "$out/model-2of4.safetensors" "$out/model-2of4.s24.safetensors" \
  --exclude 'embed|lm_head' -q
step "Unpack back to dense BF16 tensors" "$tool" unpack \
  "$out/model-2of4.packed.safetensors" "$out/model-2of4.unpacked.safetensors"
"$tool" verify --nm 2:4 "$out/model-2of4.s24.safetensors" --exclude 'embed|lm_head' -q \
  --json "$out/verify-s24.json"
echo "sparse-24-bitmask model verifies: $(grep -o '"valid": [a-z]*' "$out/verify-s24.json")"
step "Other patterns: 1:4 and 8:16 on the MLP" "$tool" mask --nm 8:16 \
  "$out/model.safetensors" "$out/model-8of16.safetensors" --include 'mlp' -q --json \
  "$out/mask-8of16.json"
echo "8:16 kept |W| fraction: $(grep -o '"kept_mass_fraction": [0-9.]*' "$out/mask-8of16.json" | head -1)"
"$tool" mask --nm 1:4 "$out/model.safetensors" "$out/model-1of4.safetensors" --include 'mlp' -q \
  --json "$out/mask-1of4.json"
echo "1:4  kept |W| fraction: $(grep -o '"kept_mass_fraction": [0-9.]*' "$out/mask-1of4.json" | head -1)"
printf '\nAll outputs and JSON reports are in %s/\n' "$out"
