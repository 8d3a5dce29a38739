#!/usr/bin/env python3
"""Cell-by-cell comparison of two bundles: the dllm-bench runner and the HF transformers reference.

    jobs/compare_bundles.py RUNNER.json REFERENCE.json

Matches cells by their key (model, sampler, K, B, N, prompt/output tokens, block length) and prints, per cell:
the median L_e2e of each, the ratio reference / runner (above 1: the runner is faster), the median time per
token (AR: ITL = (L_e2e - prefill) / (N_out - 1)) or per diffusion step (LLaDA: L_e2e / K) of each with its
ratio, and the median peak memory of each (CUDA: peak allocated bytes; CPU: peak RSS). A value a bundle does
not have is shown as "-", never 0. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

# A cell's whole key: the block-cache series and the threshold series share K (or have none) with the reference's.
KEY_FIELDS = ("model", "sampler", "steps", "batch_size", "seq_len", "prompt_tokens", "output_tokens", "block_length",
              "cache", "threshold")


def load(path: str) -> dict:
    with open(path) as f:
        b = json.load(f)
    major = str(b.get("schema_version", "")).split(".")[0]
    if major != "1":
        sys.exit(f"{path}: schema_version {b.get('schema_version')!r}: this script reads major 1 "
                 "(run `dllm-bench validate` on it)")
    return b


def key_of(cell: dict) -> tuple:
    return tuple(cell["key"].get(f) for f in KEY_FIELDS)


def label(key: tuple) -> str:
    k = dict(zip(KEY_FIELDS, key))
    s = f"{k['model'].split('/')[-1]} N={k['seq_len']} B={k['batch_size']}"
    if k["steps"] is not None:
        s += f" K={k['steps']}"
    if k["cache"] is not None:
        s += f" cache={k['cache']}"
    if k["threshold"] is not None:
        s += f" threshold={k['threshold']}"
    return s


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def per_unit(cell: dict):
    """Median ITL (AR) or time per diffusion step (LLaDA), in ms."""
    n_out, k = cell["key"]["output_tokens"], cell["key"].get("steps")
    out = []
    for r in cell.get("repetitions", []):
        if k:
            out.append(r["e2e_ms"] / k)
        elif r.get("prefill_ms") is not None and n_out > 1:
            out.append((r["e2e_ms"] - r["prefill_ms"]) / (n_out - 1))
    return median(out)


def peak(cell: dict):
    reps = cell.get("repetitions", [])
    alloc = median([r.get("peak_allocated_bytes") for r in reps])
    return alloc if alloc is not None else median([r.get("peak_rss_bytes") for r in reps])


def summary(cell: dict | None):
    if cell is None:
        return None
    if cell["status"]["state"] != "ok":
        return {"state": cell["status"]["state"]}
    return {"state": "ok", "e2e": median([r["e2e_ms"] for r in cell["repetitions"]]), "unit": per_unit(cell),
            "peak": peak(cell)}


def ms(v):
    return "-" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def ratio(ref, run):
    return "-" if ref is None or run is None or run <= 0 else f"{ref / run:.2f}"


def mib(v):
    return "-" if v is None else f"{v / 2**20:.1f}"


def describe(b: dict) -> str:
    p = b["provenance"]
    d = p["device"]
    dev = " ".join(str(x) for x in (d.get("kind"), d.get("name")) if x)
    if d.get("threads"):
        dev += f", {d['threads']} threads"
    return f"{p['tool']} {p['tool_version']} ({p.get('attention', '?')}; {p['config']['run']['dtype']}; {dev})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runner", help="bundle written by dllm-bench run")
    ap.add_argument("reference", help="bundle written by jobs/hf_reference.py")
    args = ap.parse_args()
    run_b, ref_b = load(args.runner), load(args.reference)
    print(f"runner:    {describe(run_b)}")
    print(f"reference: {describe(ref_b)}")
    shapes = {m["id"]: m["shape"] for m in run_b["models"]}
    for m in ref_b["models"]:
        if m["id"] in shapes and shapes[m["id"]] != m["shape"]:
            print(f"warning: {m['id']}: the shapes differ (runner {shapes[m['id']]}, reference {m['shape']}): "
                  "the cells do not measure the same model")
    if run_b["provenance"]["device"].get("kind") != ref_b["provenance"]["device"].get("kind"):
        print("warning: the bundles ran on different kinds of device")
    run_cells = {key_of(c): c for c in run_b["cells"]}
    ref_cells = {key_of(c): c for c in ref_b["cells"]}
    keys = [k for k in run_cells if k in ref_cells]
    mem_unit = "peak alloc" if any(
        r.get("peak_allocated_bytes") is not None for c in run_b["cells"] + ref_b["cells"] for r in c.get("repetitions", [])
    ) else "peak RSS"
    print()
    header = ["cell", "runner e2e ms", "ref e2e ms", "ref/runner", "runner ITL/step ms", "ref ITL/step ms",
              "ref/runner", f"runner {mem_unit} MiB", f"ref {mem_unit} MiB"]
    rows = []
    for k in keys:
        a, b = summary(run_cells[k]), summary(ref_cells[k])
        if a["state"] != "ok" or b["state"] != "ok":
            rows.append([label(k), a["state"] if a["state"] != "ok" else ms(a.get("e2e")),
                         b["state"] if b["state"] != "ok" else ms(b.get("e2e")), "-", "-", "-", "-", "-", "-"])
            continue
        rows.append([label(k), ms(a["e2e"]), ms(b["e2e"]), ratio(b["e2e"], a["e2e"]), ms(a["unit"]), ms(b["unit"]),
                     ratio(b["unit"], a["unit"]), mib(a["peak"]), mib(b["peak"])])
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    only_run = [label(k) for k in run_cells if k not in ref_cells]
    only_ref = [label(k) for k in ref_cells if k not in run_cells]
    if only_run:
        print(f"\nonly in the runner's bundle: {', '.join(only_run)}")
    if only_ref:
        print(f"\nonly in the reference's bundle: {', '.join(only_ref)}")
    if not keys:
        print("\nno cell in common: compare bundles of the same config and overrides")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
