#!/usr/bin/env python3
"""Writes a SYNTHETIC bundle of >= 10,000 cells for the explorer's speed benchmark (scripts/bench-explorer.sh).

Every number is generated (seeded), not measured; the provenance says so. Grid: LLaDA (low-confidence
remasking, one block of the 32 output tokens) at 20 K x 10 B x 50 N = 10,000 diffusion cells, plus 500 AR cells;
3 repetitions each, with per-step times, memory peaks and made-up quality values, about what a full study bundle
holds per cell. The bundle's embedded config is that grid, so that readers accept it (they refuse cells that
their bundle's own config does not have).

usage: make-synthetic.py FIXTURE OUT  (FIXTURE: a valid bundle to copy models and provenance from)
"""
import copy
import json
import random
import sys

src, out = sys.argv[1], sys.argv[2]
base = json.load(open(src))
rng = random.Random(0)
b = copy.deepcopy(base)
p = b["provenance"]
p["tool"] = "bench-explorer synthetic generator (generated numbers, not a measurement)"
p["device"]["name"] = "SYNTHETIC benchmark bundle (generated numbers, not a measurement)"
p["config_source"] = "explorer/bench/make-synthetic.py: synthetic 10,000-cell bundle for the speed benchmark"
ar_model = next(m["id"] for m in b["models"] if m["kind"] == "llama")
llada = next(m["id"] for m in b["models"] if m["kind"] == "llada")
STEPS = list(range(1, 17)) + [20, 24, 28, 32]
BATCH = list(range(1, 11))
SEQ = [64 * i for i in range(1, 51)]
N_OUT = 32
grid = p["config"]["grid"]
grid.update(seq_lengths=SEQ, batch_sizes=BATCH, steps=STEPS, output_tokens=N_OUT, block_length=N_OUT,
            remasking="low_confidence")
cells = []


def reps(e2e, bs, n_out, steps=None, prefill=None):
    out = []
    for j in range(3):
        t = e2e * (1 + rng.uniform(-0.03, 0.03))
        r = {"prompt_indices": list(range(bs)), "e2e_ms": round(t, 3), "output_tokens": bs * n_out,
             "output_bytes": bs * n_out * 4, "peak_allocated_bytes": int(16e9 + bs * n_out * 2e6) + j,
             "peak_reserved_bytes": int(18e9 + bs * n_out * 3e6)}
        if steps:
            # The steps are parts of the run: together a little under its e2e time.
            r["step_ms"] = [round(t / steps * (0.95 + rng.uniform(0.0, 0.04)), 4) for _ in range(steps)]
            r["forward_passes"] = steps
        if prefill:
            r["prefill_ms"] = round(prefill * (1 + rng.uniform(-0.03, 0.03)), 3)
        out.append(r)
    return out


for n in SEQ:
    n_out = N_OUT
    for bs in BATCH:
        e2e_ar = 15.0 * n_out * (1 + 0.05 * bs) + 0.25 * n  # the prefill (0.2 N ms) is a part of it
        cells.append({"key": {"model": ar_model, "sampler": "ar_greedy", "batch_size": bs, "seq_len": n,
                              "prompt_tokens": n - n_out, "output_tokens": n_out},
                      "status": {"state": "ok"}, "warmup_runs": 1,
                      "repetitions": reps(e2e_ar, bs, n_out, prefill=0.2 * n),
                      "quality": [{"metric": "perplexity", "direction": "lower_is_better", "value": 10.5}]})
        for sampler in ["llada_low_confidence"]:
            for k in STEPS:
                e2e = 0.9 * k * n * (1 + 0.1 * bs) / 4
                oom = bs * n > 28000
                cell = {"key": {"model": llada, "sampler": sampler, "steps": k, "batch_size": bs, "seq_len": n,
                                "prompt_tokens": n - n_out, "output_tokens": n_out, "block_length": n_out},
                        "warmup_runs": 1}
                if oom:
                    cell.update(status={"state": "oom", "message": "CUDA out of memory (synthetic)"}, repetitions=[])
                else:
                    cell.update(status={"state": "ok"}, repetitions=reps(e2e, bs, n_out, steps=k),
                                quality=[{"metric": "perplexity", "direction": "lower_is_better",
                                          "value": round(9.0 + 200.0 / k ** 1.5, 3)}])
                cells.append(cell)
b["cells"] = cells
# Rows of a batch of B are prompts 0..B-1: the prompt set must hold the largest B.
b["prompt_set"]["count"] = max(BATCH)
b["prompt_set"]["selection"] = f"first {max(BATCH)} (synthetic)"
b["provenance"]["config"]["prompts"]["count"] = max(BATCH)
json.dump(b, open(out, "w"), separators=(",", ":"))
print(f"{len(cells)} cells", file=sys.stderr)
