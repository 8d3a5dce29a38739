#!/usr/bin/env python3
"""PyTorch reference for `dllm-bench bench-kernels`: the same shapes, the same work, timed the same way.

Builds the runner's transformer in plain PyTorch (RMSNorm in f32, rotate-half RoPE in f32, GQA by repeating
KV heads, matmul-softmax-matmul attention in the model dtype or SDPA, SwiGLU MLP, untied LM head) with random
weights (N(0, max(0.02, 1/sqrt(hidden))), norms 1 + N(0, 0.05)) and times, as bench-kernels does:
- the copy bandwidth (copy into an existing buffer; bytes read + written per second),
- the matmul rate (square matmul in the run's dtype),
- an AR decode token (single-token forward with a torch.cat KV cache, greedy choice on the host) over the last
  --decode-tokens positions of an N-token sequence,
- a LLaDA step (full bidirectional forward over B x N tokens, logits for one block).
Prints one JSON object with the keys of `dllm-bench bench-kernels --json` (medians over the repetitions).
With --profile, as `bench-kernels --profile`: each part of a decode token's and a step's forward timed (CUDA events
between parts on a GPU, the clock on the CPU; means over the repetitions) with the aten ops it dispatches (views
not counted, as the runner counts none), under the runner's part names where the work is the same (`inputs`:
positions and RoPE tables made in the forward; `sdpa`: the fused attention in place of scores, mask, softmax and
attention x values), each part the runner has with its bytes and FLOPs and the achieved rates.

The shapes and the work per token and step (weights bytes, FLOPs, each part's bytes and FLOPs) are never
computed here: `dllm-bench bench-kernels --plan --json` with the same shape flags gives them (the binary from
--dllm-bench, $DLLM_BENCH or this checkout's target/release or target/debug, else dllm-bench on the PATH).

    python runner/bench/torch_reference.py --shape small --seq-len 512 --batch 4 [--profile]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

SHAPES = ("tiny", "small", "8b")  # `bench-kernels --shape`
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROPE_THETA = 500000.0
EPS = 1e-5
PLAN_FLAGS = ("shape", "layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "batch", "decode_batch",
              "seq_len", "decode_tokens", "block_length")


def dllm_bench_binary(arg):
    """--dllm-bench, else $DLLM_BENCH, else a build of this checkout (release, then debug), else the PATH's."""
    if arg or os.environ.get("DLLM_BENCH"):
        return arg or os.environ["DLLM_BENCH"]
    root = Path(__file__).resolve().parent.parent.parent
    for build in ("release", "debug"):
        if (root / "target" / build / "dllm-bench").is_file():
            return str(root / "target" / build / "dllm-bench")
    return "dllm-bench"


def runner_plan(args, dtype_name):
    """`dllm-bench bench-kernels --plan --json` of these flags: the shapes and the work per token and step."""
    cmd = [dllm_bench_binary(args.dllm_bench), "bench-kernels", "--plan", "--json", "--dtype", dtype_name]
    for flag in PLAN_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(value)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"cannot run {cmd[0]}: {e}; fix: pass --dllm-bench BIN or set DLLM_BENCH (cargo build first)")
    if out.returncode != 0:
        print(out.stderr.strip(), file=sys.stderr)
        sys.exit(out.returncode)
    return json.loads(out.stdout)


def with_work(prof, planned):
    """A profile's parts with the runner's bytes and FLOPs (and the achieved rates) where the runner has the part."""
    work = {p["part"]: p for p in planned["parts"]}
    for part in prof["parts"]:
        w = work.get(part["part"])
        if w is not None:
            s = part["ms"] / 1e3
            part.update(bytes=w["bytes"], flops=w["flops"], bytes_per_s=w["bytes"] / s if s > 0 else 0.0,
                        flops_per_s=w["flops"] / s if w["flops"] > 0 and s > 0 else None)
    return prof


class NoParts:
    """A forward without profiling."""

    def enter(self, name):
        pass


class Parts:
    """Times the parts of forwards (`enter` ends the current part), summed per part over every forward."""

    def __init__(self, device):
        self.device, self.marks, self.ms = device, [], {}

    def _tick(self):
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def enter(self, name):
        self.marks.append((name, self._tick()))

    def finish(self):
        end = self._tick()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        ticks = [t for _, t in self.marks[1:]] + [end]
        for (name, a), b in zip(self.marks, ticks):
            ms = a.elapsed_time(b) if self.device.type == "cuda" else (b - a) * 1e3
            self.ms[name] = self.ms.get(name, 0.0) + ms
        self.marks = []


class CountOps(TorchDispatchMode):
    """Counts the aten ops each part dispatches (views excluded); none before the first part (a decode's prefill,
    which runs unprofiled, is not the first token's embedding)."""

    def __init__(self):
        super().__init__()
        self.part, self.ops = None, {}

    def enter(self, name):
        self.part = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.part is not None and not getattr(func, "is_view", False):
            self.ops[self.part] = self.ops.get(self.part, 0) + 1
        return func(*args, **(kwargs or {}))


class Model:
    def __init__(self, s, dtype, device, seed, attention):
        # Drawn on the device: on the host the 8B shapes take minutes (seen on an H200: no weights after 100 s).
        g = torch.Generator(device=device).manual_seed(seed)
        h, hd = s["hidden"], s["hidden"] // s["heads"]
        std = max(0.02, 1.0 / math.sqrt(h))

        def mat(o, i):
            return (torch.randn(o, i, generator=g, device=device) * std).to(dtype=dtype)

        def norm():
            return (1.0 + 0.05 * torch.randn(h, generator=g, device=device)).to(dtype=dtype)

        self.s, self.hd, self.dtype, self.attention = s, hd, dtype, attention
        q, kv = s["heads"] * hd, s["kv_heads"] * hd
        self.embed = mat(s["vocab"], h)
        self.layers = [dict(attn_norm=norm(), q=mat(q, h), k=mat(kv, h), v=mat(kv, h), o=mat(h, q),
                            mlp_norm=norm(), gate=mat(s["intermediate"], h), up=mat(s["intermediate"], h),
                            down=mat(h, s["intermediate"])) for _ in range(s["layers"])]
        self.norm = norm()
        self.head = mat(s["vocab"], h)
        half = hd // 2
        self.inv_freq = torch.tensor([1.0 / ROPE_THETA ** (2 * i / hd) for i in range(half)],
                                     dtype=torch.float64).float().to(device)

    def rms(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return xf.to(x.dtype) * w

    def rope(self, x, cos, sin):
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        return (xf * cos + torch.cat([-x2, x1], dim=-1) * sin).to(x.dtype)

    def forward(self, ids, start, cache, causal, span, P=NoParts()):
        b, t = ids.shape
        nh, nkv, hd = self.s["heads"], self.s["kv_heads"], self.hd
        P.enter("inputs")
        pos = torch.arange(start, start + t, device=ids.device, dtype=torch.float32)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)
        sin = torch.cat([ang.sin(), ang.sin()], -1)
        P.enter("embed")
        x = self.embed[ids]
        for li, L in enumerate(self.layers):
            P.enter("norm")
            hdn = self.rms(x, L["attn_norm"])
            P.enter("qkv_proj")
            q = F.linear(hdn, L["q"]).view(b, t, nh, hd).transpose(1, 2)
            k = F.linear(hdn, L["k"]).view(b, t, nkv, hd).transpose(1, 2)
            v = F.linear(hdn, L["v"]).view(b, t, nkv, hd).transpose(1, 2)
            P.enter("rope")
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            P.enter("cache_write")
            if cache is not None:
                if cache[li] is not None:
                    k = torch.cat([cache[li][0], k], 2)
                    v = torch.cat([cache[li][1], v], 2)
                cache[li] = (k, v)
            rep = nh // nkv
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            c = k.shape[2]
            is_causal = causal and t > 1
            if self.attention == "sdpa":
                P.enter("sdpa")
                y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
            else:
                P.enter("scores")
                att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
                if is_causal:
                    P.enter("mask")
                    mask = torch.ones(t, c, dtype=torch.bool, device=ids.device).tril(c - t)
                    att = att.masked_fill(~mask, float("-inf"))
                P.enter("softmax")
                att = torch.softmax(att, dim=-1)
                P.enter("attn_values")
                y = att @ v
            y = y.transpose(1, 2).reshape(b, t, nh * hd)
            P.enter("out_proj")
            o = F.linear(y, L["o"])
            P.enter("residual")
            x = x + o
            P.enter("norm")
            hdn = self.rms(x, L["mlp_norm"])
            P.enter("gate_up")
            g, u = F.linear(hdn, L["gate"]), F.linear(hdn, L["up"])
            P.enter("activation")
            a = F.silu(g) * u
            P.enter("down")
            d = F.linear(a, L["down"])
            P.enter("residual")
            x = x + d
        P.enter("norm")
        x = self.rms(x[:, span[0]:span[0] + span[1]], self.norm)
        P.enter("lm_head")
        return F.linear(x, self.head)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(device, warmup, reps, fn):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        times.append(fn())
    return statistics.median(times)


def timed(device, fn):
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3


def profile(device, args, unprofiled_ms, per_run, run):
    """`run(P)` profiled: ops counted in one untimed run, then each part timed over the repetitions."""
    counter = CountOps()
    with counter:
        run(counter)
    for _ in range(args.warmup):
        run()
    P = Parts(device)
    for _ in range(args.repetitions):
        run(P)
        P.finish()
    per = per_run * args.repetitions
    parts = [dict(part=name, ops=round(counter.ops.get(name, 0) / per_run), ms=ms / per) for name, ms in P.ms.items()]
    return dict(ops=sum(p["ops"] for p in parts), profiled_ms=sum(p["ms"] for p in parts),
                unprofiled_ms=unprofiled_ms, parts=parts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--shape", choices=SHAPES, default="tiny")
    for name in ("layers", "hidden", "heads", "kv-heads", "intermediate", "vocab"):
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--decode-batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--matmul-size", type=int)
    p.add_argument("--copy-mib", type=int)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="CPU threads (default: as many as cores)")
    p.add_argument("--attention", choices=("eager", "sdpa"), default="eager")
    p.add_argument("--profile", action="store_true",
                   help="also time each part of a decode token's and a step's forward (see above)")
    p.add_argument("--dllm-bench", metavar="BIN",
                   help="the runner, which gives the shapes and the work (`bench-kernels --plan --json`); default "
                        "$DLLM_BENCH, else this checkout's target/release or target/debug build, else dllm-bench "
                        "on the PATH")
    args = p.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(args.threads or os.cpu_count())
    dtype_name = args.dtype or ("bf16" if cuda else "f32")
    dtype = DTYPES[dtype_name]
    plan = runner_plan(args, dtype_name)
    assert plan["element_bytes"] == torch.tensor([], dtype=dtype).element_size(), plan["element_bytes"]
    torch.manual_seed(args.seed)

    with torch.inference_mode():
        n = ((args.copy_mib or (1024 if cuda else 256)) << 20) // 4
        src = torch.arange(n, device=device, dtype=torch.float32)
        dst = torch.zeros(n, device=device, dtype=torch.float32)
        copy_ms = median_ms(device, args.warmup, args.repetitions, lambda: timed(device, lambda: dst.copy_(src)))
        copy_bps = 2 * n * 4 / (copy_ms / 1e3)

        m = args.matmul_size or (8192 if cuda else 1024)
        a = torch.randn(m, m, device=device).to(dtype)
        bm = torch.randn(m, m, device=device).to(dtype)
        mm_ms = median_ms(device, args.warmup, args.repetitions, lambda: timed(device, lambda: a @ bm))
        mm_rate = 2 * m ** 3 / (mm_ms / 1e3)

        # AR decode.
        planned = plan["decode"]
        s = planned["shape"]
        model = Model(s, dtype, device, args.seed, args.attention)
        b, N, steps = args.decode_batch, args.seq_len, args.decode_tokens
        prompt = N - steps
        ids = torch.randint(0, s["vocab"], (b, prompt), device=device)

        def decode(P=NoParts()):
            cache = [None] * s["layers"]
            logits = model.forward(ids, 0, cache, True, (prompt - 1, 1))
            nxt = logits[:, -1].float().argmax(-1).tolist()
            sync(device)
            t0 = time.perf_counter()
            for i in range(steps):
                P.enter("inputs")
                step_ids = torch.tensor(nxt, device=device).view(b, 1)
                logits = model.forward(step_ids, prompt + i, cache, True, (0, 1), P)
                P.enter("selection")
                nxt = logits[:, -1].float().argmax(-1).tolist()
            sync(device)
            return (time.perf_counter() - t0) * 1e3 / steps

        dec_ms = median_ms(device, args.warmup, args.repetitions, decode)
        decode_profile = with_work(profile(device, args, dec_ms, steps, decode), planned) if args.profile else None
        wb, fl = planned["weights_bytes"], planned["flops"]
        floor_ms = wb / copy_bps * 1e3
        decode_phase = dict(shape=s, batch=b, seq_len=N, ms=dec_ms, weights_bytes=wb, flops=fl,
                            bytes_per_s=wb / (dec_ms / 1e3), flops_per_s=fl / (dec_ms / 1e3),
                            ratio_to_floor=dec_ms / floor_ms)
        del model

        # LLaDA step.
        planned = plan["llada_step"]
        s = planned["shape"]
        model = Model(s, dtype, device, args.seed + 1, args.attention)
        b, bl = args.batch, args.block_length
        ids = torch.randint(0, s["vocab"], (b, N), device=device)
        def step(P=NoParts()):
            logits = model.forward(ids, 0, None, False, (N - bl, bl), P)
            P.enter("selection")
            # The sampler's greedy selection: argmax and confidence in f32, B x block values to the host.
            probs = torch.softmax(logits.float(), dim=-1)
            conf, chosen = probs.max(-1)
            return conf.tolist(), chosen.tolist()

        step_ms = median_ms(device, args.warmup, args.repetitions,
                            lambda: timed(device, lambda: model.forward(ids, 0, None, False, (N - bl, bl))))
        step_profile = with_work(profile(device, args, step_ms, 1, step), planned) if args.profile else None
        wb, fl = planned["weights_bytes"], planned["flops"]
        step_phase = dict(shape=s, batch=b, seq_len=N, ms=step_ms, weights_bytes=wb, flops=fl,
                          bytes_per_s=wb / (step_ms / 1e3), flops_per_s=fl / (step_ms / 1e3),
                          ratio_to_floor=fl / (step_ms / 1e3) / mm_rate)

    report = dict(framework=f"torch {torch.__version__} ({args.attention} attention)", device=str(device),
                  threads=None if cuda else torch.get_num_threads(), dtype=dtype_name, clock="perf_counter",
                  copy_bytes_per_s=copy_bps, matmul_flops_per_s=mm_rate, matmul_size=m,
                  decode=decode_phase, llada_step=step_phase)
    if args.profile:
        report["decode_profile"], report["llada_step_profile"] = decode_profile, step_profile
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
