#!/usr/bin/env python3
"""The study's own stack (PyTorch + HF transformers) on the cells of a dllm-bench grid, written as a bundle.

Reads the same grid config TOML as `dllm-bench run`, builds both models from config with random weights
(Llama-3 as `LlamaForCausalLM`; LLaDA as the same transformer with bidirectional attention, full MHA and LLaDA's
sizes), measures every cell as the runner defines it (README, "Definitions") and writes a bundle of the current
schema (1.5), so that `dllm-bench serve` / the explorer can overlay "dllm-bench runner" and "HF transformers"
cell by cell, and `jobs/compare_bundles.py` can print them side by side.

Only torch, transformers and the standard library. See jobs/README.md ("HF transformers reference").

The config is checked and resolved as `dllm-bench plan` does (the same fields, types, defaults, overrides and
rules; exit 2 where the runner refuses it), and `--plan` prints the result as JSON without importing torch.
runner/tests/hf_reference.rs holds this script to the runner on the CPU: the same resolution for every config of
config/, and bundles that validate and equal a `dllm-bench run` of the same tiny config cell for cell.

What is measured, per cell (W warm-ups, then R repetitions, each stored raw):
- AR (Llama): greedy decoding with HF's DynamicCache, exactly N_out tokens (EOS is an ordinary token with
  `eos = "ignore"`; its logit is -inf with `eos = "suppress"`): one prefill pass (logits for the last position
  only, as HF generate) that yields the first token, then N_out - 1 single-token passes. prefill_ms = the prompt
  pass and its argmax; e2e_ms = from the prompt ids on the device to the last token. forward_passes = N_out.
- LLaDA: the reference sampler (ML-GSAI/LLaDA generate.py): prompt + N_out masks, N_out / block_length blocks,
  K / blocks steps per block, each step one full bidirectional forward; the transfer schedule floor(M / spb) plus
  one for the first M mod spb steps; low-confidence (softmax probability of the argmax token, in the precision
  `grid.confidence` names: float32 by default as the runner, float64 as generate.py, or the logits' dtype) or
  random remasking (Gumbel noise and random ranks from torch's seeded generator whatever `grid.gumbel_noise`
  says: neither of the runner's streams); top-k per row over the masked positions up to the current block's end
  (a position that took the mask id is ranked again); no early stop. step_ms per step (forward + commit),
  first_block_ms, e2e_ms, forward_passes = K. Threshold series (`grid.samplers` "threshold"):
  each step commits every masked position of the block whose confidence is at least the threshold, at least the
  most confident one, until the block is full (forward_passes measured; committed_per_step recorded). The block
  KV cache series ("prefix", "dual") are not implemented here and refused. By default the logits and the float64 softmax
  cover every position, as generate.py does (`--llada-logits full`); `--llada-logits block` computes the LM head
  and the confidences for the positions ranked only (the current block, from the first still-masked position
  before it), the runner's work.
- Timing: CUDA events on the current stream (one per boundary, read after a final synchronize: no host sync in
  the timed region beyond what the work itself does); on the CPU time.perf_counter.
- Memory: CUDA: torch.cuda.reset_peak_memory_stats before each measured run, max_memory_allocated /
  max_memory_reserved after it (weights included, as the runner's pool peaks), device-wide used memory from
  torch.cuda.mem_get_info. CPU: the process's peak RSS (VmHWM, reset through /proc/self/clear_refs), else absent.
- Out of memory: the cell is recorded as `oom` with B, N and K in the message; the grid goes on.

Deliberate differences from the runner (none changes what is timed):
- Prompts are seeded uniform token ids (BOS first, then prompt_tokens - 1 ids below the special ids), not text:
  quality is absent. Repetition r of a batch of B uses prompts r*B .. r*B + B - 1 (mod the set's size), as the
  runner. output_bytes decodes the generated ids with the model's tokenizer when the HF cache has the model's
  snapshot (the runner writes synthetic ones there); without one the script refuses to run (exit 2), since a 0
  would be a false figure.
- Weights: N(0, max(0.02, 1/sqrt(hidden))), norm weights 1 + N(0, 0.05), seeded (the runner's distribution,
  not its bytes: greedy tokens differ from the runner's).
- HF llama computes RoPE in f32 and rotates in the model dtype; LLaDA's own code (rope_full_precision) rotates
  in f32. The top-k breaks ties towards the lower position (stable sort), as the runner.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import inspect
import json
import math
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        sys.exit("error: needs Python 3.11+ (tomllib) to read the grid config")

SCHEMA_VERSION = "1.5"
TOOL = "hf-transformers-reference"

# Synthetic presets of runner/src/synth/mod.rs (SynthSpec::resolve):
# (hidden, layers, heads, kv_heads, intermediate, vocab, max_positions)
PRESETS = {
    ("tiny", "llama"): (64, 2, 4, 2, 224, 512, 1024),
    ("tiny", "llada"): (64, 2, 4, 4, 192, 512, 1024),
    ("small", "llama"): (256, 4, 8, 2, 896, 1024, 2048),
    ("small", "llada"): (256, 4, 8, 8, 768, 1024, 2048),
    ("real", "llama"): (4096, 32, 32, 8, 14336, 128_256, 8192),
    ("real", "llada"): (4096, 32, 32, 32, 12288, 126_464, 4096),
    ("tiny", "dream"): (64, 2, 4, 2, 224, 512, 1024),
    ("small", "dream"): (256, 4, 8, 2, 896, 1024, 2048),
    ("real", "dream"): (3584, 28, 28, 4, 18944, 152_064, 131_072),
}
# Special ids of the real checkpoints (shared/reference/models.md).
REAL_SPECIAL = {
    "llama": {"bos": 128000, "eos": 128001, "stop": [128001, 128009]},
    "llada": {"bos": 126080, "eos": 126081, "mask": 126336, "stop": [126081, 126348]},
}
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


class InputError(Exception):
    """Bad input: exit 2, as the runner."""


# ---------------------------------------------------------------------------------------------------------------
# Config: the runner's GridConfig, resolved the same way (defaults, preset count, overrides, validation)


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from e
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: list positive integers, e.g. 1,4")
    return values


# The runner's config schema (schema/src/grid.rs: serde with deny_unknown_fields): per table, each field's type
# and whether it is required. An unknown field (a typo), a missing required one or a wrong type is refused, as
# the runner refuses it, instead of running another grid than the runner would.
U32_MAX, U64_MAX = 2**32 - 1, 2**64 - 1
SYNTHETIC_FIELDS = {"preset": (("tiny", "small", "real"), True), "seed": ("u64", False),
                    "dtype": (tuple(DTYPE_BYTES), False), "shards": ("u32", False), "layers": ("u32", False),
                    "hidden": ("u32", False), "layout": (("llama3", "llama3.1", "llama3.2", "qwen2"), False),
                    "chat_template": ("bool", False)}
SCHEMA = {
    "run": {"name": ("str", True), "device": ("str", False), "dtype": (tuple(DTYPE_BYTES), True),
            "warmup": ("u32", True), "repetitions": ("u32", True), "seed": ("u64", False),
            "attention_f32": ("bool", False)},
    "prompts": {"source": (("embedded", "wikitext", "file"), True), "count": ("u32", False),
                "preset": (("small", "medium", "large"), False), "path": ("str", False), "seed": ("u64", False),
                "dataset": ("str", False), "revision": ("str", False), "min_chars": ("u32", False),
                "chat_template": ("bool", False)},
    "grid": {"seq_lengths": ("u32s", True), "batch_sizes": ("u32s", True), "steps": ("u32s", False),
             "samplers": ("samplers", False), "thresholds": ("f64s", False),
             "dream_algs": ("dream_algs", False), "top_p": ("f64", False),
             "output_tokens": ("u32", False), "prompt_fraction": ("f64", False), "block_length": ("u32", False),
             "remasking": (("low_confidence", "random"), False), "temperature": ("f64", False),
             "confidence": (("f32", "f64", "logits"), False), "gumbel_noise": (("device", "host"), False),
             "eos": (("ignore", "suppress"), False)},
    "model": {"kind": (("llama", "llada", "dream"), True), "id": ("str", True), "revision": ("str", False),
              "synthetic": (SYNTHETIC_FIELDS, False)},
    "quality": {"evaluators": ("evaluators", False), "parity_metric": ("str", False),
                "bootstrap_resamples": ("u32", False), "parity_search": ("bool", False)},
    "evaluator": {"id": ("str", True), "revision": ("str", False), "synthetic": (SYNTHETIC_FIELDS, False)},
}
PROMPT_PRESETS = {"small": 8, "medium": 32, "large": 128}
# schema::grid::SamplerVariant: name -> (block cache, threshold-driven)
SAMPLER_SERIES = {"reference": (None, False), "prefix": ("prefix", False), "dual": ("dual", False),
                  "threshold": (None, True), "prefix+threshold": ("prefix", True), "dual+threshold": ("dual", True)}
# schema::key::DreamAlg: Dream's `alg` -> the cell key's sampler
DREAM_ALGS = {"origin": "dream_origin", "maskgit_plus": "dream_maskgit_plus", "topk_margin": "dream_topk_margin",
              "entropy": "dream_entropy"}
# schema::grid::limits
LIMITS = {"seq_len": 131_072, "batch_size": 4096, "steps_per_output_token": 16, "warmup": 1000,
          "repetitions": 10_000, "prompts": 1_000_000, "bootstrap_resamples": 1_000_000, "temperature": 100.0,
          "run_name_chars": 100, "id_chars": 200, "synth_layers": 1024, "synth_hidden": 65_536,
          "synth_shards": 1024}
TEXT_METRICS = ("unigram_entropy", "distinct_1", "distinct_2", "rouge_l_f1", "token_f1")


def series_list(text: str) -> list[str]:
    out = text.split(",")
    bad = [v for v in out if v not in SAMPLER_SERIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown sampler series {bad[0]!r}; use one of {', '.join(SAMPLER_SERIES)}")
    return out


def float_list(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from e


def rust_float(v: float) -> str:
    """A float as Rust's Display writes it (0.5, 1, 1e-7 as 0.0000001)."""
    r = repr(float(v))
    if "e" in r or "E" in r:
        r = format(v, "f").rstrip("0").rstrip(".") if v != 0 else "0"
    return r[:-2] if r.endswith(".0") else r


def is_uint(v, most: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= most


def check_fields(table, spec: dict, where: str, label: str) -> None:
    """The table's fields against `spec` (name -> (type, required)); raises InputError naming the field."""
    def fail(problem: str):
        raise InputError(f"{label}: {problem}\n  fix: compare with config/experiments.toml, which documents every "
                         "field")

    if not isinstance(table, dict):
        fail(f"`{where}` is not a table")
    for key in table:
        if key not in spec:
            fail(f"unknown field `{where + '.' if where else ''}{key}`, expected one of "
                 + ", ".join(f"`{k}`" for k in spec))
    for key, (kind, required) in spec.items():
        field = f"{where}.{key}" if where else key
        if key not in table:
            if required:
                fail(f"missing field `{field}`")
            continue
        v = table[key]
        if isinstance(kind, dict):
            check_fields(v, kind, field, label)
            continue
        if isinstance(kind, tuple):
            ok, want = isinstance(v, str) and v in kind, "one of " + ", ".join(f'"{k}"' for k in kind)
        elif kind == "u32":
            ok, want = is_uint(v, U32_MAX), "an integer from 0 to 4294967295"
        elif kind == "u64":
            ok, want = is_uint(v, U64_MAX), "a non-negative integer"
        elif kind == "u32s":
            ok, want = isinstance(v, list) and all(is_uint(x, U32_MAX) for x in v), "a list of non-negative integers"
        elif kind == "f64":
            ok, want = isinstance(v, (int, float)) and not isinstance(v, bool), "a number"
        elif kind == "f64s":
            ok = isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            want = "a list of numbers"
        elif kind == "samplers":
            ok = isinstance(v, list) and all(isinstance(x, str) and x in SAMPLER_SERIES for x in v)
            want = "a list of " + ", ".join(f'"{k}"' for k in SAMPLER_SERIES)
        elif kind == "dream_algs":
            ok = isinstance(v, list) and all(isinstance(x, str) and x in DREAM_ALGS for x in v)
            want = "a list of " + ", ".join(f'"{k}"' for k in DREAM_ALGS)
        elif kind == "bool":
            ok, want = isinstance(v, bool), "true or false"
        elif kind == "table":
            ok, want = isinstance(v, dict), f"a table ([{field}])"
        elif kind == "tables":
            ok, want = isinstance(v, list), f"an array of tables ([[{field}]])"
        elif kind == "evaluators":
            ok, want = isinstance(v, list), "an array of tables ([[quality.evaluators]])"
            for i, e in enumerate(v if ok else []):
                check_fields(e, SCHEMA["evaluator"], f"{field}[{i}]", label)
        else:
            ok, want = isinstance(v, str), "a string"
        if not ok:
            fail(f"field `{field}` = {v!r}: expected {want}")


def check_structure(raw: dict, label: str) -> None:
    """What the runner's TOML parsing refuses: unknown, missing and mistyped fields."""
    top = {"run": ("table", True), "prompts": ("table", True), "grid": ("table", True), "models": ("tables", True),
           "quality": ("table", False)}
    check_fields(raw, top, "", label)
    for name in ("run", "prompts", "grid", "quality"):
        if name in raw:
            check_fields(raw[name], SCHEMA[name], name, label)
    for i, m in enumerate(raw["models"]):
        check_fields(m, SCHEMA["model"], f"models[{i}]", label)


def resolve_config(args) -> tuple[dict, str]:
    """GridConfig::from_toml, then plan::resolve's overrides: the same checks, in the same order."""
    path = Path(args.config)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise InputError(f"cannot read the config file {path}: {e}; fix: check the path") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: {e}") from e
    label = str(args.config)
    check_structure(raw, label)
    run, prompts, grid = dict(raw["run"]), dict(raw["prompts"]), dict(raw["grid"])
    models = [dict(m) for m in raw["models"]]
    # Defaults of the runner's serde types (the fields it always writes back).
    run.setdefault("device", "cpu")
    run.setdefault("seed", 0)
    prompts.setdefault("count", 0)
    prompts.setdefault("seed", 0)
    # Written back only when on (serde's skip_serializing_if).
    if not prompts.get("chat_template", False):
        prompts.pop("chat_template", None)
    grid.setdefault("remasking", "low_confidence")
    grid.setdefault("temperature", 0.0)
    grid.setdefault("eos", "ignore")
    grid.setdefault("confidence", "f32")
    grid.setdefault("gumbel_noise", "device")
    grid.setdefault("steps", [])
    grid.setdefault("samplers", ["reference"])
    grid.setdefault("thresholds", [])
    grid.setdefault("dream_algs", ["entropy"])
    for m in models:
        m.setdefault("revision", "main")
        if "synthetic" in m:
            m["synthetic"] = dict(m["synthetic"])
            m["synthetic"].setdefault("seed", 0)
    quality = raw.get("quality")
    config = {"run": run, "prompts": prompts, "grid": grid, "models": models}
    validate_config(config, quality, label)
    # A preset is recorded as the count it stands for.
    if not prompts["count"]:
        prompts["count"] = PROMPT_PRESETS[prompts["preset"]]

    overrides = []
    list_text = lambda v: ",".join(map(str, v))  # noqa: E731
    if args.steps:
        overrides.append(f"--steps {list_text(args.steps)}")
        grid["steps"] = args.steps
    if args.samplers:
        overrides.append(f"--samplers {','.join(args.samplers)}")
        grid["samplers"] = args.samplers
        # As plan::resolve: threshold series alone run no K; K-driven ones alone no thresholds.
        if all(SAMPLER_SERIES[v][1] for v in args.samplers) and not args.steps:
            grid["steps"] = []
        if not any(SAMPLER_SERIES[v][1] for v in args.samplers) and not args.thresholds:
            grid["thresholds"] = []
    if args.thresholds:
        overrides.append(f"--thresholds {','.join(rust_float(t) for t in args.thresholds)}")
        grid["thresholds"] = args.thresholds
    if args.batch_size:
        overrides.append(f"--batch-size {list_text(args.batch_size)}")
        grid["batch_sizes"] = args.batch_size
    if args.seq_len:
        overrides.append(f"--seq-len {list_text(args.seq_len)}")
        grid["seq_lengths"] = args.seq_len
    if args.max_prompts is not None:
        overrides.append(f"--max-prompts {args.max_prompts}")
        if args.max_prompts < prompts["count"]:
            # A smaller set than the preset's: the count now says the size (the preset no longer applies).
            prompts["count"] = args.max_prompts
            prompts.pop("preset", None)
    if args.device:
        overrides.append(f"--device {args.device}")
        run["device"] = args.device
    if args.dtype:
        overrides.append(f"--dtype {args.dtype}")
        run["dtype"] = args.dtype
    if args.warmup is not None:
        overrides.append(f"--warmup {args.warmup}")
        run["warmup"] = args.warmup
    if args.repetitions is not None:
        overrides.append(f"--repetitions {args.repetitions}")
        run["repetitions"] = args.repetitions
    source = " ".join([label, *overrides])
    # Errors now name the overrides too, since they may be the cause.
    check_fields(run, SCHEMA["run"], "run", source)
    check_fields(prompts, SCHEMA["prompts"], "prompts", source)
    validate_config(config, quality, source)
    if run.get("attention_f32"):
        raise InputError(f"{source}: field `run.attention_f32`: the runner upcasts q, k and v to f32 for the "
                         "attention; HF transformers' attention has no such option, so the reference would measure "
                         "another computation\n  fix: compare the two on a config without run.attention_f32")
    # The reference measures no quality: the [quality] table is left out of the stored config (a bundle whose
    # config asks for quality but has none would read as a failed quality run).
    return config, source


def split(config: dict, n: int):
    """GridConfig::split: (prompt, output) tokens of N, or None when either would be empty."""
    g = config["grid"]
    if g.get("output_tokens") is not None:
        prompt, out = n - g["output_tokens"], g["output_tokens"]
    else:
        # Rust's f64::round: half away from zero (the values are positive). x - floor(x) is exact.
        x = n * g["prompt_fraction"]
        prompt = math.floor(x)
        prompt += 1 if x - prompt >= 0.5 else 0
        out = n - prompt
    return (prompt, out) if prompt > 0 and out > 0 else None


def hub_id_problem(id_: str) -> str | None:
    if not id_:
        return "the id is empty"
    if len(id_) > LIMITS["id_chars"]:
        return f"the id has {len(id_)} characters, more than {LIMITS['id_chars']}"
    bad = next((c for c in id_ if not ((c.isascii() and c.isalnum()) or c in "-_./")), None)
    if bad is not None:
        return f"{id_!r} contains {bad!r}; a hub id has only letters, digits, '-', '_', '.' and one '/'"
    parts = id_.split("/")
    if len(parts) > 2 or any(not p or p in (".", "..") or p.startswith(".") for p in parts):
        return f"{id_!r} is not ORG/NAME"
    return None


def revision_problem(rev: str) -> str | None:
    if not rev.strip():
        return "the revision is empty"
    if len(rev) > LIMITS["id_chars"]:
        return f"the revision has {len(rev)} characters, more than {LIMITS['id_chars']}"
    bad = next((c for c in rev if not c.isprintable() or c.isspace() or c in '\\:*?"<>|'), None)
    if bad is not None:
        return f"{rev!r} contains {bad!r}, which no branch, tag or commit has"
    if any(p in ("", ".", "..") for p in rev.split("/")):
        return f"{rev!r} has an empty, '.' or '..' path component"
    return None


def synthetic_problem(s: dict, kind: str) -> str | None:
    """plan::check_synthetic (SynthSpec::check): the runner can build this checkpoint."""
    for name, limit in (("shards", "synth_shards"), ("layers", "synth_layers"), ("hidden", "synth_hidden")):
        v = s.get(name)
        if v == 0:
            return f"`{name}`: 0 is not allowed"
        if v is not None and v > LIMITS[limit]:
            return f"`{name}`: {v} is more than the limit {LIMITS[limit]}"
    h, layers, heads = PRESETS[(s["preset"], kind)][:3]
    h, layers = s.get("hidden", h), s.get("layers", layers)
    if h % heads or (h // heads) % 2:
        return f"hidden {h} is not {heads} heads of an even head size"
    # Dream's (Qwen2's) q, k and v projections have biases: three more tensors per layer.
    tensors = 3 + (12 if kind == "dream" else 9) * layers
    shards = s.get("shards", 1 if s["preset"] != "real" else (6 if kind == "llada" else 4))
    if shards > tensors:
        return f"{shards} shards for the {tensors} tensors of this model: use 1 to {tensors}"
    return None


def validate_config(config: dict, quality: dict | None, source: str) -> None:
    """GridConfig::validate and plan::check_synthetic: the rules the runner refuses a config by (exit 2)."""
    def bad(field, problem, fix="compare with config/experiments.toml"):
        raise InputError(f"{source}: field `{field}`: {problem}\n  fix: {fix}")

    run, p, g = config["run"], config["prompts"], config["grid"]
    name = run["name"]
    if not name or name.startswith(".") or not all((c.isascii() and c.isalnum()) or c in "-_." for c in name):
        bad("run.name", f"{name!r} is not a usable file-name prefix", "use letters, digits, '-', '_' or '.'")
    if len(name) > LIMITS["run_name_chars"]:
        bad("run.name", f"{len(name)} characters, more than {LIMITS['run_name_chars']}", "use a shorter name")
    dev = run["device"]
    if not (dev in ("cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isascii() and dev[5:].isdigit())):
        bad("run.device", f"{dev!r} is not a device", 'use "cpu", "cuda" or "cuda:N"')
    if run["repetitions"] < 1:
        bad("run.repetitions", "0 measured runs would measure nothing", "set repetitions to 1 or more")
    for field, limit in (("repetitions", "repetitions"), ("warmup", "warmup")):
        if run[field] > LIMITS[limit]:
            bad(f"run.{field}", f"{run[field]} is more than the limit {LIMITS[limit]}", "use a smaller value")
    count = p["count"] or PROMPT_PRESETS.get(p.get("preset"), 0)
    if count > LIMITS["prompts"]:
        bad("prompts.count", f"{count} prompts, more than the limit {LIMITS['prompts']}", "use a smaller count")
    if count == 0:
        bad("prompts.count", "no prompts: neither count (1 or more) nor preset is set", "set preset or count")
    if p["count"] and p.get("preset") and p["count"] != PROMPT_PRESETS[p["preset"]]:
        bad("prompts.preset", f"count = {p['count']} and preset = {p['preset']} are both set", "keep one of them")
    if p["source"] == "file" and "path" not in p:
        bad("prompts.path", 'source = "file" needs a path', 'set path = "prompts.jsonl"')
    if p["source"] != "file" and "path" in p:
        bad("prompts.path", 'a path is only read with source = "file"', 'remove path, or set source = "file"')
    if p["source"] != "wikitext":
        for field in ("dataset", "revision", "min_chars"):
            if field in p:
                bad(f"prompts.{field}", 'only used with source = "wikitext"', 'remove it, or set source = "wikitext"')
        if p.get("seed", 0) != 0:
            bad("prompts.seed", "only the Wikitext selection is seeded", 'remove seed, or set source = "wikitext"')
    dataset = p.get("dataset", "Salesforce/wikitext")
    if dataset.count("/") > 1 or any(not s for s in dataset.split("/")) or any(c.isspace() for c in dataset):
        bad("prompts.dataset", f"{dataset!r} is not a hub dataset id", 'use ORG/NAME, e.g. "Salesforce/wikitext"')
    if not p.get("revision", "main").strip():
        bad("prompts.revision", "empty revision", 'use a branch, tag or commit, e.g. "main"')
    if p.get("min_chars") == 0:
        bad("prompts.min_chars", "0 would admit empty documents", "use e.g. 6000 (the default)")
    for field, limit in (("seq_lengths", "seq_len"), ("batch_sizes", "batch_size")):
        values = g[field]
        if not values:
            bad(f"grid.{field}", "the list is empty", "list at least one value")
        for i, v in enumerate(values):
            if v == 0:
                bad(f"grid.{field}[{i}]", "0 is not allowed", "use values of 1 or more")
            if v > LIMITS[limit]:
                bad(f"grid.{field}[{i}]", f"{v} is more than the limit {LIMITS[limit]}", "use smaller values")
    for field in ("seq_lengths", "batch_sizes", "steps"):
        values = g[field]
        dup = next((i for i, v in enumerate(values) if v in values[:i]), None)
        if dup is not None:
            bad(f"grid.{field}[{dup}]", f"{values[dup]} is listed twice (two cells would have one key)",
                "list each value once")
    if (g.get("output_tokens") is None) == (g.get("prompt_fraction") is None):
        bad("grid.output_tokens", "exactly one of output_tokens and prompt_fraction must be set", "set one")
    if g.get("output_tokens") == 0:
        bad("grid.output_tokens", "0 tokens: every cell generates at least one", "set a positive number")
    if g.get("prompt_fraction") is not None and not 0.0 < g["prompt_fraction"] < 1.0:
        bad("grid.prompt_fraction", f"{g['prompt_fraction']} is not strictly between 0 and 1", "use e.g. 0.5")
    if not 0.0 <= g["temperature"] <= LIMITS["temperature"]:
        bad("grid.temperature", f"{g['temperature']} is not a temperature", "use 0 (greedy) or a small value")
    models = config["models"]
    if not models:
        bad("models", "no models", 'add [[models]] tables with kind = "llama" or "llada" and an id')
    for i, m in enumerate(models):
        if (problem := hub_id_problem(m["id"])) is not None:
            bad(f"models[{i}].id", problem, 'use a hub id such as "GSAI-ML/LLaDA-8B-Base"')
        if (problem := revision_problem(m["revision"])) is not None:
            bad(f"models[{i}].revision", problem, 'use a branch, tag or commit, e.g. "main"')
        if any(o["id"] == m["id"] for o in models[:i]):
            bad(f"models[{i}].id", f"{m['id']} is listed twice", "list each model once")
        if "synthetic" in m and (problem := synthetic_problem(m["synthetic"], m["kind"])) is not None:
            bad(f"models[{i}].synthetic", f"the runner cannot build this checkpoint: {problem}",
                "remove hidden, layers and shards to use the preset's shapes")
    if quality is not None:
        evaluators = quality.get("evaluators", [])
        for i, e in enumerate(evaluators):
            field = f"quality.evaluators[{i}]"
            same = next((m for m in models if m["id"] == e["id"]), None)
            if same is not None and same["kind"] != "llama":
                bad(f"{field}.id", f"{e['id']} is a {same['kind']} model; an evaluator scores text left to right",
                    "name a Llama-layout checkpoint")
            if same is not None and ("synthetic" in e or e.get("revision", same["revision"]) != same["revision"]):
                bad(field, f"{e['id']} is also a measured model; it cannot have its own revision or weights",
                    "give only the id to reuse the measured model, or use another id")
            if (problem := hub_id_problem(e["id"])) is not None:
                bad(f"{field}.id", problem, 'use a hub id such as "meta-llama/Meta-Llama-3-8B"')
            if "revision" in e and (problem := revision_problem(e["revision"])) is not None:
                bad(f"{field}.revision", problem, 'use a branch, tag or commit, e.g. "main"')
            if "synthetic" in e and (problem := synthetic_problem(e["synthetic"], "llama")) is not None:
                bad(f"{field}.synthetic", f"the runner cannot build this checkpoint: {problem}",
                    "remove hidden, layers and shards to use the preset's shapes")
            if any(o["id"] == e["id"] for o in evaluators[:i]):
                bad(f"{field}.id", f"{e['id']} is listed twice", "list it once")
        metric = quality.get("parity_metric", "perplexity")
        if metric == "perplexity" and not evaluators:
            bad("quality.parity_metric", "perplexity needs an evaluator, and quality.evaluators is empty",
                'add [[quality.evaluators]], or use parity_metric = "rouge_l_f1"')
        if metric != "perplexity" and metric not in TEXT_METRICS:
            bad("quality.parity_metric", f"unknown metric {metric!r}", f"use perplexity or one of {TEXT_METRICS}")
        resamples = quality.get("bootstrap_resamples", 1000)
        if not 0 < resamples <= LIMITS["bootstrap_resamples"]:
            bad("quality.bootstrap_resamples", f"{resamples} resamples", "use 1000 (the default)")
    has_llada = any(m["kind"] == "llada" for m in models)
    has_dream = any(m["kind"] == "dream" for m in models)
    algs = g["dream_algs"]
    if not algs:
        bad("grid.dream_algs", "no Dream decoding rule", 'list at least one, e.g. ["entropy"]')
    if not has_dream and algs != ["entropy"]:
        bad("grid.dream_algs", "Dream decoding rules apply to Dream models only, and the grid has none",
            "remove dream_algs, or add a Dream model to [[models]]")
    if not has_llada and not has_dream and g["steps"]:
        bad("grid.steps", "diffusion steps drive LLaDA and Dream models only, and the grid has neither",
            "remove steps (and --steps), or add a diffusion model to [[models]]")
    dup = next((j for j in range(1, len(algs)) if algs[j] in algs[:j]), None)
    if dup is not None:
        bad(f"grid.dream_algs[{dup}]", f"{algs[dup]} is listed twice", "list each rule once")
    if "top_p" in g and not 0 < g["top_p"] <= 1:
        bad("grid.top_p", f"{g['top_p']} is not in (0, 1]", "use e.g. 0.95, or remove it")
    if has_dream and not g["steps"]:
        bad("grid.steps", "a Dream model needs diffusion steps", "list steps, e.g. [32, 64, 128]")
    series = g["samplers"]
    if not series:
        bad("grid.samplers", "no sampler series", 'list at least one, e.g. ["reference"]')
    dup = next((j for j in range(1, len(series)) if series[j] in series[:j]), None)
    if dup is not None:
        bad(f"grid.samplers[{dup}]", f"{series[dup]} is listed twice", "list each series once")
    if not has_llada and series != ["reference"]:
        bad("grid.samplers", "sampler series apply to LLaDA models only, and the grid has none",
            "remove samplers (and --samplers), or add a LLaDA model to [[models]]")
    k_driven = any(not SAMPLER_SERIES[v][1] for v in series)
    thresholded = any(SAMPLER_SERIES[v][1] for v in series)
    if has_llada and k_driven and not g["steps"]:
        bad("grid.steps", "a LLaDA model needs diffusion steps", "list steps, e.g. [32, 64, 128]")
    if has_llada and not has_dream and not k_driven and g["steps"]:
        bad("grid.steps", "only threshold series are listed in grid.samplers: steps would drive nothing",
            "remove steps, or add a K-driven series to samplers")
    if has_llada and thresholded and not g["thresholds"]:
        bad("grid.thresholds", "a threshold series is listed in grid.samplers but no threshold",
            "list thresholds, e.g. [0.9, 0.7, 0.5]")
    if not thresholded and g["thresholds"]:
        bad("grid.thresholds", "thresholds drive only the threshold series, and grid.samplers lists none",
            'add "threshold" or "prefix+threshold" to samplers, or remove thresholds')
    for j, t in enumerate(g["thresholds"]):
        if not (math.isfinite(t) and t >= 0):
            bad(f"grid.thresholds[{j}]", f"{t} is not a finite number >= 0", "use a confidence in [0, 1]")
        if any(u == t for u in g["thresholds"][:j]):
            bad(f"grid.thresholds[{j}]", f"{t} is listed twice", "list each once")
    for i, n in enumerate(g["seq_lengths"]):
        s = split(config, n)
        if s is None:
            bad(f"grid.seq_lengths[{i}]", f"N = {n} leaves no prompt or no output tokens", "use larger N")
        if not has_llada and not has_dream:
            continue
        # Dream generates its whole output as one block.
        block = g.get("block_length", s[1]) if has_llada else s[1]
        if block == 0 or s[1] % block:
            bad("grid.block_length", f"{block} does not divide the {s[1]} output tokens of N = {n}", "change it")
        blocks = s[1] // block
        most = s[1] * LIMITS["steps_per_output_token"]
        for j, k in enumerate(g["steps"]):
            if k > most:
                bad(f"grid.steps[{j}]", f"{k} steps for {s[1]} output tokens at N = {n}: more than "
                    f"{LIMITS['steps_per_output_token']} steps per token", f"use at most {most} steps")
        for j, k in enumerate(g["steps"]):
            if k <= 0 or k % blocks:
                bad(f"grid.steps[{j}]", f"{k} steps is not a positive multiple of the {blocks} blocks at N = {n}",
                    f"use multiples of {blocks}")


def cells(config: dict) -> list[dict]:
    """GridConfig::cells: per model, per N, per B, per series, per K (or threshold); the same CellKey fields as the
    runner."""
    g, out = config["grid"], []
    for m in config["models"]:
        for n in g["seq_lengths"]:
            s = split(config, n)
            if s is None:
                continue
            for b in g["batch_sizes"]:
                base = {"model": m["id"], "batch_size": b, "seq_len": n, "prompt_tokens": s[0], "output_tokens": s[1]}
                if m["kind"] == "llama":
                    out.append({"model": m["id"], "sampler": "ar_greedy", **{k: v for k, v in base.items() if k != "model"}})
                elif m["kind"] == "dream":
                    rest = {kk: v for kk, v in base.items() if kk != "model"}
                    for alg in g["dream_algs"]:
                        for k in g["steps"]:
                            out.append({"model": m["id"], "sampler": DREAM_ALGS[alg], "steps": k, **rest,
                                        "block_length": s[1]})
                else:
                    sampler = "llada_low_confidence" if g["remasking"] == "low_confidence" else "llada_random"
                    block = g.get("block_length") or s[1]
                    rest = {kk: v for kk, v in base.items() if kk != "model"}
                    for series in g["samplers"]:
                        cache, thresholded = SAMPLER_SERIES[series]
                        extra = {"cache": cache} if cache else {}
                        if thresholded:
                            for t in g["thresholds"]:
                                out.append({"model": m["id"], "sampler": sampler, **rest, "block_length": block,
                                            **extra, "threshold": t})
                        else:
                            for k in g["steps"]:
                                out.append({"model": m["id"], "sampler": sampler, "steps": k, **rest,
                                            "block_length": block, **extra})
    return out


def cell_label(key: dict) -> str:
    s = f"{key['model']} N={key['seq_len']} B={key['batch_size']}"
    if key.get("steps") is not None:
        s += f" K={key['steps']}"
    if key.get("block_length") is not None:
        s += f" block={key['block_length']}"
    return s


# ---------------------------------------------------------------------------------------------------------------
# Models


def model_shape(spec: dict, shapes_override: str | None, layers_override: int | None) -> tuple[dict, str]:
    kind = spec["kind"]
    synth = spec.get("synthetic") or {}
    preset = shapes_override or synth.get("preset") or "real"
    h, l, nh, nkv, i, v, maxpos = PRESETS[(preset, kind)]
    if not shapes_override or shapes_override == synth.get("preset"):
        # The config's overrides of the preset (as the runner's synthetic writer applies them).
        h = synth.get("hidden", h)
        l = synth.get("layers", l)
    if layers_override:
        l = layers_override
    shape = {"layers": l, "hidden": h, "heads": nh, "kv_heads": nkv if kind == "llama" else nh,
             "intermediate": i, "vocab": v}
    shape["max_positions"] = maxpos
    return shape, preset


def hf_cache_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def find_snapshot(cache: Path, repo: str, revision: str) -> Path | None:
    d = cache / ("models--" + repo.replace("/", "--"))
    ref = d / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snap = d / "snapshots" / commit
    return snap if snap.is_dir() else None


def special_ids(spec: dict, shape: dict, preset: str, cache: Path):
    """Special ids and, when the HF cache has the model's snapshot with this vocabulary, its tokenizer."""
    kind, vocab = spec["kind"], shape["vocab"]
    if preset == "real":
        ids = dict(REAL_SPECIAL[kind])
    else:
        # The runner's placeholder layout: the specials are the last ids of the vocabulary, in this order.
        names = ["bos", "eos", "eot"] if kind == "llama" else ["bos", "eos", "mask", "eot"]
        ids = {n: vocab - len(names) + k for k, n in enumerate(names)}
        ids["stop"] = [ids["eos"], ids.pop("eot")]
    tokenizer, tok_sha = None, None
    snap = find_snapshot(cache, spec["id"], spec.get("revision", "main"))
    if snap and (snap / "config.json").is_file() and (snap / "tokenizer.json").is_file():
        cfg = json.loads((snap / "config.json").read_text())
        cfg_vocab = cfg.get("vocab_size") or cfg.get("embedding_size")
        if cfg_vocab == vocab:
            from transformers import PreTrainedTokenizerFast

            tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(snap / "tokenizer.json"))
            tok_sha = hashlib.sha256((snap / "tokenizer.json").read_bytes()).hexdigest()
            for field, name in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("mask_token_id", "mask")):
                if isinstance(cfg.get(field), int):
                    ids[name] = cfg[field]
            eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
            ids["stop"] = sorted({ids["eos"], *([eot] if isinstance(eot, int) and eot >= 0 else [])})
    return ids, tokenizer, tok_sha


def build_model(spec: dict, shape: dict, ids: dict, dtype, device, attn: str, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    kind = spec["kind"]
    cfg = LlamaConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], max_position_embeddings=shape["max_positions"],
        rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, bos_token_id=ids["bos"], eos_token_id=ids["eos"],
        pad_token_id=ids["eos"], attn_implementation=attn,
    )
    if getattr(cfg, "rope_parameters", None) is not None and isinstance(cfg.rope_parameters, dict):
        cfg.rope_parameters["rope_theta"] = 500000.0
    if kind == "llada":
        cfg.is_causal = False  # transformers >= 5: create_causal_mask builds a bidirectional mask instead
        cfg.use_cache = False
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to(device=device, dtype=dtype).eval()
    if kind == "llada":
        for m in model.modules():
            if hasattr(m, "is_causal"):
                m.is_causal = False
    # The runner's weight distribution (runner/src/synth): never all zeros, never flat logits on tiny shapes.
    std = max(0.02, 1.0 / math.sqrt(shape["hidden"]))
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.normal_(0.0, 0.05, generator=gen).add_(1.0)
            else:
                p.normal_(0.0, std, generator=gen)
    return model


# ---------------------------------------------------------------------------------------------------------------
# Measurement


class Clock:
    """CUDA events on the current stream, or perf_counter on the CPU. `mark()` records a boundary."""

    def __init__(self, device):
        import torch

        self.torch, self.cuda = torch, device.type == "cuda"
        self.marks = []

    def start(self):
        if self.cuda:
            self.torch.cuda.synchronize()
        self.marks = []
        self.mark()

    def mark(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())
        return len(self.marks) - 1

    def elapsed(self):
        """Milliseconds of every mark since the first (synchronises once)."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [self.marks[0].elapsed_time(e) for e in self.marks]
        return [(t - self.marks[0]) * 1000.0 for t in self.marks]


def logits_kwarg(model):
    params = inspect.signature(model.forward).parameters
    if "logits_to_keep" in params:
        return {"logits_to_keep": 1}
    if "num_logits_to_keep" in params:
        return {"num_logits_to_keep": 1}
    return {}


def generate_ar(model, ids, n_out, stop_ids, clock, last_only):
    import torch
    from transformers import DynamicCache

    clock.start()
    cache = DynamicCache()
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, **last_only)
    logits = out.logits[:, -1, :]
    nxt = (logits if stop_ids is None else logits.index_fill(-1, stop_ids, float("-inf"))).argmax(dim=-1)
    prefill_mark = clock.mark()
    tokens = [nxt]
    for _ in range(1, n_out):
        out = model(input_ids=nxt[:, None], past_key_values=out.past_key_values, use_cache=True)
        logits = out.logits[:, -1, :]
        nxt = (logits if stop_ids is None else logits.index_fill(-1, stop_ids, float("-inf"))).argmax(dim=-1)
        tokens.append(nxt)
    end = clock.mark()
    times = clock.elapsed()
    if not torch.isfinite(logits).all():
        raise RuntimeError("NaN or inf in the logits of the last decode step")
    return {"prefill_ms": times[prefill_mark], "e2e_ms": times[end], "forward_passes": n_out,
            "tokens": torch.stack(tokens, dim=1)}


def generate_llada(model, prompt, n_out, steps, block_length, temperature, remasking, mask_id, clock, gen,
                   full_logits, confidence="f64", threshold=None):
    """The reference sampler (K = `steps`), or confidence-threshold decoding without a cache (`threshold`: each
    step commits every masked position of the block at or above it, at least the most confident one)."""
    import torch

    b, p = prompt.shape
    blocks = n_out // block_length
    spb = steps // blocks if threshold is None else 0
    base, rem = divmod(block_length, spb) if spb else (0, 0)
    schedule = [base + (1 if i < rem else 0) for i in range(spb)]
    committed, stalled = [], 0
    x = torch.full((b, p + n_out), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :p] = prompt
    neg_inf = float("-inf")
    clock.start()
    step_marks, first_block_mark, logits = [], None, None
    for blk in range(blocks):
        s, e = p + blk * block_length, p + (blk + 1) * block_length
        i = 0
        while (i < spb) if threshold is None else bool((x[:, s:e] == mask_id).any()):
            if full_logits:
                # generate.py: logits over the whole sequence, confidences of every position, then -inf outside.
                mask_index = x == mask_id
                logits = model(input_ids=x, use_cache=False).logits
                lo, window = 0, x
            else:
                # The runner's work: the body over the whole sequence, the head and confidences over the positions
                # ranked: the block's, from the first position before it still masked (a committed mask id).
                hidden = model.model(input_ids=x, use_cache=False).last_hidden_state
                left = (x[:, p:s] == mask_id).nonzero()
                lo = p + int(left[:, 1].min()) if len(left) else s
                logits = model.lm_head(hidden[:, lo:e])
                window = x[:, lo:e]
                mask_index = window == mask_id
            if temperature > 0:
                l64 = logits.to(torch.float64)
                u = torch.rand(l64.shape, dtype=torch.float64, device=l64.device, generator=gen)
                x0 = (l64.exp() / (-torch.log(u)) ** temperature).argmax(dim=-1)
            else:
                x0 = logits.argmax(dim=-1)
            if remasking == "low_confidence":
                dt = {"f32": torch.float32, "f64": torch.float64}.get(confidence, logits.dtype)
                probs = torch.softmax(logits.to(dt), dim=-1).to(torch.float64)
                x0_p = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
            else:
                x0_p = torch.rand(x0.shape, dtype=torch.float64, device=x0.device, generator=gen)
            if full_logits:
                x0_p[:, e:] = neg_inf
            x0 = torch.where(mask_index, x0, window)
            conf = torch.where(mask_index, x0_p, torch.full_like(x0_p, neg_inf))
            order = torch.sort(conf, dim=-1, descending=True, stable=True).indices
            masked_before = int((x == mask_id).sum())
            if threshold is None:
                k = schedule[i]
                if k > 0:
                    # Top-k per row; ties towards the lower position (stable sort), as the runner.
                    idx = order[:, :k]
                    x.scatter_(1, idx + lo, torch.gather(x0, 1, idx))
            else:
                # Per row: the masked positions ranked at or above the threshold, at least the first, while the
                # row's block has a masked position.
                for r in range(b):
                    masked = int(mask_index[r, s - lo:e - lo].sum())
                    if masked == 0:
                        continue
                    k = max(1, int(((conf[r] >= threshold) & mask_index[r]).sum()))
                    idx = order[r, :k]
                    x[r, idx + lo] = x0[r, idx]
            # Tokens committed: a position that took the mask id is still masked.
            n = masked_before - int((x == mask_id).sum())
            committed.append(n)
            if threshold is not None:
                # A threshold block that commits nothing would run forever: the runner's rule.
                stalled = stalled + 1 if n == 0 else 0
                if stalled and (temperature == 0 and remasking == "low_confidence" or stalled >= 64):
                    raise RuntimeError(f"the sampler cannot finish: block {blk} of the threshold sampler committed "
                                       f"no token in {stalled} forward(s)")
            i += 1
            step_marks.append(clock.mark())
        if blk == 0:
            first_block_mark = step_marks[-1]
    times = clock.elapsed()
    if logits is not None and not torch.isfinite(logits).all():
        raise RuntimeError("NaN or inf in the logits of the last diffusion step")
    prev, step_ms = 0.0, []
    for m in step_marks:
        step_ms.append(times[m] - prev)
        prev = times[m]
    return {"e2e_ms": times[step_marks[-1]], "first_block_ms": times[first_block_mark], "step_ms": step_ms,
            "forward_passes": len(step_marks), "committed_per_step": committed, "tokens": x[:, p:]}


def prompt_row(seed: int, index: int, length: int, bos: int, ordinary: int) -> list[int]:
    """BOS, then the first length - 1 of prompt `index`'s seeded ids (each prompt is a prefix-stable stream)."""
    rng = random.Random(f"dllm-bench-hf-reference:{seed}:{index}")
    return [bos] + [int(rng.random() * ordinary) for _ in range(length - 1)]


def is_oom(e: BaseException) -> bool:
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(e, oom_type)) or "out of memory" in str(e).lower()


def read_vmhwm() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_vmhwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def roofline(shape: dict, b: int, prompt: int, n_out: int, dtype_bytes: int, key: dict, llada_logits: str,
             forwards: int):
    """metrics::roofline, for the work this script does (full logits where it computes them); `forwards`: the
    LLaDA steps run (K, or as many as a threshold needed)."""
    h, v, layers = shape["hidden"], shape["vocab"], shape["layers"]
    hd = h // shape["heads"]
    q, kv = shape["heads"] * hd, shape["kv_heads"] * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * shape["intermediate"]
    params = 2 * v * h + layers * (per_layer + 2 * h) + h
    streamed = params - v * h

    def fwd(tokens, context, logits):
        weights = (streamed + b * tokens * h) * dtype_bytes
        flops = 2 * b * tokens * per_layer * layers + 4 * b * tokens * context * h * layers + 2 * b * logits * h * v
        return weights, flops

    total_w = total_f = 0
    kv_bytes = None
    if key["sampler"] == "ar_greedy":
        w, f = fwd(prompt, prompt, 1)
        total_w, total_f = w, f
        for step in range(1, n_out):
            w, f = fwd(1, prompt + step, 1)
            total_w += w
            total_f += f
        kv_bytes = 2 * layers * b * (prompt + n_out - 1) * shape["kv_heads"] * hd * dtype_bytes
    else:
        n = prompt + n_out
        w, f = fwd(n, n, n if llada_logits == "full" else key["block_length"])
        total_w, total_f = w * forwards, f * forwards
    return total_w, total_f, kv_bytes


def measure_cell(model, spec, shape, ids, tokenizer, key, config, device, dtype_bytes, args, prompt_cache):
    import torch

    run, g = config["run"], config["grid"]
    b, n_out, prompt_len = key["batch_size"], key["output_tokens"], key["prompt_tokens"]
    count = config["prompts"]["count"]
    specials = [v for k, v in ids.items() if k != "stop"] + list(ids["stop"])
    ordinary = min(specials) if min(specials) > 0 else shape["vocab"]
    clock = Clock(device)
    stop_ids = torch.tensor(ids["stop"], device=device) if g["eos"] == "suppress" else None
    last_only = logits_kwarg(model)
    reps, cuda = [], device.type == "cuda"
    rss_ok = False

    def once(i: int, measured: bool):
        nonlocal rss_ok
        indices = [(i * b + j) % count for j in range(b)]
        rows = []
        for p in indices:
            row = prompt_cache.get(p)
            if row is None or len(row) < prompt_len:
                row = prompt_row(args.prompt_seed, p, max(prompt_len, 1), ids["bos"], ordinary)
                prompt_cache[p] = row
            rows.append(row[:prompt_len])
        prompt = torch.tensor(rows, dtype=torch.long, device=device)
        if measured:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(device)
            else:
                rss_ok = reset_vmhwm()
        with torch.inference_mode():
            if key["sampler"] == "ar_greedy":
                out = generate_ar(model, prompt, n_out, stop_ids, clock, last_only)
            else:
                gen = torch.Generator(device=device).manual_seed(run["seed"] * 1_000_003 + i)
                out = generate_llada(model, prompt, n_out, key.get("steps") or 0, key["block_length"],
                                     g["temperature"], g["remasking"], ids["mask"], clock, gen,
                                     args.llada_logits == "full", g["confidence"], key.get("threshold"))
        if not measured:
            return
        rep = {"prompt_indices": indices, "e2e_ms": out["e2e_ms"]}
        for field in ("prefill_ms", "first_block_ms", "step_ms", "committed_per_step"):
            if field in out:
                rep[field] = out[field]
        rep["forward_passes"] = out["forward_passes"]
        generated = out["tokens"].tolist()
        rep["output_tokens"] = sum(len(r) for r in generated)
        rep["output_bytes"] = (
            sum(len(tokenizer.decode(r, skip_special_tokens=True).encode("utf-8")) for r in generated)
            if tokenizer is not None else None
        )
        if cuda:
            rep["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
            rep["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
            free, total = torch.cuda.mem_get_info(device)
            rep["device_used_bytes"] = total - free
        elif rss_ok:
            peak = read_vmhwm()
            if peak:
                rep["peak_rss_bytes"] = peak
        w, f, kvb = roofline(shape, b, prompt_len, n_out, dtype_bytes, key, args.llada_logits, out["forward_passes"])
        if kvb is not None:
            rep["kv_cache_bytes"] = kvb
        rep["weights_read_bytes"] = w
        rep["flop_count"] = f
        reps.append(rep)

    cell = {"key": key, "status": {"state": "ok"}, "warmup_runs": run["warmup"], "repetitions": reps,
            "execution": 0}
    try:
        for i in range(run["warmup"]):
            once(i, False)
        for i in range(run["repetitions"]):
            once(i, True)
    except Exception as e:  # a failed cell is recorded and the grid goes on, as the runner
        steps = (f", K={key['steps']}" if key.get("steps") is not None
                 else f", threshold={rust_float(key['threshold'])}" if key.get("threshold") is not None else "")
        if is_oom(e):
            cell["status"] = {
                "state": "oom",
                "message": f"out of memory at B={b}, N={key['seq_len']} ({prompt_len} prompt + {n_out} output "
                           f"tokens){steps}: {str(e).splitlines()[0] if str(e) else type(e).__name__}; fix: a "
                           "smaller batch size or sequence length, or a device with more memory",
            }
        else:
            cell["status"] = {"state": "error", "message": f"{type(e).__name__}: {e}"}
        cell["repetitions"] = []  # the runner keeps the finished ones; a failed cell's timings are not used
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return cell


def check_bidirectional(model, vocab, device) -> bool:
    """Position 0's logits change when the last token changes: attention is not causal."""
    import torch

    with torch.inference_mode():
        a = torch.randint(0, vocab - 8, (1, 8), device=device, generator=torch.Generator(device=device).manual_seed(0))
        bb = a.clone()
        bb[0, -1] = (bb[0, -1] + 1) % (vocab - 8)
        la = model(input_ids=a, use_cache=False).logits[0, 0].float()
        lb = model(input_ids=bb, use_cache=False).logits[0, 0].float()
    return not torch.equal(la, lb)


# ---------------------------------------------------------------------------------------------------------------
# Provenance


def device_info(device) -> dict:
    import torch

    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        info = {"kind": "cuda", "ordinal": idx, "name": props.name, "memory_bytes": props.total_memory,
                "compute_capability": f"{props.major}.{props.minor}"}
        if torch.version.cuda:
            info["cuda_version"] = torch.version.cuda
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(idx)],
                                 capture_output=True, text=True, timeout=20)
            if drv.returncode == 0 and drv.stdout.strip():
                info["driver_version"] = drv.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
        return info
    info = {"kind": "cpu", "threads": torch.get_num_threads()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["name"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_bytes"] = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if "name" not in info and platform.processor():
        info["name"] = platform.processor()
    return info


def slurm_info() -> dict | None:
    env = os.environ
    fields = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID",
              "node": "SLURMD_NODENAME", "cluster": "SLURM_CLUSTER_NAME"}
    info = {k: env[v] for k, v in fields.items() if env.get(v)}
    if env.get("SLURM_RESTART_COUNT", "").isdigit():
        info["restart_count"] = int(env["SLURM_RESTART_COUNT"])
    return info or None


def git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            return None
        d = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() + ("-dirty" if d.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def write_atomic(path: Path, bundle: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(bundle, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/demo.toml", help="grid config TOML (default config/demo.toml)")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: the config's run.device)")
    ap.add_argument("--dtype", choices=["bf16", "f32", "f16"], help="default: the config's run.dtype")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa", help="HF attention implementation")
    ap.add_argument("--seq-len", type=int_list, help="override grid.seq_lengths, e.g. 512,1024")
    ap.add_argument("--batch-size", type=int_list, help="override grid.batch_sizes")
    ap.add_argument("--steps", type=int_list, help="override grid.steps")
    ap.add_argument("--samplers", type=series_list, help="override grid.samplers, e.g. reference,threshold")
    ap.add_argument("--thresholds", type=float_list, help="override grid.thresholds, e.g. 0.9,0.5")
    ap.add_argument("--max-prompts", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--repetitions", type=int)
    ap.add_argument("--shapes", choices=["real", "tiny", "small"],
                    help="shape preset for every model (default: each model's [models.synthetic] preset, else real)")
    ap.add_argument("--layers", type=int, help="override the number of layers (e.g. 1 for a CPU check of real shapes)")
    ap.add_argument("--llada-logits", choices=["full", "block"], default="full",
                    help="full: LM head and float64 softmax over every position, as generate.py (default); "
                         "block: over the positions ranked only, the runner's work")
    ap.add_argument("--model-cache-dir", help="HF hub cache to look for tokenizers in (output_bytes)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    ap.add_argument("--output", help="bundle path (default results/NAME-hf-ATTN-STAMP.json)")
    ap.add_argument("--plan", action="store_true",
                    help="print the resolved config and its cells as JSON (as `dllm-bench plan` resolves them) and "
                         "exit, without torch")
    args = ap.parse_args(argv)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config, source = resolve_config(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.plan:
        # What the runner's `plan` resolves, as JSON: the test suite compares it with the runner's.
        print(json.dumps({"config_source": source, "config": config, "cells": cells(config)}, indent=1))
        return 0
    if any(m["kind"] == "dream" for m in config["models"]):
        print(f"error: {source}: field `models`: Dream's sampler is not implemented in this reference (it runs "
              "Llama and LLaDA)\n  fix: compare the runner with it on a config without kind = \"dream\"",
              file=sys.stderr)
        return 2
    cached = [v for v in config["grid"]["samplers"] if SAMPLER_SERIES[v][0]]
    if cached and any(m["kind"] == "llada" for m in config["models"]):
        print(f"error: {source}: field `grid.samplers`: {', '.join(cached)} use a block KV cache, which this "
              "reference does not implement (it runs the reference sampler and threshold decoding, one full forward "
              "per step)\n  fix: --samplers reference,threshold (or remove the cached series)", file=sys.stderr)
        return 2
    if config["prompts"].get("chat_template"):
        print(f"error: {source}: field `prompts.chat_template`: the runner wraps each prompt in the model's chat "
              "template; this reference feeds the prompt text as it is, so it would measure other prompts\n  fix: "
              "compare the two on a config without prompts.chat_template", file=sys.stderr)
        return 2
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    run = config["run"]
    args.prompt_seed = config["prompts"].get("seed", 0) ^ run["seed"]
    dev = run["device"]
    if dev.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: --device {dev}: torch sees no CUDA device (torch {torch.__version__})", file=sys.stderr)
        return 2
    device = torch.device(dev)
    if device.type == "cuda":
        # `cuda` alone is the current device: torch.cuda.set_device wants an index.
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[run["dtype"]]
    dtype_bytes = DTYPE_BYTES[run["dtype"]]
    cache = hf_cache_dir(args.model_cache_dir)
    opts = [f"attn={args.attn}", f"llada_logits={args.llada_logits}"]
    if args.shapes:
        opts.append(f"shapes={args.shapes}")
    if args.layers:
        opts.append(f"layers={args.layers}")
    source = f"{source} [{TOOL}: {', '.join(opts)}; quality not measured]"
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dev_info = device_info(device)
    host = socket.gethostname() or None
    keys = cells(config)
    print(f"{TOOL}: transformers {transformers.__version__}, torch {torch.__version__}, {dev} {run['dtype']}, "
          f"attention {args.attn}, {len(keys)} cells", file=sys.stderr)

    # output_bytes is a required field: without the model's tokenizer it cannot be measured, and a 0 would be a
    # false figure. Refuse before anything is built or measured.
    missing = [spec["id"] for spec in config["models"]
               if special_ids(spec, *model_shape(spec, args.shapes, args.layers), cache)[1] is None]
    if missing:
        print(f"error: no tokenizer of these shapes in {cache} for {', '.join(missing)}; the bundle's output_bytes "
              "needs it. fix: run `dllm-bench synth` (or `dllm-bench run`) for these model ids first, which writes "
              "the synthetic tokenizer into the cache, or pass --model-cache-dir", file=sys.stderr)
        return 2
    models_info, out_cells = [], []
    for mi, spec in enumerate(config["models"]):
        shape, preset = model_shape(spec, args.shapes, args.layers)
        ids, tokenizer, tok_sha = special_ids(spec, shape, preset, cache)
        seed = (spec.get("synthetic") or {}).get("seed", 0) * 7919 + mi + run["seed"]
        model_keys = [k for k in keys if k["model"] == spec["id"]]
        t0 = time.perf_counter()
        model = build_model(spec, shape, ids, dtype, device, args.attn, seed)
        params = sum(p.numel() for p in model.parameters())
        print(f"  {spec['id']} ({spec['kind']}, {preset} shapes, {params:,} parameters, "
              f"attention {model.config._attn_implementation}) built in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr)
        if spec["kind"] == "llada" and not check_bidirectional(model, shape["vocab"], device):
            print(f"error: {spec['id']}: this transformers version keeps the causal mask for the LLaDA model; "
                  "the reference would be wrong", file=sys.stderr)
            return 1
        tok = {"vocab_size": len(tokenizer) if tokenizer is not None else shape["vocab"], "bos_id": ids["bos"],
               "eos_id": ids["eos"]}
        if "mask" in ids:
            tok["mask_id"] = ids["mask"]
        if tok_sha:
            tok["sha256"] = tok_sha
        models_info.append({
            "id": spec["id"], "revision": spec.get("revision", "main"), "kind": spec["kind"],
            "generation": "autoregressive" if spec["kind"] == "llama" else "diffusion",
            "parameters": params, "weights_bytes": params * dtype_bytes, "dtype": run["dtype"], "tokenizer": tok,
            "synthetic": True,
            "shape": {k: shape[k] for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab")},
        })
        prompt_cache: dict[int, list[int]] = {}
        for key in model_keys:
            t0 = time.perf_counter()
            cell = measure_cell(model, spec, shape, ids, tokenizer, key, config, device, dtype_bytes, args,
                                prompt_cache)
            out_cells.append(cell)
            reps = cell["repetitions"]
            med = sorted(r["e2e_ms"] for r in reps)[len(reps) // 2] if reps else None
            state = cell["status"]["state"]
            print(f"  {cell_label(key)}: {state}" + (f", median e2e {med:.2f} ms" if med is not None else "")
                  + (f" ({cell['status'].get('message')})" if state != "ok" else "")
                  + f" [{time.perf_counter() - t0:.1f}s]", file=sys.stderr)
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

    count = config["prompts"]["count"]
    h = hashlib.sha256()
    for i in range(count):
        h.update(f"{args.prompt_seed}:{i}".encode() + b"\0")
    bundle = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {
            "tool": TOOL,
            "tool_version": transformers.__version__,
            **({"git_commit": git_commit()} if git_commit() else {}),
            "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **({"host": host} if host else {}),
            "device": dev_info,
            "synthetic_weights": True,
            "config_source": source,
            "config": config,
            "attention": f"hf-transformers {args.attn} (torch {torch.__version__}"
                         + (", LLaDA logits over the whole sequence" if args.llada_logits == "full" else
                            ", LLaDA logits over the positions ranked") + ")",
            "planned_cells": len(keys),
            "executions": [{"started_at": started, **({"host": host} if host else {}), "device": dev_info,
                            **({"slurm": slurm_info()} if slurm_info() else {})}],
        },
        "models": models_info,
        "prompt_set": {
            "source": f"{TOOL}:seeded-token-ids",
            "selection": f"{count} prompts of seeded uniform token ids (seed {args.prompt_seed}), BOS first; "
                         "no text: quality not measured",
            "count": count,
            "sha256": h.hexdigest(),
        },
        "cells": out_cells,
    }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.output or f"results/{run['name']}-hf-{args.attn}-{stamp}.json")
    write_atomic(out, bundle)
    failed = sum(c["status"]["state"] != "ok" for c in out_cells)
    print(f"{out}: {len(out_cells)} cells ({len(out_cells) - failed} ok)", file=sys.stderr)
    print(out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
