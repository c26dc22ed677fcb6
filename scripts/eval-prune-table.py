#!/usr/bin/env python3
"""Markdown tables from the results.jsonl of scripts/eval-prune.sh: per model, the metric of every
method x structure x pattern without fine-tuning (and the mean relative reconstruction error on the
calibration data), then the short fine-tunes."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
models = [m for m in ("mlp", "vit", "charlm") if any(r["model"] == m for r in rows)]
for model in models:
    rs = [r for r in rows if r["model"] == model]
    most = max((r.get("pruned") or 0) for r in rs)
    dense = next((r for r in rs if r["stage"] == "dense"), None)
    metric = rs[0]["metric"]
    fmt = (lambda v: f"{100 * v:.2f}") if metric == "test_accuracy" else (lambda v: f"{v:.3f}")
    unit = "test accuracy (%)" if metric == "test_accuracy" else "validation loss (nats/char)"
    print(f"\n### {model}: {unit}, dense {fmt(dense['value']) if dense else '?'}\n")
    patterns = sorted({r["nm"] for r in rs if r["stage"] == "pruned"},
                      key=lambda p: (int(p.split(':')[1]), int(p.split(':')[0])))
    print("| method | structure | " + " | ".join(patterns) + " |")
    print("|---|---|" + "---|" * len(patterns))
    for structure in ("rowwise", "transposable"):
        for method in ("magnitude", "wanda", "sparsegpt", "adaprune"):
            cells = []
            for p in patterns:
                r = next((r for r in rs if r["stage"] == "pruned" and r["method"] == method
                          and r["structure"] == structure and r["nm"] == p), None)
                if r is None:
                    cells.append("–")
                    continue
                err = r.get("mean_relative_error")
                cell = fmt(r["value"])
                if err is not None:
                    cell += f" ({err:.3f})"
                if r.get("pruned") is not None and r["pruned"] < most:
                    cell += f" †{r['pruned']}"
                cells.append(cell)
            if any(c != "–" for c in cells):
                print(f"| {method} | {structure} | " + " | ".join(cells) + " |")
    ft = [r for r in rs if r["stage"] == "finetuned"]
    if ft:
        print(f"\nShort sparse fine-tune from the 2:4 pruned models ({model}):\n")
        print("| method | structure | pruned | fine-tuned |")
        print("|---|---|---|---|")
        for r in ft:
            before = next((p for p in rs if p["stage"] == "pruned" and p["method"] == r["method"]
                           and p["structure"] == r["structure"] and p["nm"] == r["nm"]), None)
            print(f"| {r['method']} | {r['structure']} | {fmt(before['value']) if before else '?'} | "
                  f"{fmt(r['value'])} |")
