#!/usr/bin/env python3
"""Profiles side by side: `dllm-bench bench-kernels --profile --json` and runner/bench/torch_reference.py
--profile outputs (any number, the first is the baseline), part by part, for the AR decode token and the LLaDA step.

    scripts/compare_profiles.py RUNNER.json TORCH-EAGER.json TORCH-SDPA.json

Prints per phase one row per part (the union of the parts, in the first file's order, then the others'): ms and
ops in each file, and the first's ms over each file's (the direction of `dllm-bench compare`, A / B: below 1 where
the first is faster; runner / PyTorch). A part a framework does not have (`sdpa` in the runner; `inputs` outside it)
shows `-`. A file that cannot be read (a run that failed or timed out) is named and left out. Standard library only.
"""

from __future__ import annotations

import json
import sys


def label(r: dict) -> str:
    return r.get("framework", "?")


def main(paths: list[str]) -> int:
    if len(paths) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    reports = []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                reports.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"{p}: cannot read a JSON report, left out: {e}", file=sys.stderr)
    if not reports:
        return 2
    for i, r in enumerate(reports):
        d, s = r.get("decode", {}), r.get("llada_step", {})
        print(f"[{i}] {label(r)} on {r.get('device', '?')}, {r.get('dtype', '?')}: copy "
              f"{r.get('copy_bytes_per_s', 0) / 1e9:.1f} GB/s, matmul {r.get('matmul_flops_per_s', 0) / 1e12:.1f} "
              f"TFLOP/s; AR decode token {d.get('ms', float('nan')):.3f} ms ({d.get('ratio_to_floor', float('nan')):.2f}x "
              f"the copy floor); LLaDA step {s.get('ms', float('nan')):.2f} ms "
              f"({100 * s.get('ratio_to_floor', float('nan')):.0f}% of the matmul rate)")
    for phase, key in (("AR decode token", "decode_profile"), ("LLaDA step", "llada_step_profile")):
        profiles = [r.get(key) for r in reports]
        if not any(profiles):
            continue
        names: list[str] = []
        for p in profiles:
            for part in (p or {}).get("parts", []):
                if part["part"] not in names:
                    names.append(part["part"])
        print(f"\n{phase} (ms per token / step; ops; ratio: [0] {label(reports[0])}'s ms over each's, below 1 where [0] "
              "is faster)")
        print("  " + " | ".join(f"[{i}] {label(r)} ({r.get('device', '?')}, {r.get('dtype', '?')})"
                                 for i, r in enumerate(reports)))
        head = f"  {'part':<12}" + "".join(f" {'[' + str(i) + '] ms':>11} {'ops':>5} {'ratio':>6}"
                                           for i in range(len(reports)))
        print(head)

        def cell(p: dict | None, name: str) -> dict | None:
            return next((x for x in (p or {}).get("parts", []) if x["part"] == name), None)

        for name in names + ["total"]:
            row = f"  {name:<12}"
            base = None
            for i, p in enumerate(profiles):
                if name == "total":
                    c = {"ms": p["profiled_ms"], "ops": p["ops"]} if p else None
                else:
                    c = cell(p, name)
                if c is None:
                    row += f" {'-':>11} {'-':>5} {'-':>6}"
                    continue
                if i == 0:
                    base = c["ms"]
                ratio = f"{base / c['ms']:.2f}" if base is not None and c["ms"] > 0 else "-"
                row += f" {c['ms']:>11.4f} {c['ops']:>5} {ratio:>6}"
            print(row)
        unprof = " | ".join(f"[{i}] {p['unprofiled_ms']:.4f} ms" for i, p in enumerate(profiles) if p)
        print(f"  unprofiled: {unprof}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
