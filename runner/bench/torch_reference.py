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
attention x values). The parts' bytes and FLOPs are the runner's (`bench-kernels --profile`, same shapes).

    python runner/bench/torch_reference.py --shape small --seq-len 512 --batch 4 [--profile]
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

# (hidden, layers, heads, kv_heads, intermediate, vocab) per preset, as runner/src/synth/mod.rs resolves them.
PRESETS = {
    "tiny": {"llama": (64, 2, 4, 2, 224, 512), "llada": (64, 2, 4, 4, 192, 512)},
    "small": {"llama": (256, 4, 8, 2, 896, 1024), "llada": (256, 4, 8, 8, 768, 1024)},
    "8b": {"llama": (4096, 32, 32, 8, 14336, 128256), "llada": (4096, 32, 32, 32, 12288, 126464)},
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROPE_THETA = 500000.0
EPS = 1e-5


def shape_of(args, kind):
    h, l, nh, nkv, i, v = PRESETS[args.shape][kind]
    h = args.hidden or h
    l = args.layers or l
    nh = args.heads or nh
    if kind == "llama":
        nkv = min(args.kv_heads or nkv, nh)
    else:
        nkv = nh
    return {"layers": l, "hidden": h, "heads": nh, "kv_heads": nkv,
            "intermediate": args.intermediate or i, "vocab": args.vocab or v}


def params(s):
    h, v, hd = s["hidden"], s["vocab"], s["hidden"] // s["heads"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    matrices = h * q + 2 * h * kv + q * h + 3 * h * s["intermediate"]
    return 2 * v * h + s["layers"] * (matrices + 2 * h) + h, matrices


def forward_work(s, batch, tokens, context, logits, nbytes):
    total, matrices = params(s)
    h, layers = s["hidden"], s["layers"]
    weights = (total - s["vocab"] * h + batch * tokens * h) * nbytes
    flops = 2 * batch * tokens * matrices * layers + 4 * batch * tokens * context * h * layers \
        + 2 * batch * logits * h * s["vocab"]
    return weights, flops


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
    """Counts the aten ops each part dispatches (views excluded)."""

    def __init__(self):
        super().__init__()
        self.part, self.ops = "embed", {}

    def enter(self, name):
        self.part = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not getattr(func, "is_view", False):
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
    p.add_argument("--shape", choices=PRESETS, default="tiny")
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
    args = p.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        torch.set_num_threads(args.threads or os.cpu_count())
    dtype_name = args.dtype or ("bf16" if cuda else "f32")
    dtype = DTYPES[dtype_name]
    nbytes = torch.tensor([], dtype=dtype).element_size()
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
        s = shape_of(args, "llama")
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
        decode_profile = profile(device, args, dec_ms, steps, decode) if args.profile else None
        works = [forward_work(s, b, 1, prompt + i + 1, 1, nbytes) for i in range(steps)]
        wb = sum(w for w, _ in works) // steps
        fl = sum(f for _, f in works) // steps
        floor_ms = wb / copy_bps * 1e3
        decode_phase = dict(shape=s, batch=b, seq_len=N, ms=dec_ms, weights_bytes=wb, flops=fl,
                            bytes_per_s=wb / (dec_ms / 1e3), flops_per_s=fl / (dec_ms / 1e3),
                            ratio_to_floor=dec_ms / floor_ms)
        del model

        # LLaDA step.
        s = shape_of(args, "llada")
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
        step_profile = profile(device, args, step_ms, 1, step) if args.profile else None
        wb, fl = forward_work(s, b, N, N, bl, nbytes)
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
