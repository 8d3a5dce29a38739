//! Fused attention on the CPU (`run.attention = "fused"`): scores, mask, softmax and the product with the values
//! in one kernel, over blocks of queries and keys with an online softmax (as FlashAttention and PyTorch's CPU
//! SDPA compute it), so the `B x heads x T x keys` scores never reach memory: each task holds one block of
//! [`BLOCK_Q`] query rows against [`BLOCK_K`] keys at a time, in f32, in the core's caches.
//!
//! Numerics (why it is a switch, off by default): q, k and v are widened to f32 exactly as stored (the model
//! dtype), the 1/sqrt(d) scale goes on q in f32, the products accumulate in f32 with fused multiply-adds, the
//! exponentials are a polynomial with about 2 ulp of error, and the output is rounded once to the model dtype.
//! The ops path ([`super::Transformer`] by default) rounds the scores, the softmax and the product to the model
//! dtype in turn and sums in another order: the same function, different last bits (tests: within 1e-5 of it in
//! f32, within bf16's own rounding in bf16).
//!
//! Layout: `q` `(B, heads, T, d)` contiguous; `k`, `v` `(B, kv_heads, keys, d)` with any strides over the first
//! three dimensions (a view of the preallocated KV cache) and contiguous rows; grouped-query heads share their KV
//! head's blocks (no copy). The output is `(B, T, heads x d)`: the rows the output projection reads, so the
//! transpose copy of the ops path goes too. The additive mask is the ops path's bias, `(B | 1, 1, T | 1, keys)`,
//! read as f32 ([`Mask`]). Work is split over (batch row, KV head, block of queries) tasks on rayon's pool, and
//! the instruction set is chosen at run time (`pulp`: AVX-512, AVX2 + FMA, NEON or scalar), so one binary runs
//! well on any x86-64 or aarch64 CPU. The two products are register-tiled microkernels written with `pulp`'s
//! vector types, their register tiles sized per vector width; the softmax's loops are left to the
//! autovectoriser.
//!
//! CUDA has no fused attention yet: the sweep refuses `run.attention = "fused"` on a CUDA device.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor, bail};
use rayon::prelude::*;

use super::ops::Elem;

/// Query rows (of one KV head's group) per task.
pub const BLOCK_Q: usize = 64;
/// Keys per block of the online softmax.
pub const BLOCK_K: usize = 128;
const _: () = assert!(BLOCK_K.is_multiple_of(LANES));
/// The value and output rows are zero-padded to a multiple of this many lanes (every value tile's width divides it).
const D_PAD: usize = 64;

/// The additive attention mask as f32 rows: the ops path's bias `(B | 1, 1, T | 1, keys)`.
#[derive(Debug, Clone)]
pub struct Mask {
    data: Vec<f32>,
    /// The bias's batch rows (B or 1) and query rows (T or 1).
    rows: usize,
    q_rows: usize,
    keys: usize,
}

impl Mask {
    /// The bias tensor (any float dtype; 0 or -inf) read once for every layer of a forward.
    pub fn from_bias(bias: &Tensor) -> candle_core::Result<Self> {
        let (rows, one, q_rows, keys) = bias.dims4()?;
        if one != 1 {
            bail!("attention bias {:?}: expected (batch, 1, queries, keys)", bias.dims());
        }
        let data = bias.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self { data, rows, q_rows, keys })
    }

    /// The bias of batch row `b`, query `i` over the keys.
    fn row(&self, b: usize, i: usize) -> &[f32] {
        let b = if self.rows == 1 { 0 } else { b };
        let i = if self.q_rows == 1 { 0 } else { i };
        let at = (b * self.q_rows + i) * self.keys;
        &self.data[at..at + self.keys]
    }
}

/// `exp(x)` for `x <= 0` (what an online softmax exponentiates), branch-free so that a loop over it
/// vectorises: Cody-Waite reduction by ln 2 and Cephes' degree-6 polynomial (about 2 ulp); `x < -87` (and
/// -inf, a masked key) gives exactly 0.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let xc = x.clamp(-87.0, 0.0);
    let n = (xc * LOG2E + 0.5).floor();
    let r = n.mul_add(-C2, n.mul_add(-C1, xc));
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    let e = (p * r).mul_add(r, r) + 1.0;
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    if x < -87.0 { 0.0 } else { e * scale }
}

/// Lanes of the reductions below: a vector's width at AVX2, half of it at AVX-512.
const LANES: usize = 8;

/// The largest of `BLOCK_K` scores, reduced in [`LANES`] independent lanes so the loop vectorises (an in-order
/// fold of `max` does not).
#[inline(always)]
fn lane_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    for c in x.chunks_exact(LANES) {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    acc.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v))
}

/// The sum of `BLOCK_K` values in [`LANES`] partial sums (the order an in-order sum would need cannot vectorise).
#[inline(always)]
fn lane_sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    for c in x.chunks_exact(LANES) {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum()
}

/// The shapes of one call.
#[derive(Debug, Clone, Copy)]
struct Dims {
    heads: usize,
    kv_heads: usize,
    t: usize,
    keys: usize,
    d: usize,
    /// `d` rounded up to [`D_PAD`] (the value kernel's buffers are zero-padded to it).
    d_pad: usize,
}

/// Strided reads of `k` or `v`: element `(b, g, j, c)` at `start + b*s0 + g*s1 + j*s2 + c`.
#[derive(Debug, Clone, Copy)]
struct Strided {
    start: usize,
    s: [usize; 3],
}

impl Strided {
    fn of(l: &Layout, what: &str) -> candle_core::Result<Self> {
        let st = l.stride();
        if st.len() != 4 || (st[3] != 1 && l.dims()[3] > 1) {
            bail!("fused attention: {what} {:?} (strides {st:?}) needs contiguous rows", l.dims());
        }
        Ok(Self { start: l.start_offset(), s: [st[0], st[1], st[2]] })
    }

    fn row<'a, T>(&self, data: &'a [T], b: usize, g: usize, j: usize, d: usize) -> &'a [T] {
        let at = self.start + b * self.s[0] + g * self.s[1] + j * self.s[2];
        &data[at..at + d]
    }
}

/// One KV head's keys and values in f32, in blocks of [`BLOCK_K`] (a short last block zero-padded): per block the
/// keys transposed, `d x BLOCK_K` (the score kernel reads a row of keys per lane), and the values `BLOCK_K x
/// d_pad`.
struct KvBlocks {
    kt: Vec<f32>,
    v: Vec<f32>,
}

impl KvBlocks {
    fn of<T: Elem>(dims: &Dims, src: &KvSource<'_, T>, b: usize, g: usize) -> Self {
        let Dims { keys, d, d_pad, .. } = *dims;
        let blocks = keys.div_ceil(BLOCK_K);
        let mut kt = vec![0f32; blocks * d * BLOCK_K];
        let mut v = vec![0f32; blocks * BLOCK_K * d_pad];
        for kb in 0..blocks {
            src.fill(
                dims,
                b,
                g,
                kb,
                &mut kt[kb * d * BLOCK_K..][..d * BLOCK_K],
                &mut v[kb * BLOCK_K * d_pad..][..BLOCK_K * d_pad],
            );
        }
        Self { kt, v }
    }
}

/// The keys and values as candle holds them (any dtype, strided).
#[derive(Clone, Copy)]
struct KvSource<'a, T> {
    k: &'a [T],
    sk: Strided,
    v: &'a [T],
    sv: Strided,
}

impl<T: Elem> KvSource<'_, T> {
    /// Key block `kb` of KV head `g` of batch row `b` into `kt` (transposed) and `vb`, in f32; the rows past the
    /// last key zero.
    #[inline(always)]
    fn fill(&self, dims: &Dims, b: usize, g: usize, kb: usize, kt: &mut [f32], vb: &mut [f32]) {
        let Dims { keys, d, d_pad, .. } = *dims;
        for jj in 0..BLOCK_K {
            let j = kb * BLOCK_K + jj;
            if j < keys {
                for (c, &x) in self.sk.row(self.k, b, g, j, d).iter().enumerate() {
                    kt[c * BLOCK_K + jj] = x.f();
                }
                for (x, &y) in vb[jj * d_pad..jj * d_pad + d].iter_mut().zip(self.sv.row(self.v, b, g, j, d)) {
                    *x = y.f();
                }
            } else {
                for c in 0..d {
                    kt[c * BLOCK_K + jj] = 0.0;
                }
                vb[jj * d_pad..(jj + 1) * d_pad].fill(0.0);
            }
        }
    }
}

/// The fused attention op (see the module doc).
struct Fused<'a> {
    mask: Option<&'a Mask>,
    scale: f32,
    isa: Isa,
}

/// The instruction set the tasks run with: the widest the CPU has (pulp's run-time choice), or, in the tests, a
/// narrower one, so each width's tiles are checked on a machine that has a wider one.
#[derive(Debug, Clone, Copy)]
enum Isa {
    Widest,
    #[cfg(all(test, target_arch = "x86_64"))]
    Avx2,
    #[cfg(test)]
    Scalar,
}

impl Fused<'_> {
    fn run<T: Elem>(
        &self,
        q: &[T],
        lq: &Layout,
        k: &[T],
        lk: &Layout,
        v: &[T],
        lv: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (batch, heads, t, d) = lq.shape().dims4()?;
        let (bk, kv_heads, keys, dk) = lk.shape().dims4()?;
        if lv.dims() != lk.dims() || bk != batch || dk != d || kv_heads == 0 || heads % kv_heads != 0 || keys == 0 {
            bail!("fused attention: q {:?}, k {:?}, v {:?} do not match", lq.dims(), lk.dims(), lv.dims());
        }
        let Some((q0, q1)) = lq.contiguous_offsets() else { bail!("fused attention: q has to be contiguous") };
        let q = &q[q0..q1];
        let (sk, sv) = (Strided::of(lk, "k")?, Strided::of(lv, "v")?);
        if let Some(m) = self.mask
            && (m.keys != keys || (m.rows != 1 && m.rows != batch) || (m.q_rows != 1 && m.q_rows != t))
        {
            bail!(
                "fused attention: mask ({}, 1, {}, {}) against q {:?} and {keys} keys",
                m.rows,
                m.q_rows,
                m.keys,
                lq.dims()
            );
        }
        let dims = Dims { heads, kv_heads, t, keys, d, d_pad: d.div_ceil(D_PAD) * D_PAD };
        let group = heads / kv_heads;
        let blocks = (group * t).div_ceil(BLOCK_Q);
        let src = KvSource { k, sk, v, sv };
        // With several tasks per KV head (long query runs), its keys and values in f32 once, in the blocks the
        // tasks read; with one (a decode token), the task converts each block as it goes.
        let shared: Vec<KvBlocks> = if blocks > 1 {
            (0..batch * kv_heads)
                .into_par_iter()
                .map(|bg| KvBlocks::of(&dims, &src, bg / kv_heads, bg % kv_heads))
                .collect()
        } else {
            Vec::new()
        };
        let arch = pulp::Arch::new();
        // One task per (batch row, KV head, block of the group's query rows): its rows' outputs in f32.
        let outs: Vec<Vec<f32>> = (0..batch * kv_heads * blocks)
            .into_par_iter()
            .map(|task| {
                let (bg, blk) = (task / blocks, task % blocks);
                let (b, g) = (bg / kv_heads, bg % kv_heads);
                let task = Task { op: self, dims: &dims, q, kv: shared.get(bg), src, b, g, blk };
                match self.isa {
                    Isa::Widest => arch.dispatch(task),
                    #[cfg(all(test, target_arch = "x86_64"))]
                    Isa::Avx2 => pulp::Simd::vectorize(pulp::x86::V3::try_new().expect("an AVX2 CPU"), task),
                    #[cfg(test)]
                    Isa::Scalar => pulp::Simd::vectorize(pulp::Scalar::new(), task),
                }
            })
            .collect();
        // Scatter into `(B, T, heads x d)`, one output row (batch row, position) per item.
        let mut out = vec![T::r(0.0); batch * t * heads * d];
        out.par_chunks_mut(heads * d).enumerate().for_each(|(row, dst)| {
            let (b, i) = (row / t, row % t);
            for h in 0..heads {
                let (g, r) = (h / group, (h % group) * t + i);
                let src = &outs[(b * kv_heads + g) * blocks + r / BLOCK_Q];
                let src = &src[(r % BLOCK_Q) * d..][..d];
                for (o, &x) in dst[h * d..(h + 1) * d].iter_mut().zip(src) {
                    *o = T::r(x);
                }
            }
        });
        Ok((T::storage(out), Shape::from((batch, t, heads * d))))
    }

    /// One task: the query rows `blk * BLOCK_Q..` of KV head `g`'s group (row `r` is head `g * group + r / T`,
    /// position `r % T`) against every key; returns their outputs, `d` f32 each. The register tiles of the two
    /// products, one accumulator a register: `SR` query rows x `SV` vectors of keys for the scores, `VR` rows x `VV`
    /// vectors of head-dimension lanes for the outputs (chosen per vector width in `with_simd`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn task<S: pulp::Simd, T: Elem, const SR: usize, const SV: usize, const VR: usize, const VV: usize>(
        &self,
        simd: S,
        dims: &Dims,
        q: &[T],
        kv: Option<&KvBlocks>,
        src: &KvSource<'_, T>,
        b: usize,
        g: usize,
        blk: usize,
    ) -> Vec<f32> {
        let Dims { heads, kv_heads, t, keys, d, d_pad, .. } = *dims;
        let group = heads / kv_heads;
        let r0 = blk * BLOCK_Q;
        let nr = BLOCK_Q.min(group * t - r0);
        // The tiles cover a key block, the padded head dimension and (the values' rows) the scores' rows.
        const {
            let lanes = S::F32_LANES;
            assert!(BLOCK_K.is_multiple_of(SV * lanes) && D_PAD.is_multiple_of(VV * lanes) && SR.is_multiple_of(VR));
        }
        // Query rows in f32, scaled, padded to whole register tiles with zero rows.
        let nr_pad = nr.div_ceil(SR) * SR;
        let mut qb = vec![0f32; nr_pad * d];
        for r in 0..nr {
            let (h, i) = (g * group + (r0 + r) / t, (r0 + r) % t);
            let src = &q[((b * heads + h) * t + i) * d..][..d];
            for (x, &s) in qb[r * d..(r + 1) * d].iter_mut().zip(src) {
                *x = s.f() * self.scale;
            }
        }
        let (mut kt_own, mut vb_own) = match kv {
            Some(_) => (Vec::new(), Vec::new()),
            None => (vec![0f32; d * BLOCK_K], vec![0f32; BLOCK_K * d_pad]),
        };
        let mut s = vec![0f32; nr_pad * BLOCK_K];
        let mut o = vec![0f32; nr_pad * d_pad];
        let mut m = vec![f32::NEG_INFINITY; nr];
        let mut l = vec![0f32; nr];
        for (kb, j0) in (0..keys).step_by(BLOCK_K).enumerate() {
            let nk = BLOCK_K.min(keys - j0);
            // A block the mask hides from every row of the task (keys after a causal prefill's queries) changes
            // nothing: exp(-inf) = 0 adds no weight and leaves each row's max. Skipped, not computed.
            if let Some(mask) = self.mask
                && (0..nr).all(|r| mask.row(b, (r0 + r) % t)[j0..j0 + nk].iter().all(|&x| x == f32::NEG_INFINITY))
            {
                continue;
            }
            let (kt, vb): (&[f32], &[f32]) = match kv {
                Some(kv) => {
                    (&kv.kt[kb * d * BLOCK_K..][..d * BLOCK_K], &kv.v[kb * BLOCK_K * d_pad..][..BLOCK_K * d_pad])
                }
                None => {
                    src.fill(dims, b, g, kb, &mut kt_own, &mut vb_own);
                    (&kt_own, &vb_own)
                }
            };
            // Scores: the scaled queries against the block's keys (transposed), overwriting the last block's.
            product::<S, SR, SV>(simd, &qb, d, kt, BLOCK_K, &mut s, nr_pad, d, false);
            // Mask, then the online softmax's update of each row's max, sum and output.
            for r in 0..nr {
                let srow = &mut s[r * BLOCK_K..(r + 1) * BLOCK_K];
                srow[nk..].fill(f32::NEG_INFINITY);
                if let Some(mask) = self.mask {
                    let i = (r0 + r) % t;
                    for (x, &bias) in srow[..nk].iter_mut().zip(&mask.row(b, i)[j0..j0 + nk]) {
                        *x += bias;
                    }
                }
                let m_new = m[r].max(lane_max(srow));
                if m_new == f32::NEG_INFINITY {
                    // Every key so far masked: nothing to add yet.
                    srow.fill(0.0);
                    continue;
                }
                // The exponentials in a loop of their own (it vectorises), then summed in lanes.
                for x in srow.iter_mut() {
                    *x = exp_nonpositive(*x - m_new);
                }
                let sum = lane_sum(srow);
                let alpha = exp_nonpositive(m[r] - m_new);
                l[r] = l[r] * alpha + sum;
                m[r] = m_new;
                if alpha != 1.0 {
                    for x in &mut o[r * d_pad..(r + 1) * d_pad] {
                        *x *= alpha;
                    }
                }
            }
            for r in nr..nr_pad {
                s[r * BLOCK_K..(r + 1) * BLOCK_K].fill(0.0);
            }
            // Outputs: the weights times the block's values, added to the rescaled sums.
            product::<S, VR, VV>(simd, &s, BLOCK_K, vb, d_pad, &mut o, nr_pad, BLOCK_K, true);
        }
        let mut out = vec![0f32; nr * d];
        for r in 0..nr {
            // A row with every key masked (never: a query always sees itself) would be 0, not NaN.
            let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
            for (y, &x) in out[r * d..(r + 1) * d].iter_mut().zip(&o[r * d_pad..]) {
                *y = x * inv;
            }
        }
        out
    }
}

/// One task as a `pulp` operation: `with_simd` is compiled for each instruction set and inlines the whole task
/// (every function it calls is `#[inline(always)]`), so its loops vectorise with that set's width and fused
/// multiply-adds. (A closure is not inlined there: its `mul_add`s became calls of the C library's `fmaf`.)
struct Task<'a, T> {
    op: &'a Fused<'a>,
    dims: &'a Dims,
    q: &'a [T],
    kv: Option<&'a KvBlocks>,
    src: KvSource<'a, T>,
    b: usize,
    g: usize,
    blk: usize,
}

impl<T: Elem> pulp::WithSimd for Task<'_, T> {
    type Output = Vec<f32>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) -> Vec<f32> {
        let Self { op, dims, q, kv, src, b, g, blk } = self;
        // The tiles for the width `S` has (a constant: one branch is compiled). AVX-512, 32 registers of 16
        // lanes: 16 accumulators each; AVX2, 16 registers of 8 lanes: 8 each, as the loads need the rest.
        if S::F32_LANES >= 16 {
            op.task::<S, T, 8, 2, 4, 4>(simd, dims, q, kv, &src, b, g, blk)
        } else {
            op.task::<S, T, 4, 2, 2, 4>(simd, dims, q, kv, &src, b, g, blk)
        }
    }
}

/// `V` vectors of `S` from `x` (at least that many lanes long).
#[inline(always)]
fn load<S: pulp::Simd, const V: usize>(x: &[f32]) -> [S::f32s; V] {
    let (v, _) = S::as_simd_f32s(&x[..V * S::F32_LANES]);
    std::array::from_fn(|i| v[i])
}

/// `x[..V lanes] = v`.
#[inline(always)]
fn store<S: pulp::Simd, const V: usize>(x: &mut [f32], v: &[S::f32s; V]) {
    let (x, _) = S::as_mut_simd_f32s(&mut x[..V * S::F32_LANES]);
    x.copy_from_slice(v);
}

/// `c (rows x n) (+)= a (rows x inner) . b (inner x n)`, row-major (`a`'s rows `lda` apart, `b`'s and `c`'s
/// packed), in register tiles of `R` rows x `V` vectors of `S` (`rows` a multiple of `R`, `n` of the tile's lanes);
/// `add`: `c` is added to, else overwritten. The scores (`q . k^T`, the keys transposed) and the values (`p . v`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn product<S: pulp::Simd, const R: usize, const V: usize>(
    simd: S,
    a: &[f32],
    lda: usize,
    b: &[f32],
    n: usize,
    c: &mut [f32],
    rows: usize,
    inner: usize,
    add: bool,
) {
    let w = V * S::F32_LANES;
    // Columns outer: a column tile of `b` (inner x w) stays in L1 while every row tile reads it.
    for c0 in (0..n).step_by(w) {
        for r0 in (0..rows).step_by(R) {
            let mut acc: [[S::f32s; V]; R] = std::array::from_fn(|rr| match add {
                true => load::<S, V>(&c[(r0 + rr) * n + c0..]),
                false => [simd.splat_f32s(0.0); V],
            });
            for j in 0..inner {
                let y = load::<S, V>(&b[j * n + c0..]);
                for (rr, acc) in acc.iter_mut().enumerate() {
                    let x = simd.splat_f32s(a[(r0 + rr) * lda + j]);
                    for (acc, &y) in acc.iter_mut().zip(&y) {
                        *acc = simd.mul_add_f32s(x, y, *acc);
                    }
                }
            }
            for (rr, acc) in acc.iter().enumerate() {
                store::<S, V>(&mut c[(r0 + rr) * n + c0..], acc);
            }
        }
    }
}

impl CustomOp3 for Fused<'_> {
    fn name(&self) -> &'static str {
        "dllm-fused-attention"
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
        match (s1, s2, s3) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => self.run(q, l1, k, l2, v, l3),
            (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => self.run(q, l1, k, l2, v, l3),
            (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => self.run(q, l1, k, l2, v, l3),
            _ => bail!("fused attention: unsupported dtypes {:?}, {:?}, {:?}", s1.dtype(), s2.dtype(), s3.dtype()),
        }
    }
}

/// Attention of `q` `(B, heads, T, d)` (contiguous) over `k`, `v` `(B, kv_heads, keys, d)` (rows contiguous)
/// with the additive `mask`, q scaled by `scale`: the output `(B, T, heads x d)` in q's dtype. CPU tensors only.
pub fn fused(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Mask>, scale: f32) -> candle_core::Result<Tensor> {
    if !q.device().is_cpu() {
        bail!("fused attention runs on the CPU only (no CUDA kernel yet): use run.attention = \"ops\" on a GPU");
    }
    q.apply_op3_no_bwd(k, v, &Fused { mask, scale, isa: Isa::Widest })
}

#[cfg(test)]
mod tests {
    use candle_core::{D, Device};

    use super::{Fused, Isa, Mask, exp_nonpositive, fused};
    use candle_core::{DType, Tensor};

    /// The ops path's attention (the reference): grouped heads repeated, scores, bias, softmax, values, rows.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>, scale: f64) -> Tensor {
        let (b, nh, t, d) = q.dims4().unwrap();
        let nkv = k.dim(1).unwrap();
        let rep = |x: &Tensor| {
            let (b, n, s, d) = x.dims4().unwrap();
            x.unsqueeze(2)
                .unwrap()
                .expand((b, n, nh / nkv, s, d))
                .unwrap()
                .reshape((b, nh, s, d))
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
        };
        let (k, v) = (rep(k), rep(v));
        let q = (q.to_dtype(DType::F64).unwrap() * scale).unwrap();
        let mut att = q.matmul(&k.t().unwrap()).unwrap();
        if let Some(bias) = bias {
            att = att.broadcast_add(&bias.to_dtype(DType::F64).unwrap()).unwrap();
        }
        let att = candle_nn::ops::softmax(&att, D::Minus1).unwrap();
        att.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((b, t, nh * d)).unwrap()
    }

    fn randn(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
        // A small deterministic generator: the test needs spread values, not candle's RNG.
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        let a = a.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let b = b.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
        assert_eq!(a.len(), b.len());
        a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    /// A causal bias `(rows, 1, t, keys)` with the first `pad` keys of batch row 1 masked (queries at the end).
    fn causal_bias(rows: usize, t: usize, keys: usize, pad: usize) -> Tensor {
        let mut v = Vec::new();
        for b in 0..rows {
            for i in 0..t {
                let qi = keys - t + i;
                for j in 0..keys {
                    let ok = (j <= qi && !(b == 1 && j < pad)) || j == qi;
                    v.push(if ok { 0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        Tensor::from_vec(v, (rows, 1, t, keys), &Device::Cpu).unwrap()
    }

    #[test]
    fn matches_the_ops_path_in_f32() {
        // Shapes around the block sizes: grouped and plain heads, short and long key runs, head dims of 64 and
        // 80 (not a multiple of the value kernel's lanes), a decode token and a long bidirectional block.
        for &(b, nh, nkv, t, keys, d, masked) in &[
            (2, 8, 2, 1, 300, 64, false),
            (1, 4, 4, 200, 200, 128, false),
            (2, 6, 2, 37, 37, 80, true),
            (3, 4, 1, 5, 260, 64, true),
            // A causal prefill over three key blocks: its first query blocks skip the blocks they cannot see.
            (2, 4, 2, 300, 300, 64, true),
        ] {
            let q = randn((b, nh, t, d), 1);
            let k = randn((b, nkv, keys, d), 2);
            let v = randn((b, nkv, keys, d), 3);
            let bias = masked.then(|| causal_bias(b, t, keys, 3));
            let mask = bias.as_ref().map(|x| Mask::from_bias(x).unwrap());
            let scale = 1.0 / (d as f64).sqrt();
            let got = fused(&q, &k, &v, mask.as_ref(), scale as f32).unwrap();
            let want = reference(&q, &k, &v, bias.as_ref(), scale);
            let diff = max_diff(&got, &want);
            assert!(diff < 2e-5, "(b {b}, heads {nh}/{nkv}, t {t}, keys {keys}, d {d}): max difference {diff}");
        }
    }

    #[test]
    fn every_instruction_sets_tiles_compute_the_same() {
        // The widest set's tiles run in the other tests; here AVX2's (on an x86-64 CPU that has it) and the scalar
        // fallback's, against the widest, on a grouped causal prefill over two key blocks and a head dim of 80.
        let (b, nh, nkv, t, d) = (2, 4, 2, 150, 80);
        let (q, k, v) = (randn((b, nh, t, d), 11), randn((b, nkv, t, d), 12), randn((b, nkv, t, d), 13));
        let mask = Mask::from_bias(&causal_bias(b, t, t, 3)).unwrap();
        let run = |isa| {
            let op = Fused { mask: Some(&mask), scale: 0.1, isa };
            q.apply_op3_no_bwd(&k, &v, &op).unwrap()
        };
        let widest = run(Isa::Widest);
        let mut others = vec![("scalar", run(Isa::Scalar))];
        #[cfg(target_arch = "x86_64")]
        if pulp::x86::V3::try_new().is_some() {
            others.push(("avx2", run(Isa::Avx2)));
        }
        for (name, got) in others {
            let diff = max_diff(&got, &widest);
            assert!(diff < 1e-5, "{name}: max difference {diff} from the widest instruction set");
        }
    }

    #[test]
    fn reads_a_strided_cache_view_and_bf16() {
        // Keys and values as the KV cache holds them: the filled prefix of a larger buffer (strided), in bf16.
        let (b, nh, nkv, t, keys, cap, d) = (2, 4, 2, 3, 150, 200, 64);
        let q = randn((b, nh, t, d), 4).to_dtype(DType::BF16).unwrap();
        let kc = randn((b, nkv, cap, d), 5).to_dtype(DType::BF16).unwrap();
        let vc = randn((b, nkv, cap, d), 6).to_dtype(DType::BF16).unwrap();
        let (k, v) = (kc.narrow(2, 0, keys).unwrap(), vc.narrow(2, 0, keys).unwrap());
        assert!(!k.is_contiguous());
        let scale = 0.125;
        let got = fused(&q, &k, &v, None, scale as f32).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let want = reference(&q, &k.contiguous().unwrap(), &v.contiguous().unwrap(), None, scale);
        // The one rounding of the output to bf16 (8 bits of mantissa) over values below 2 in size.
        let diff = max_diff(&got, &want);
        assert!(diff < 2.0 * 2f64.powi(-8), "max difference {diff}");
    }

    #[test]
    fn masked_keys_get_no_weight() {
        // Every key but the last masked for batch row 0: its output is exactly that key's value.
        let (t, keys, d) = (1, 140, 64);
        let q = randn((1, 2, t, d), 7);
        let k = randn((1, 2, keys, d), 8);
        let v = randn((1, 2, keys, d), 9);
        let mut bias = vec![f32::NEG_INFINITY; keys];
        bias[keys - 1] = 0.0;
        let bias = Tensor::from_vec(bias, (1, 1, 1, keys), &Device::Cpu).unwrap();
        let got = fused(&q, &k, &v, Some(&Mask::from_bias(&bias).unwrap()), 0.1).unwrap();
        let got = got.reshape((2, d)).unwrap();
        let want = v.narrow(2, keys - 1, 1).unwrap().reshape((2, d)).unwrap();
        assert_eq!(max_diff(&got, &want), 0.0);
    }

    #[test]
    fn exp_is_within_a_few_ulp() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let (got, want) = (exp_nonpositive(x) as f64, (x as f64).exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 4.0 * f32::EPSILON as f64, "relative error {worst}");
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
    }
}
