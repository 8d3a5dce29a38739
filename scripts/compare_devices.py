#!/usr/bin/env python3
"""Do two bundles of the same grid, run on two devices (or in two precisions), generate the same tokens?

    scripts/compare_devices.py CPU.json CUDA.json [--perplexity-rtol 1e-3] [--report-only]

For each cell of the first bundle (matched by key with the second): the continuations of every prompt (the
`generations` that a [quality] section keeps, decoded without special tokens: a different token shows as a
different text, or as a different count of masked positions), each repetition's committed tokens per step,
forward passes and output bytes, and the perplexities (relative difference at most --perplexity-rtol). Prints one
line per cell and a summary; exits 1 when anything differs (0 with --report-only, which only counts: for a
precision against f32, where greedy choices may flip). Standard library only; config/gpu_check.toml is the grid
it was written for (scripts/gpu-session.sh, stage `check`).
"""

from __future__ import annotations

import argparse
import os
import sys

# One reading and one cell key for every bundle comparison: jobs/compare_bundles.py's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jobs"))
from compare_bundles import key_of, label, load  # noqa: E402


def perplexity(cell: dict) -> dict:
    return {q.get("evaluator"): q["value"] for q in cell.get("quality", []) if q.get("metric") == "perplexity"}


def compare(a: dict, b: dict, rtol: float) -> tuple[list[str], dict]:
    """What differs between two cells, and counts for the summary."""
    diffs = []
    counts = {"generations": 0, "generations_equal": 0, "repetitions": 0, "max_ppl_rel": 0.0}
    sa, sb = a.get("status", {}).get("state"), b.get("status", {}).get("state")
    if sa != sb or sa != "ok":
        diffs.append(f"status {sa} vs {sb}")
    ga = {(g["prompt"], g["prompt_bytes"]): g for g in a.get("generations", [])}
    gb = {(g["prompt"], g["prompt_bytes"]): g for g in b.get("generations", [])}
    if set(ga) != set(gb):
        diffs.append(f"generated for different prompts: {sorted(ga)} vs {sorted(gb)}")
    for k in sorted(set(ga) & set(gb)):
        counts["generations"] += 1
        x, y = ga[k], gb[k]
        if x["text"] == y["text"] and x.get("masked_tokens") == y.get("masked_tokens"):
            counts["generations_equal"] += 1
        else:
            at = next((i for i, (p, q) in enumerate(zip(x["text"], y["text"])) if p != q),
                      min(len(x["text"]), len(y["text"])))
            diffs.append(f"prompt {k[0]}: continuations differ from byte {at} "
                         f"(masked {x.get('masked_tokens')} vs {y.get('masked_tokens')})")
    for i, (x, y) in enumerate(zip(a.get("repetitions", []), b.get("repetitions", []))):
        counts["repetitions"] += 1
        for field in ("prompt_indices", "forward_passes", "committed_per_step", "output_tokens", "output_bytes"):
            if x.get(field) != y.get(field):
                diffs.append(f"repetition {i}: {field} {x.get(field)} vs {y.get(field)}")
    pa, pb = perplexity(a), perplexity(b)
    for ev in sorted(set(pa) & set(pb), key=str):
        rel = abs(pa[ev] - pb[ev]) / max(abs(pa[ev]), 1e-300)
        counts["max_ppl_rel"] = max(counts["max_ppl_rel"], rel)
        if rel > rtol:
            diffs.append(f"perplexity ({ev}) {pa[ev]:.6g} vs {pb[ev]:.6g} (relative {rel:.2e} > {rtol:g})")
    return diffs, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--perplexity-rtol", type=float, default=1e-3)
    ap.add_argument("--report-only", action="store_true", help="count differences, exit 0")
    args = ap.parse_args()
    a, b = load(args.first), load(args.second)
    cells_b = {key_of(c): c for c in b.get("cells", [])}
    bad = 0
    total = {"generations": 0, "generations_equal": 0, "repetitions": 0, "max_ppl_rel": 0.0}
    for ca in a.get("cells", []):
        cb = cells_b.pop(key_of(ca), None)
        if cb is None:
            print(f"{label(key_of(ca)):<32} missing from {args.second}")
            bad += 1
            continue
        diffs, counts = compare(ca, cb, args.perplexity_rtol)
        for k in ("generations", "generations_equal", "repetitions"):
            total[k] += counts[k]
        total["max_ppl_rel"] = max(total["max_ppl_rel"], counts["max_ppl_rel"])
        print(f"{label(key_of(ca)):<32} {'same' if not diffs else 'DIFFERS: ' + '; '.join(diffs[:3])}")
        bad += bool(diffs)
    for cb in cells_b.values():
        print(f"{label(key_of(cb)):<32} missing from {args.first}")
        bad += 1
    print(f"summary: {len(a.get('cells', []))} cells, {bad} with a difference; continuations equal "
          f"{total['generations_equal']}/{total['generations']}; repetitions compared {total['repetitions']}; "
          f"largest perplexity difference {total['max_ppl_rel']:.2e} (relative)")
    if total["generations"] == 0:
        print("note: no continuations to compare (the grid needs a [quality] section)")
        bad += 1
    return 0 if args.report_only or bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
