#!/usr/bin/env bash
# Post-training pruning evaluation (issue 6; results in docs/results.md). For each model (mlp, vit,
# charlm): train it dense with `nmsparse train`, gather calibration statistics with
# `nmsparse calibrate`, prune it with every method (magnitude, wanda, sparsegpt, adaprune) at 2:4,
# 4:8, 8:16 and 16:32, row-wise and transposable, evaluate each pruned model without fine-tuning
# (`nmsparse train --init P --epochs 0`), then fine-tune a few of them briefly with the matching
# sparse recipe (`nmsparse train --init P --weights nm|transposable`). Every result goes to
# OUT/results.jsonl; OUT/results.md holds the tables.
#
#   scripts/eval-prune.sh [OUT] [BUILD]      (MODELS="mlp vit charlm", THREADS=2 override)
#
# Sizes are reduced to fit a 2-core session: mlp 8 epochs on all 60k images; vit 3 epochs on 10k
# (test on 2k); charlm width 128, 600 steps. About 40 minutes on 2 idle cores.
set -euo pipefail
out=${1:-runs/prune-eval}
build=${2:-build}
tool="$build/tools/cli/nmsparse"
threads=${THREADS:-2}
models=${MODELS:-mlp vit charlm}
patterns=${PATTERNS:-2:4 4:8 8:16 16:32}
methods=${METHODS:-magnitude wanda sparsegpt adaprune}
mkdir -p "$out"
results="$out/results.jsonl"

# Per model: the training flags (shared by every evaluation and fine-tune) and the dense schedule.
model_flags() {
  case $1 in
    mlp) echo "--model mlp --batch 128" ;;
    vit) echo "--model vit --batch 128 --limit-train 10000 --limit-test 2000" ;;
    charlm) echo "--model charlm --width 128 --blocks 4 --heads 4 --batch 32" ;;
  esac
}
dense_schedule() {
  case $1 in
    mlp) echo "--epochs 8" ;;
    vit) echo "--epochs 3" ;;
    charlm) echo "--epochs 3 --steps-per-epoch 200" ;;
  esac
}
# Calibration examples: enough tokens that H (in x in) has full rank (mlp: 4096 images for 1024
# inputs; vit: 512 images = 33k tokens; charlm: 256 windows = 33k tokens).
calib_samples() {
  case $1 in
    mlp) echo 4096 ;;
    vit) echo 512 ;;
    charlm) echo 256 ;;
  esac
}
# A short fine-tune: one epoch (mlp), 40 steps (vit), 100 steps (charlm), at a tenth of the lr.
finetune_schedule() {
  case $1 in
    mlp) echo "--epochs 1 --lr 0.005" ;;
    vit) echo "--epochs 1 --steps-per-epoch 40 --lr 1e-4" ;;
    charlm) echo "--epochs 1 --steps-per-epoch 100 --lr 1e-4" ;;
  esac
}

# Appends {"model", "method", "nm", "structure", "stage", "metric", "value", "density"} to results.
record() {  # model method nm structure stage report.json prune.json
  python3 - "$@" >>"$results" <<'PY'
import json, sys
model, method, nm, structure, stage, report_path, prune_path = sys.argv[1:8]
r = json.load(open(report_path))
metric = "val_loss" if model == "charlm" else "test_accuracy"
value = r["val_loss"] if model == "charlm" else r["test_accuracy"]
p = json.load(open(prune_path)) if prune_path != "-" else {}
print(json.dumps({"model": model, "method": method, "nm": nm, "structure": structure,
                  "stage": stage, "metric": metric, "value": value,
                  "density": p.get("density"), "pruned": p.get("pruned"),
                  "mean_relative_error": p.get("mean_relative_error")}))
PY
}

for model in $models; do
  flags=$(model_flags "$model")
  dir="$out/$model"
  mkdir -p "$dir"
  if [[ ! -f $dir/dense/report.json ]]; then
    echo "== $model: dense training"
    # shellcheck disable=SC2046
    "$tool" train $flags $(dense_schedule "$model") --threads "$threads" --seed 0 --no-plot \
      --out "$dir/dense"
  fi
  record "$model" dense - - dense "$dir/dense/report.json" -
  if [[ ! -f $dir/calib.safetensors ]]; then
    echo "== $model: calibration"
    "$tool" calibrate --from "$dir/dense" --samples "$(calib_samples "$model")" --threads "$threads" -q "$dir/calib.safetensors"
  fi
  for nm in $patterns; do
    for structure in rowwise transposable; do
      for method in $methods; do
        name="$method-${nm/:/x}-$structure"
        extra=()
        [[ $structure == transposable ]] && extra+=(--transposable)
        echo "== $model: $name"
        "$tool" prune --method "$method" --nm "$nm" "${extra[@]}" --calib "$dir/calib.safetensors" \
          --threads "$threads" -q --json "$dir/$name.prune.json" "$dir/dense/checkpoint.safetensors" \
          "$dir/$name.safetensors"
        # shellcheck disable=SC2086
        "$tool" train $flags --init "$dir/$name.safetensors" --epochs 0 --threads "$threads" \
          --no-plot --out "$dir/$name.eval" >/dev/null
        record "$model" "$method" "$nm" "$structure" pruned "$dir/$name.eval/report.json" \
          "$dir/$name.prune.json"
      done
    done
  done
  # Short sparse fine-tunes at 2:4 from the pruned models (all three GEMMs sparse for the
  # transposable ones: transposable weights with MVUE gradients).
  for structure in rowwise transposable; do
    for method in $methods; do
      name="$method-2x4-$structure"
      [[ -f $dir/$name.safetensors ]] || continue
      if [[ $structure == rowwise ]]; then recipe=(--weights nm --grads dense); else
        recipe=(--weights transposable --grads mvue); fi
      echo "== $model: fine-tune $name"
      # shellcheck disable=SC2046,SC2086
      "$tool" train $flags $(finetune_schedule "$model") --nm 2:4 "${recipe[@]}" \
        --init "$dir/$name.safetensors" --threads "$threads" --seed 0 --no-plot \
        --out "$dir/$name.finetune" >/dev/null
      record "$model" "$method" 2:4 "$structure" finetuned "$dir/$name.finetune/report.json" \
        "$dir/$name.prune.json"
    done
  done
done
python3 "$(dirname "$0")/eval-prune-table.py" "$results" >"$out/results.md"
cat "$out/results.md"
