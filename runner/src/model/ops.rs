//! Fused CPU kernels of the forward pass: each replaces two to four of candle's ops (and their intermediate
//! tensors) with one pass, keeping the numerics of the ops it replaces bit for bit.
//!
//! - [`rms_norm`]: RMSNorm as HF llama and OLMo compute it: the sum of squares and the division in f32, the
//!   normalised value rounded to the model dtype, then multiplied by the weight in the model dtype. (Before:
//!   to f32, candle's `rms_norm` with a weight of ones, back to the dtype, a broadcast multiply.)
//! - [`rope_to_heads`]: the rotate-half RoPE of q or k computed in f32 from tables in f32 (LLaDA's
//!   `rope_full_precision`), read straight from the fused projection's `(B, T, heads, head_dim)` view (any
//!   strides) and written in the `(B, heads, T, head_dim)` layout attention multiplies. (Before: to f32, a copy
//!   of the transpose, candle's `rope`, back to the dtype.)
//! - [`silu_mul`]: SwiGLU's `silu(gate) * up` from the fused gate/up projection `(rows, 2 x ffn)`, with the
//!   roundings of candle's element-wise `silu` and `mul` in the model dtype. (Before: `silu` on one projection,
//!   `mul` with the other.)
//!
//! On CUDA the same functions run candle's ops in the order they replace (one kernel each: a CUDA version of
//! these kernels is for a GPU run to confirm), so every device computes the same numbers.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor, bail};
use half::{bf16, f16};
use rayon::prelude::*;

use super::profile::Probe;

/// A float element of the model: widened to f32 exactly, rounded back to nearest even (the identity for f32).
pub(super) trait Elem: Copy + Send + Sync + 'static {
    fn f(self) -> f32;
    fn r(x: f32) -> Self;
    fn storage(v: Vec<Self>) -> CpuStorage;
}

impl Elem for f32 {
    fn f(self) -> f32 {
        self
    }
    fn r(x: f32) -> Self {
        x
    }
    fn storage(v: Vec<Self>) -> CpuStorage {
        CpuStorage::F32(v)
    }
}

/// The half-precision elements: widened and rounded by `half`.
macro_rules! half_elem {
    ($t:ty, $variant:ident) => {
        impl Elem for $t {
            fn f(self) -> f32 {
                self.to_f32()
            }
            fn r(x: f32) -> Self {
                <$t>::from_f32(x)
            }
            fn storage(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
        }
    };
}
half_elem!(bf16, BF16);
half_elem!(f16, F16);

/// The elements of a contiguous layout.
fn contiguous<'a, T>(v: &'a [T], l: &Layout, what: &str) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => bail!("{what} has to be contiguous"),
    }
}

/// Rows below which a kernel runs on the calling thread (as candle's own CPU norms do).
const PARALLEL_ROWS: usize = 32;

struct RmsNorm {
    eps: f32,
}

impl RmsNorm {
    fn run<T: Elem>(&self, x: &[T], lx: &Layout, w: &[T], lw: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = contiguous(x, lx, "rms_norm input")?;
        let w = contiguous(w, lw, "rms_norm weight")?;
        let n = w.len();
        if n == 0 || x.len() % n != 0 || lx.dims().last() != Some(&n) {
            bail!("rms_norm: input {:?} against a weight of {n}", lx.dims());
        }
        let eps = self.eps;
        let row = |src: &[T], dst: &mut [T]| {
            // candle's `rms_norm` in f32: the squares summed in order, then sqrt(mean + eps).
            let sum2 = src.iter().map(|&v| v.f() * v.f()).sum::<f32>();
            let m = (sum2 / n as f32 + eps).sqrt();
            for ((d, &s), &a) in dst.iter_mut().zip(src).zip(w) {
                *d = T::r(T::r(s.f() / m).f() * a.f());
            }
        };
        let mut out = vec![T::r(0.0); x.len()];
        if x.len() / n <= PARALLEL_ROWS {
            x.chunks(n).zip(out.chunks_mut(n)).for_each(|(s, d)| row(s, d));
        } else {
            x.par_chunks(n).zip(out.par_chunks_mut(n)).for_each(|(s, d)| row(s, d));
        }
        Ok((T::storage(out), lx.shape().clone()))
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "dllm-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match (s1, s2) {
            (CpuStorage::F32(x), CpuStorage::F32(w)) => self.run(x, l1, w, l2),
            (CpuStorage::BF16(x), CpuStorage::BF16(w)) => self.run(x, l1, w, l2),
            (CpuStorage::F16(x), CpuStorage::F16(w)) => self.run(x, l1, w, l2),
            _ => bail!("rms_norm: unsupported dtypes {:?} and {:?}", s1.dtype(), s2.dtype()),
        }
    }
}

/// RMSNorm of the last dimension of `x` (contiguous) scaled by `weight` (same dtype): see the module doc.
pub fn rms_norm(x: &Tensor, weight: &Tensor, ones: &Tensor, eps: f32, p: &mut Probe) -> candle_core::Result<Tensor> {
    let x = p.contiguous(x)?;
    if x.device().is_cpu() {
        return p.op(x.apply_op2_no_bwd(weight, &RmsNorm { eps }));
    }
    let xf = p.cast(&x, DType::F32)?;
    let normed = p.op(candle_nn::ops::rms_norm(&xf, ones, eps))?;
    let normed = p.cast(&normed, x.dtype())?;
    p.op(normed.broadcast_mul(weight))
}

struct RopeToHeads;

impl RopeToHeads {
    fn run<T: Elem>(
        &self,
        x: &[T],
        lx: &Layout,
        cos: &[f32],
        sin: &[f32],
        per_row: bool,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, t, h, d) = lx.shape().dims4()?;
        let st = lx.stride();
        if d % 2 != 0 || (st[3] != 1 && d > 1) {
            bail!("rope: head dim {d} with stride {} (even, unit stride expected)", st[3]);
        }
        let half = d / 2;
        let rows = if per_row { b } else { 1 };
        if cos.len() != rows * t * half || sin.len() != cos.len() {
            bail!("rope: tables of {} values for {rows} x {t} positions x {half}", cos.len());
        }
        let start = lx.start_offset();
        let mut out = vec![T::r(0.0); b * h * t * d];
        // One chunk per (row, head): its t x d outputs are contiguous in the (B, heads, T, head_dim) layout.
        let head = |bh: usize, dst: &mut [T]| {
            let (bi, hi) = (bh / h, bh % h);
            let table = if per_row { bi * t * half } else { 0 };
            for ti in 0..t {
                let src = start + bi * st[0] + ti * st[1] + hi * st[2];
                let (c, s) = (&cos[table + ti * half..][..half], &sin[table + ti * half..][..half]);
                let dst = &mut dst[ti * d..(ti + 1) * d];
                for i in 0..half {
                    let (x1, x2) = (x[src + i].f(), x[src + i + half].f());
                    // candle's `rope` in f32, term for term.
                    dst[i] = T::r(x1 * c[i] - x2 * s[i]);
                    dst[i + half] = T::r(x1 * s[i] + x2 * c[i]);
                }
            }
        };
        if b * h * t <= PARALLEL_ROWS * h {
            out.chunks_mut(t * d).enumerate().for_each(|(bh, dst)| head(bh, dst));
        } else {
            out.par_chunks_mut(t * d).enumerate().for_each(|(bh, dst)| head(bh, dst));
        }
        Ok((T::storage(out), Shape::from((b, h, t, d))))
    }
}

impl CustomOp3 for RopeToHeads {
    fn name(&self) -> &'static str {
        "dllm-rope-to-heads"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(cos), CpuStorage::F32(sin)) = (s2, s3) else {
            bail!("rope: f32 tables expected, got {:?}", s2.dtype());
        };
        let (cos, sin) = (contiguous(cos, l2, "rope cos")?, contiguous(sin, l3, "rope sin")?);
        let per_row = l2.dims().len() == 3;
        match s1 {
            CpuStorage::F32(x) => self.run(x, l1, cos, sin, per_row),
            CpuStorage::BF16(x) => self.run(x, l1, cos, sin, per_row),
            CpuStorage::F16(x) => self.run(x, l1, cos, sin, per_row),
            _ => bail!("rope: unsupported dtype {:?}", s1.dtype()),
        }
    }
}

/// Rotate-half RoPE of `x` `(B, T, heads, head_dim)` (a view, any strides) with the f32 tables `cos`/`sin`
/// `(T, head_dim/2)` or `(B, T, head_dim/2)`, computed in f32; returns `(B, heads, T, head_dim)` contiguous in
/// `x`'s dtype.
pub fn rope_to_heads(x: &Tensor, cos: &Tensor, sin: &Tensor, p: &mut Probe) -> candle_core::Result<Tensor> {
    if x.device().is_cpu() {
        return p.op(x.apply_op3_no_bwd(cos, sin, &RopeToHeads));
    }
    let xf = p.cast(&x.transpose(1, 2)?, DType::F32)?;
    let xf = p.contiguous(&xf)?;
    let rotated = p.op(candle_nn::rotary_emb::rope(&xf, cos, sin))?;
    p.cast(&rotated, x.dtype())
}

struct SiluMul;

impl SiluMul {
    fn run<T: Elem>(&self, x: &[T], l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = contiguous(x, l, "silu_mul input")?;
        let (rows, two_i) = l.shape().dims2()?;
        if two_i % 2 != 0 {
            bail!("silu_mul: {two_i} columns (gate then up: an even number expected)");
        }
        let i = two_i / 2;
        let mut out = vec![T::r(0.0); rows * i];
        let row = |src: &[T], dst: &mut [T]| {
            let (gate, up) = src.split_at(i);
            for ((d, &g), &u) in dst.iter_mut().zip(gate).zip(up) {
                // candle's `silu` (v / (1 + exp(-v))) and `mul`, each step rounded to the dtype.
                let e = T::r((-g.f()).exp());
                let s = T::r(g.f() / T::r(1.0 + e.f()).f());
                *d = T::r(s.f() * u.f());
            }
        };
        if rows <= PARALLEL_ROWS {
            x.chunks(two_i).zip(out.chunks_mut(i)).for_each(|(s, d)| row(s, d));
        } else {
            x.par_chunks(two_i).zip(out.par_chunks_mut(i)).for_each(|(s, d)| row(s, d));
        }
        Ok((T::storage(out), Shape::from((rows, i))))
    }
}

impl CustomOp1 for SiluMul {
    fn name(&self) -> &'static str {
        "dllm-silu-mul"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        match s {
            CpuStorage::F32(x) => self.run(x, l),
            CpuStorage::BF16(x) => self.run(x, l),
            CpuStorage::F16(x) => self.run(x, l),
            _ => bail!("silu_mul: unsupported dtype {:?}", s.dtype()),
        }
    }
}

/// `silu(gate) * up` of the fused projection `(rows, 2 x ffn)` (gate columns first): `(rows, ffn)`.
pub fn silu_mul(gate_up: &Tensor, p: &mut Probe) -> candle_core::Result<Tensor> {
    let gate_up = p.contiguous(gate_up)?;
    if gate_up.device().is_cpu() {
        return p.op(gate_up.apply_op1_no_bwd(&SiluMul));
    }
    let i = gate_up.dim(1)? / 2;
    let gate = p.op(gate_up.narrow(1, 0, i)?.silu())?;
    p.op(gate * gate_up.narrow(1, i, i)?)
}
