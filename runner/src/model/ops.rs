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
//! On CUDA the same functions run candle's ops in the order they replace, unless `run.cuda_fused_ops` asks for the
//! CUDA versions of the three kernels (`kernels.cu`, compiled by `build.rs` with the `cuda` feature): each mirrors
//! candle's CUDA ops (their f32 sums in the same order, their roundings), which differ from candle's CPU ops in
//! places (its CUDA RMSNorm multiplies by `rsqrt`, its bf16 `silu` rounds once). Off by default until a GPU run
//! shows the same tokens and a speedup.

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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::CudaStorageSlice as S;
        let storage = match (&s1.slice, &s2.slice) {
            (S::F32(x), S::F32(w)) => gpu::rms_norm(&s1.device, x, l1, w, l2, self.eps, "f32"),
            (S::BF16(x), S::BF16(w)) => gpu::rms_norm(&s1.device, x, l1, w, l2, self.eps, "bf16"),
            (S::F16(x), S::F16(w)) => gpu::rms_norm(&s1.device, x, l1, w, l2, self.eps, "f16"),
            _ => bail!("rms_norm: unsupported dtypes {:?} and {:?}", s1.dtype(), s2.dtype()),
        }?;
        Ok((storage, l1.shape().clone()))
    }
}

/// Whether the fused kernels run on `x`'s device: always on the CPU, on CUDA when `cuda_fused` (`run.cuda_fused_ops`).
fn fused(x: &Tensor, cuda_fused: bool) -> bool {
    x.device().is_cpu() || (cuda_fused && x.device().is_cuda())
}

/// RMSNorm of the last dimension of `x` (contiguous) scaled by `weight` (same dtype): see the module doc.
pub fn rms_norm(
    x: &Tensor,
    weight: &Tensor,
    ones: &Tensor,
    eps: f32,
    cuda_fused: bool,
    p: &mut Probe,
) -> candle_core::Result<Tensor> {
    let x = p.contiguous(x)?;
    if fused(&x, cuda_fused) {
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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::CudaStorageSlice as S;
        let (S::F32(cos), S::F32(sin)) = (&s2.slice, &s3.slice) else {
            bail!("rope: f32 tables expected, got {:?}", s2.dtype());
        };
        let tables = gpu::Tables { cos, lc: l2, sin, ls: l3 };
        let dev = &s1.device;
        match &s1.slice {
            S::F32(x) => gpu::rope_to_heads(dev, x, l1, &tables, "f32"),
            S::BF16(x) => gpu::rope_to_heads(dev, x, l1, &tables, "bf16"),
            S::F16(x) => gpu::rope_to_heads(dev, x, l1, &tables, "f16"),
            _ => bail!("rope: unsupported dtype {:?}", s1.dtype()),
        }
    }
}

/// Rotate-half RoPE of `x` `(B, T, heads, head_dim)` (a view, any strides) with the f32 tables `cos`/`sin`
/// `(T, head_dim/2)` or `(B, T, head_dim/2)`, computed in f32; returns `(B, heads, T, head_dim)` contiguous in
/// `x`'s dtype.
pub fn rope_to_heads(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    cuda_fused: bool,
    p: &mut Probe,
) -> candle_core::Result<Tensor> {
    if fused(x, cuda_fused) {
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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::CudaStorageSlice as S;
        match &s.slice {
            S::F32(x) => gpu::silu_mul(&s.device, x, l, "f32"),
            S::BF16(x) => gpu::silu_mul(&s.device, x, l, "bf16"),
            S::F16(x) => gpu::silu_mul(&s.device, x, l, "f16"),
            _ => bail!("silu_mul: unsupported dtype {:?}", s.dtype()),
        }
    }
}

/// `silu(gate) * up` of the fused projection `(rows, 2 x ffn)` (gate columns first): `(rows, ffn)`.
pub fn silu_mul(gate_up: &Tensor, cuda_fused: bool, p: &mut Probe) -> candle_core::Result<Tensor> {
    let gate_up = p.contiguous(gate_up)?;
    if fused(&gate_up, cuda_fused) {
        return p.op(gate_up.apply_op1_no_bwd(&SiluMul));
    }
    let i = gate_up.dim(1)? / 2;
    let gate = p.op(gate_up.narrow(1, 0, i)?.silu())?;
    p.op(gate * gate_up.narrow(1, i, i)?)
}

/// Launching the kernels of `kernels.cu` (PTX compiled by `build.rs`, loaded once per device): allocating an
/// output the kernel fills and launching it are cudarc's `unsafe` calls.
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
mod gpu {
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::{CudaDType, WrapErr};
    use candle_core::{CudaDevice, CudaStorage, Layout, Shape, bail};

    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"));
    const MODULE: &str = "dllm_bench_kernels";
    /// Threads per block of the element-wise kernels.
    const THREADS: u32 = 256;

    fn view<'a, T>(s: &'a CudaSlice<T>, l: &Layout, what: &str) -> candle_core::Result<CudaView<'a, T>> {
        match l.contiguous_offsets() {
            Some((a, b)) => Ok(s.slice(a..b)),
            None => bail!("{what} has to be contiguous"),
        }
    }

    fn blocks(n: usize) -> candle_core::Result<u32> {
        u32::try_from(n.div_ceil(THREADS as usize)).map_err(|_| candle_core::Error::Msg(format!("{n} threads")))
    }

    pub(super) fn rms_norm<T: DeviceRepr + CudaDType>(
        dev: &CudaDevice,
        x: &CudaSlice<T>,
        lx: &Layout,
        w: &CudaSlice<T>,
        lw: &Layout,
        eps: f32,
        suffix: &str,
    ) -> candle_core::Result<CudaStorage> {
        let (x, w) = (view(x, lx, "rms_norm input")?, view(w, lw, "rms_norm weight")?);
        let cols = lw.shape().elem_count();
        if cols == 0 || lx.dims().last() != Some(&cols) {
            bail!("rms_norm: input {:?} against a weight of {cols}", lx.dims());
        }
        let rows = lx.shape().elem_count() / cols;
        // SAFETY: every element is written by the kernel below.
        let y = unsafe { dev.alloc::<T>(rows * cols) }?;
        let f = dev.get_or_load_custom_func(&format!("dllm_rms_norm_{suffix}"), MODULE, PTX)?;
        // As candle's rmsnorm: a warp per row below 1024 columns, else 1024 threads (the same sums).
        let threads = if cols < 1024 { 32 } else { 1024 };
        let cfg = LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let cols = cols as i32;
        let mut b = f.builder();
        b.arg(&x).arg(&w).arg(&y).arg(&cols).arg(&eps);
        // SAFETY: the arguments match the kernel's signature; `x` and `y` hold rows x cols elements, `w` cols.
        unsafe { b.launch(cfg) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
    }

    /// RoPE's f32 tables and their layouts.
    pub(super) struct Tables<'a> {
        pub cos: &'a CudaSlice<f32>,
        pub lc: &'a Layout,
        pub sin: &'a CudaSlice<f32>,
        pub ls: &'a Layout,
    }

    pub(super) fn rope_to_heads<T: DeviceRepr + CudaDType>(
        dev: &CudaDevice,
        x: &CudaSlice<T>,
        lx: &Layout,
        tables: &Tables<'_>,
        suffix: &str,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, t, h, d) = lx.shape().dims4()?;
        let st = lx.stride();
        if d % 2 != 0 || (st[3] != 1 && d > 1) {
            bail!("rope: head dim {d} with stride {} (even, unit stride expected)", st[3]);
        }
        let per_row = tables.lc.dims().len() == 3;
        let rows = if per_row { b } else { 1 };
        let (cos, sin) = (view(tables.cos, tables.lc, "rope cos")?, view(tables.sin, tables.ls, "rope sin")?);
        if cos.len() != rows * t * d / 2 || sin.len() != cos.len() {
            bail!("rope: tables of {} values for {rows} x {t} positions x {}", cos.len(), d / 2);
        }
        // The view from its first element; the kernel adds the strides (the largest offset stays in the slice).
        let x = x.slice(lx.start_offset()..);
        let n = b * h * t * d;
        // SAFETY: the kernel writes every element, one thread per pair of them.
        let y = unsafe { dev.alloc::<T>(n) }?;
        let f = dev.get_or_load_custom_func(&format!("dllm_rope_to_heads_{suffix}"), MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (blocks(n / 2)?, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let (b32, t32, h32, d32) = (b as u32, t as u32, h as u32, d as u32);
        let (sb, s_t, sh) = (st[0] as u64, st[1] as u64, st[2] as u64);
        let per_row = u32::from(per_row);
        let mut l = f.builder();
        l.arg(&x).arg(&cos).arg(&sin).arg(&y).arg(&b32).arg(&t32).arg(&h32).arg(&d32);
        l.arg(&sb).arg(&s_t).arg(&sh).arg(&per_row);
        // SAFETY: the arguments match the kernel's signature; every index it reads lies in `x`'s view (checked
        // by candle's layout) and the tables (checked above).
        unsafe { l.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), Shape::from((b, h, t, d))))
    }

    pub(super) fn silu_mul<T: DeviceRepr + CudaDType>(
        dev: &CudaDevice,
        x: &CudaSlice<T>,
        l: &Layout,
        suffix: &str,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let x = view(x, l, "silu_mul input")?;
        let (rows, two_i) = l.shape().dims2()?;
        if two_i % 2 != 0 {
            bail!("silu_mul: {two_i} columns (gate then up: an even number expected)");
        }
        let inner = two_i / 2;
        // SAFETY: the kernel writes every element.
        let y = unsafe { dev.alloc::<T>(rows * inner) }?;
        let f = dev.get_or_load_custom_func(&format!("dllm_silu_mul_{suffix}"), MODULE, PTX)?;
        let cfg =
            LaunchConfig { grid_dim: (blocks(rows * inner)?, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let (r32, i32_) = (rows as u32, inner as u32);
        let mut b = f.builder();
        b.arg(&x).arg(&y).arg(&r32).arg(&i32_);
        // SAFETY: the arguments match the kernel's signature; `x` holds rows x 2 inner elements, `y` rows x inner.
        unsafe { b.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), Shape::from((rows, inner))))
    }
}
