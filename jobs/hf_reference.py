#!/usr/bin/env python3
"""The study's own stack (PyTorch + HF transformers) on the cells of a dllm-bench grid, written as a bundle.

Reads the same grid config TOML as `dllm-bench run`, builds both models from config with random weights
(Llama-3 as `LlamaForCausalLM`; LLaDA as the same transformer with bidirectional attention, full MHA and LLaDA's
sizes), measures every cell as the runner defines it (README, "Definitions") and writes a bundle of the current
schema (1.5), so that `dllm-bench serve` / the explorer can overlay "dllm-bench runner" and "HF transformers"
cell by cell, and `dllm-bench compare RUNNER.json REFERENCE.json` can print them side by side.

Only torch, transformers and the standard library. See jobs/README.md ("HF transformers reference").

The config is never resolved here: `dllm-bench plan --json` (the binary from --dllm-bench, $DLLM_BENCH or this
checkout's build) validates it with its overrides (exit 2 with the runner's message where it refuses it) and gives
the cells, each model's shape and every cell's roofline counts (metrics::roofline); this script keeps only what runs
under PyTorch. runner/tests/hf_reference.rs holds its bundles to the runner on the CPU: they validate and equal a
`dllm-bench run` of the same tiny config cell for cell.

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
  torch.cuda.mem_get_info; the cache emptied at each cell's start, so a cell's reserved peak is its own (the runner
  trims its pool likewise). CPU: the process's peak RSS (VmHWM, reset through /proc/self/clear_refs), else absent.
- Out of memory: the cell is recorded as `oom` with B, N and K in the message; the grid goes on.
- Stopped by SIGTERM or SIGINT (a job's time limit, a capped call, Ctrl-C): the cell under way is dropped, the
  finished ones are written as a partial bundle (planned_cells says how many were planned; every reader labels
  it partial) and the script exits 75, as `dllm-bench run` does. There is no resume: run the cells left with
  --steps, --seq-len or --batch-size into another bundle.

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
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

SCHEMA_VERSION = "1.5"
TOOL = "hf-transformers-reference"

# Special ids of the real checkpoints (shared/reference/models.md).
REAL_SPECIAL = {
    "llama": {"bos": 128000, "eos": 128001, "stop": [128001, 128009]},
    "llada": {"bos": 126080, "eos": 126081, "mask": 126336, "stop": [126081, 126348]},
}


# ---------------------------------------------------------------------------------------------------------------
# Config: resolved, validated and expanded by the runner (`dllm-bench plan --json`), never here


def dllm_bench_binary(arg: str | None) -> str:
    """--dllm-bench, else $DLLM_BENCH, else a build of this checkout (release, then debug), else the PATH's."""
    if arg or os.environ.get("DLLM_BENCH"):
        return arg or os.environ["DLLM_BENCH"]
    root = Path(__file__).resolve().parent.parent
    for build in ("release", "debug"):
        if (root / "target" / build / "dllm-bench").is_file():
            return str(root / "target" / build / "dllm-bench")
    return "dllm-bench"


def runner_plan(args) -> tuple[dict | None, str]:
    """`dllm-bench plan --json` of the config and its overrides: (the plan, "") or (None, the runner's error)."""
    cmd = [dllm_bench_binary(args.dllm_bench), "plan", "--json", "--config", args.config]
    for flag in ("steps", "samplers", "thresholds", "batch_size", "seq_len", "max_prompts", "device", "dtype",
                 "warmup", "repetitions", "shapes", "layers"):
        value = getattr(args, flag)
        if value is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(value)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e}; fix: pass --dllm-bench BIN or set DLLM_BENCH (cargo build first)"
    if out.returncode != 0:
        return None, out.stderr.strip().removeprefix("error: ")
    return json.loads(out.stdout), ""


def rust_float(v: float) -> str:
    """A float as Rust's Display writes it (0.5, 1, 1e-7 as 0.0000001)."""
    r = repr(float(v))
    if "e" in r or "E" in r:
        r = format(v, "f").rstrip("0").rstrip(".") if v != 0 else "0"
    return r[:-2] if r.endswith(".0") else r


# ---------------------------------------------------------------------------------------------------------------
# Models


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


def counted_work(roofline: dict, llada_logits: str, forwards: int) -> tuple[int, int, int | None]:
    """The plan's roofline counts (metrics::roofline) of the work done: AR, the whole generation; LLaDA, one
    forward's counts (logits for every position with --llada-logits full) times the forwards run."""
    if "forward" not in roofline:
        w = roofline["work"]
        return w["weights_read_bytes"], w["flop_count"], w["kv_cache_bytes"]
    f = roofline["forward_all_logits" if llada_logits == "full" else "forward"]
    return f["weights_read_bytes"] * forwards, f["flop_count"] * forwards, None


def measure_cell(model, shape, ids, tokenizer, planned, config, count, device, args, prompt_cache):
    import torch

    run, g = config["run"], config["grid"]
    key = planned["key"]
    b, n_out, prompt_len = key["batch_size"], key["output_tokens"], key["prompt_tokens"]
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
        # Valid output tokens (the runner's count): a position a diffusion model left masked generated none.
        rep["output_tokens"] = sum(len(r) for r in generated) - (
            sum(r.count(ids["mask"]) for r in generated) if key["sampler"] != "ar_greedy" else 0)
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
        w, f, kvb = counted_work(planned["roofline"], args.llada_logits, out["forward_passes"])
        if kvb is not None:
            rep["kv_cache_bytes"] = kvb
        rep["weights_read_bytes"] = w
        rep["flop_count"] = f
        reps.append(rep)

    cell = {"key": key, "status": {"state": "ok"}, "warmup_runs": run["warmup"], "repetitions": reps,
            "execution": 0}
    if cuda:
        # The cell starts from what is allocated (the weights), so its reserved peak is its own and not the largest
        # earlier cell's (the caching allocator keeps what it reserved; a peak reset starts from the current
        # reservation), as the runner trims its pool at each cell's start.
        gc.collect()
        torch.cuda.empty_cache()
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


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived: the grid stops between two Python operations (a cell's `except Exception` does
    not take it for a failed cell) and the finished cells are written."""


def raise_stopped(signum, _frame):
    # A second signal (Ctrl-C twice, TERM after INT) while the bundle is written must not stop the writing.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


# Exit status of a run stopped by a signal, its finished cells written (the runner's, runner::signals).
EXIT_INTERRUPTED = 75


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/demo.toml", help="grid config TOML (default config/demo.toml)")
    ap.add_argument("--device", help="cpu, cuda or cuda:N (default: the config's run.device)")
    ap.add_argument("--dtype", help="bf16, f32 or f16 (default: the config's run.dtype)")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa", help="HF attention implementation")
    ap.add_argument("--seq-len", help="override grid.seq_lengths, e.g. 512,1024")
    ap.add_argument("--batch-size", help="override grid.batch_sizes")
    ap.add_argument("--steps", help="override grid.steps")
    ap.add_argument("--samplers", help="override grid.samplers, e.g. reference,threshold")
    ap.add_argument("--thresholds", help="override grid.thresholds, e.g. 0.9,0.5")
    ap.add_argument("--max-prompts")
    ap.add_argument("--warmup")
    ap.add_argument("--repetitions")
    ap.add_argument("--shapes",
                    help="shape preset for every model (default: each model's [models.synthetic] preset, else real)")
    ap.add_argument("--layers", help="override the number of layers (e.g. 1 for a CPU check of real shapes)")
    ap.add_argument("--llada-logits", choices=["full", "block"], default="full",
                    help="full: LM head and float64 softmax over every position, as generate.py (default); "
                         "block: over the positions ranked only, the runner's work")
    ap.add_argument("--model-cache-dir", help="HF hub cache to look for tokenizers in (output_bytes)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's)")
    ap.add_argument("--output", help="bundle path (default results/NAME-hf-ATTN-STAMP.json)")
    ap.add_argument("--dllm-bench", metavar="BIN",
                    help="the runner, which resolves the config (`plan --json`); default $DLLM_BENCH, else this "
                         "checkout's target/release or target/debug build, else dllm-bench on the PATH")
    args = ap.parse_args(argv)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    plan, error = runner_plan(args)
    if plan is None:
        print(f"error: {error}", file=sys.stderr)
        return 2
    source, config = plan["config_source"], plan["config"]
    # The reference measures no quality: the [quality] table is left out of the stored config (a bundle whose
    # config asks for quality but has none would read as a failed quality run).
    config.pop("quality", None)
    if config["run"].get("attention_f32"):
        print(f"error: {source}: field `run.attention_f32`: the runner upcasts q, k and v to f32 for the attention; "
              "HF transformers' attention has no such option, so the reference would measure another computation\n"
              "  fix: compare the two on a config without run.attention_f32", file=sys.stderr)
        return 2
    if any(m["kind"] == "dream" for m in config["models"]):
        print(f"error: {source}: field `models`: Dream's sampler is not implemented in this reference (it runs "
              "Llama and LLaDA)\n  fix: compare the runner with it on a config without kind = \"dream\"",
              file=sys.stderr)
        return 2
    cached = sorted({c["key"]["cache"] for c in plan["cells"] if c["key"].get("cache")})
    if cached:
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
    dtype_bytes = plan["dtype_bytes"]
    count = plan["prompt_count"]
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
    planned_models = {m["id"]: m for m in plan["models"]}
    keys = plan["cells"]
    print(f"{TOOL}: transformers {transformers.__version__}, torch {torch.__version__}, {dev} {run['dtype']}, "
          f"attention {args.attn}, {len(keys)} cells", file=sys.stderr)

    # output_bytes is a required field: without the model's tokenizer it cannot be measured, and a 0 would be a
    # false figure. Refuse before anything is built or measured.
    missing = [spec["id"] for spec in config["models"]
               if special_ids(spec, planned_models[spec["id"]]["shape"], planned_models[spec["id"]]["preset"],
                              cache)[1] is None]
    if missing:
        print(f"error: no tokenizer of these shapes in {cache} for {', '.join(missing)}; the bundle's output_bytes "
              "needs it. fix: run `dllm-bench synth` (or `dllm-bench run`) for these model ids first, which writes "
              "the synthetic tokenizer into the cache, or pass --model-cache-dir", file=sys.stderr)
        return 2
    models_info, out_cells = [], []
    stopped = None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, raise_stopped)
    try:
        measure_models(config, planned_models, keys, cache, run, dtype, dtype_bytes, device, args, count,
                       models_info, out_cells)
    except Stopped as e:
        stopped = str(e)
    except ModelBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # The bundle is written whatever arrives now (a second signal would lose every cell measured).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    return write_bundle(config, source, keys, models_info, out_cells, started, dev_info, host, count, args, run,
                        stopped)


class ModelBuildError(Exception):
    """A model the reference cannot build faithfully: nothing is written."""


def measure_models(config, planned_models, keys, cache, run, dtype, dtype_bytes, device, args, count, models_info,
                   out_cells) -> None:
    """Builds each model in turn and measures its cells, appending to `models_info` and `out_cells` as it goes (so
    that a stop leaves every finished cell there)."""
    import torch

    for mi, spec in enumerate(config["models"]):
        planned = planned_models[spec["id"]]
        shape, preset = {**planned["shape"], "max_positions": planned["max_positions"]}, planned["preset"]
        ids, tokenizer, tok_sha = special_ids(spec, shape, preset, cache)
        seed = (spec.get("synthetic") or {}).get("seed", 0) * 7919 + mi + run["seed"]
        model_keys = [c for c in keys if c["key"]["model"] == spec["id"]]
        t0 = time.perf_counter()
        model = build_model(spec, shape, ids, dtype, device, args.attn, seed)
        params = sum(p.numel() for p in model.parameters())
        print(f"  {spec['id']} ({spec['kind']}, {preset} shapes, {params:,} parameters, "
              f"attention {model.config._attn_implementation}) built in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr)
        if spec["kind"] == "llada" and not check_bidirectional(model, shape["vocab"], device):
            raise ModelBuildError(f"{spec['id']}: this transformers version keeps the causal mask for the LLaDA "
                                  "model; the reference would be wrong")
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
        for planned_cell in model_keys:
            t0 = time.perf_counter()
            cell = measure_cell(model, shape, ids, tokenizer, planned_cell, config, count, device, args,
                                prompt_cache)
            out_cells.append(cell)
            reps = cell["repetitions"]
            med = sorted(r["e2e_ms"] for r in reps)[len(reps) // 2] if reps else None
            state = cell["status"]["state"]
            print(f"  {planned_cell['label']}: {state}" + (f", median e2e {med:.2f} ms" if med is not None else "")
                  + (f" ({cell['status'].get('message')})" if state != "ok" else "")
                  + f" [{time.perf_counter() - t0:.1f}s]", file=sys.stderr)
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def write_bundle(config, source, keys, models_info, out_cells, started, dev_info, host, count, args, run,
                 stopped) -> int:
    """Writes the bundle of the cells measured (atomically; partial where `stopped` names the signal that ended
    the grid early) and returns the exit status: 0, 1 where a cell failed, 75 where stopped."""
    import torch
    import transformers

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
    if stopped:
        print(f"{TOOL}: stopped by {stopped} after {len(out_cells)} of {len(keys)} cells: {out} is a partial "
              "bundle (the cell under way was dropped); run the cells left with --steps, --seq-len or "
              "--batch-size into another bundle", file=sys.stderr)
    print(out)
    if stopped:
        return EXIT_INTERRUPTED
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
