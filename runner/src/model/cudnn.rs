//! Fused attention on CUDA through cuDNN (`run.attention = "cudnn"`, the `cudnn` cargo feature): cuDNN's
//! scaled-dot-product attention (its flash-attention engines) from q, k, v as the forward holds them to the rows
//! the output projection reads. The scores never reach memory; the softmax and the sums run in f32, the inputs and
//! the output in the model dtype (bf16 or f16: cuDNN has no f32 flash attention).
//!
//! The C++ side (`cudnn_attention.cpp`, cuDNN's frontend headers, compiled by `runner/build.rs`) builds one cuDNN
//! graph per shape, caches it, and runs it on candle's stream; cuDNN itself is loaded at run time
//! (`libcudnn.so.9`). Only forwards of more than one query use it (a prefill, a LLaDA step): a decode token's
//! shape changes at every token (a graph per length) and its one row of scores gains nothing from fusing.
//!
//! Off by default and CUDA only; what only a GPU can confirm is in `runner/PERF.md`.

use candle_core::Tensor;

/// What a build without the `cudnn` feature says when cuDNN's attention is asked for (before loading a model, and
/// at a forward as a backstop).
pub const NOT_BUILT: &str = "run.attention = \"cudnn\": this dllm-bench was built without cuDNN; fix: rebuild with \
                             `cargo build --release -p runner --features cudnn` (cuDNN's headers: \
                             scripts/install-cudnn-headers.sh), or use run.attention = \"ops\"";

/// Attention of `q` `(b, heads, t, d)` against `k`, `v` `(b, kv_heads, keys, d)` (any strides, unit stride along
/// `d`; `heads` a multiple of `kv_heads`) with the additive `bias` `(b | 1, 1, t | 1, keys)` (or none) and the
/// scale: `(b, t, heads, d)` contiguous, i.e. the rows `(b * t, heads * d)` of the output projection.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>, scale: f32) -> candle_core::Result<Tensor> {
    #[cfg(feature = "cudnn")]
    return imp::attention(q, k, v, bias, scale);
    #[cfg(not(feature = "cudnn"))]
    {
        let _ = (q, k, v, bias, scale);
        candle_core::bail!("{NOT_BUILT}")
    }
}

#[cfg(feature = "cudnn")]
#[allow(unsafe_code)]
mod imp {
    use std::ffi::{CStr, c_char, c_int, c_void};

    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::CudaStorageSlice;
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr};
    use candle_core::cuda_backend::cudarc::driver::{DevicePtr, DevicePtrMut};
    use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Shape, Storage, Tensor, bail};

    unsafe extern "C" {
        /// `cudnn_attention.cpp`: 0 when `o` is written, 1 when the workspace is short (`workspace_needed` says
        /// how much), -1 on an error (its text in `err`).
        fn dllm_cudnn_sdpa(
            stream: *mut c_void,
            dtype: c_int,
            q_dims: *const i64,
            q_strides: *const i64,
            q: *const c_void,
            k_dims: *const i64,
            k_strides: *const i64,
            k: *const c_void,
            v_dims: *const i64,
            v_strides: *const i64,
            v: *const c_void,
            o_strides: *const i64,
            o: *mut c_void,
            bias_dims: *const i64,
            bias_strides: *const i64,
            bias: *const c_void,
            scale: f32,
            workspace: *mut c_void,
            workspace_len: i64,
            workspace_needed: *mut i64,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
    }

    pub(super) fn attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        bias: Option<&Tensor>,
        scale: f32,
    ) -> candle_core::Result<Tensor> {
        let t = q.dim(2)?;
        // cuDNN reads a bias of the full query length: a key-only mask `(b, 1, 1, keys)` is broadcast over the
        // queries first (only padded batches have one).
        let bias = match bias {
            Some(m) => {
                let (bb, _, _, keys) = m.dims4()?;
                Some(m.broadcast_as((bb, 1, t, keys))?.contiguous()?)
            }
            None => None,
        };
        q.apply_op3_no_bwd(k, v, &Sdpa { bias, scale })
    }

    struct Sdpa {
        bias: Option<Tensor>,
        scale: f32,
    }

    /// Dims and element strides of a 4-D layout, as cuDNN takes them.
    fn dims_strides(l: &Layout, what: &str) -> candle_core::Result<([i64; 4], [i64; 4])> {
        let d = l.dims();
        let s = l.stride();
        if d.len() != 4 || s[3] != 1 {
            bail!(
                "cuDNN attention: {what} {d:?} with strides {s:?} (4-D with unit stride along the head dim expected)"
            );
        }
        Ok(([d[0], d[1], d[2], d[3]].map(|x| x as i64), [s[0], s[1], s[2], s[3]].map(|x| x as i64)))
    }

    impl CustomOp3 for Sdpa {
        fn name(&self) -> &'static str {
            "dllm-cudnn-sdpa"
        }

        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            bail!("cuDNN attention runs on CUDA only (run.attention = \"cudnn\")")
        }

        fn cuda_fwd(
            &self,
            sq: &CudaStorage,
            lq: &Layout,
            sk: &CudaStorage,
            lk: &Layout,
            sv: &CudaStorage,
            lv: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            match (&sq.slice, &sk.slice, &sv.slice) {
                (CudaStorageSlice::BF16(q), CudaStorageSlice::BF16(k), CudaStorageSlice::BF16(v)) => {
                    self.run(sq, (q, lq), (k, lk), (v, lv), 0)
                }
                (CudaStorageSlice::F16(q), CudaStorageSlice::F16(k), CudaStorageSlice::F16(v)) => {
                    self.run(sq, (q, lq), (k, lk), (v, lv), 1)
                }
                _ => bail!("cuDNN attention: bf16 or f16 q, k, v expected, got {:?}", sq.dtype()),
            }
        }
    }

    type Operand<'a, T> = (&'a CudaSlice<T>, &'a Layout);

    impl Sdpa {
        fn run<T: candle_core::cuda_backend::CudaDType + DeviceRepr>(
            &self,
            sq: &CudaStorage,
            (q, lq): Operand<'_, T>,
            (k, lk): Operand<'_, T>,
            (v, lv): Operand<'_, T>,
            dtype: c_int,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let dev = &sq.device;
            let stream = dev.cuda_stream();
            let (qd, qs) = dims_strides(lq, "q")?;
            let (kd, ks) = dims_strides(lk, "k")?;
            let (vd, vs) = dims_strides(lv, "v")?;
            let [b, h, t, d] = qd.map(|x| x as usize);
            // The output `(b, t, h, d)` contiguous, described to cuDNN as `(b, h, t, d)` with its strides.
            let os = [(t * h * d) as i64, d as i64, (h * d) as i64, 1];
            let elem = std::mem::size_of::<T>() as u64;
            let bias_guard = self.bias.as_ref().map(Tensor::storage_and_layout);
            let bias = match &bias_guard {
                Some((storage, l)) => {
                    let Storage::Cuda(cs) = &**storage else { bail!("cuDNN attention: the bias is not on CUDA") };
                    let (bd, bs) = dims_strides(l, "bias")?;
                    let ptr = match (&cs.slice, dtype) {
                        (CudaStorageSlice::BF16(s), 0) => s.device_ptr(&stream).0,
                        (CudaStorageSlice::F16(s), 1) => s.device_ptr(&stream).0,
                        _ => bail!("cuDNN attention: the bias must have q's dtype, got {:?}", cs.dtype()),
                    };
                    Some((bd, bs, ptr + l.start_offset() as u64 * elem))
                }
                None => None,
            };
            let at = |s: &CudaSlice<T>, l: &Layout| s.device_ptr(&stream).0 + l.start_offset() as u64 * elem;
            let (qp, kp, vp) = (at(q, lq), at(k, lk), at(v, lv));
            // SAFETY: every element is written by cuDNN below before the tensor is read.
            let mut o = unsafe { dev.alloc::<T>(b * t * h * d) }?;
            let op = o.device_ptr_mut(&stream).0;
            let mut workspace: Option<CudaSlice<u8>> = None;
            loop {
                let (ws_ptr, ws_len) = match &workspace {
                    Some(w) => (w.device_ptr(&stream).0 as *mut c_void, w.len() as i64),
                    None => (std::ptr::null_mut(), 0),
                };
                let mut needed = 0i64;
                let mut err = [0 as c_char; 1024];
                let (bd, bs, bp) = match &bias {
                    Some((bd, bs, bp)) => (bd.as_ptr(), bs.as_ptr(), *bp as *const c_void),
                    None => (std::ptr::null(), std::ptr::null(), std::ptr::null()),
                };
                // SAFETY: the pointers are live device allocations of the shapes and strides passed beside them (the
                // layouts candle checked), the host arrays outlive the call, `err` holds its stated length.
                let rc = unsafe {
                    dllm_cudnn_sdpa(
                        stream.cu_stream().cast(),
                        dtype,
                        qd.as_ptr(),
                        qs.as_ptr(),
                        qp as *const c_void,
                        kd.as_ptr(),
                        ks.as_ptr(),
                        kp as *const c_void,
                        vd.as_ptr(),
                        vs.as_ptr(),
                        vp as *const c_void,
                        os.as_ptr(),
                        op as *mut c_void,
                        bd,
                        bs,
                        bp,
                        self.scale,
                        ws_ptr,
                        ws_len,
                        &raw mut needed,
                        err.as_mut_ptr(),
                        err.len(),
                    )
                };
                match rc {
                    0 => break,
                    1 if workspace.is_none() => {
                        // SAFETY: cuDNN's scratch space, written before it is read.
                        workspace = Some(unsafe { dev.alloc::<u8>(needed.max(1) as usize) }?);
                    }
                    _ => {
                        // SAFETY: the C side writes a NUL-terminated message into `err` (zeroed, so terminated).
                        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
                        bail!("cuDNN attention: {msg}");
                    }
                }
            }
            drop(bias_guard);
            Ok((CudaStorage::wrap_cuda_slice(o, dev.clone()), Shape::from((b, t, h, d))))
        }
    }
}
