// The CUDA versions of the fused kernels of `ops.rs` (`run.cuda_fused_ops`): RMSNorm, RoPE to the heads' layout,
// SwiGLU, one launch each instead of candle's two to four ops. Compiled to PTX by `runner/build.rs` with the
// `cuda` feature. Each computes what the candle CUDA ops it replaces compute, in the same order (the same f32
// sums, the same roundings to the model dtype), so that tokens can stay the same; only a GPU run can confirm it.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, m, 32);
    }
    return x;
}

// One row per block of `blockDim.x` threads (32 below 1024 columns, else 1024, as candle's rmsnorm): the squares
// summed in f32 per thread, per warp, then across warps; the row scaled by rsqrt(mean + eps) and rounded to T (what
// casting to f32, candle's rmsnorm with a weight of ones and casting back give), then multiplied by the weight in T
// (candle's broadcast multiply: one rounding of the exact product).
template <typename T>
__device__ void rms_norm(const T *x, const T *w, T *y, int cols, float eps) {
    const int tid = threadIdx.x;
    const int threads = blockDim.x;
    const T *xr = x + (size_t)blockIdx.x * cols;
    T *yr = y + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = tid; c < cols; c += threads) {
        const float v = widen(xr[c]);
        acc += v * v;
    }
    acc = warp_sum(acc);
    if (threads > 32) {
        __shared__ float part[32];
        const int warp = tid / 32;
        const int lane = tid % 32;
        if (lane == 0) {
            part[warp] = acc;
        }
        __syncthreads();
        acc = lane < threads / 32 ? part[lane] : 0.0f;
        acc = warp_sum(acc);
    }
    const float scale = rsqrtf(acc / cols + eps);
    for (int c = tid; c < cols; c += threads) {
        const T normed = narrow<T>(scale * widen(xr[c]));
        yr[c] = narrow<T>(widen(normed) * widen(w[c]));
    }
}

// Rotate-half RoPE of `x`, a (B, T, H, D) view with element strides (sb, st, sh) and unit stride along D, written
// as (B, H, T, D) contiguous. One thread per (b, h, t, i < D/2). The tables are f32 `(T, D/2)` or, with
// `per_row`, `(B, T, D/2)`. In f32, term for term as candle's rope on the f32 copy, then rounded to T.
template <typename T>
__device__ void rope_to_heads(const T *x, const float *cos, const float *sin, T *y, uint32_t b, uint32_t t,
                              uint32_t h, uint32_t d, uint64_t sb, uint64_t st, uint64_t sh, uint32_t per_row) {
    const uint32_t half = d / 2;
    const uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (uint64_t)b * h * t * half) {
        return;
    }
    const uint32_t i = idx % half;
    const uint32_t ti = (idx / half) % t;
    const uint32_t hi = (idx / ((uint64_t)half * t)) % h;
    const uint32_t bi = idx / ((uint64_t)half * t * h);
    const uint64_t src = bi * sb + ti * st + hi * sh;
    const uint64_t table = ((per_row ? (uint64_t)bi * t : 0) + ti) * half + i;
    const float c = cos[table];
    const float s = sin[table];
    const float x1 = widen(x[src + i]);
    const float x2 = widen(x[src + i + half]);
    T *dst = y + (((uint64_t)bi * h + hi) * t + ti) * d;
    dst[i] = narrow<T>(x1 * c - x2 * s);
    dst[i + half] = narrow<T>(x1 * s + x2 * c);
}

// SwiGLU of the fused gate/up rows (rows x 2I, gate first) into rows x I, with candle's CUDA silu and mul: f32 and
// bf16 compute silu in f32 and round once, f16 in half arithmetic step by step; then one rounded product.
__device__ __forceinline__ float silu_mul_one(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ __forceinline__ __nv_bfloat16 silu_mul_one(__nv_bfloat16 g, __nv_bfloat16 u) {
    const float gf = __bfloat162float(g);
    const __nv_bfloat16 s = __float2bfloat16(gf / (1.0f + expf(-gf)));
    return __float2bfloat16(__bfloat162float(s) * __bfloat162float(u));
}
__device__ __forceinline__ __half silu_mul_one(__half g, __half u) {
    const __half s = g / (__float2half(1.0f) + hexp(-g));
    return s * u;
}

template <typename T>
__device__ void silu_mul(const T *x, T *y, uint32_t rows, uint32_t inner) {
    const uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (uint64_t)rows * inner) {
        return;
    }
    const uint64_t r = idx / inner;
    const uint64_t c = idx % inner;
    const T *row = x + r * 2 * inner;
    y[idx] = silu_mul_one(row[c], row[inner + c]);
}

#define KERNELS(T, SUFFIX)                                                                                          \
    extern "C" __global__ void dllm_rms_norm_##SUFFIX(const T *x, const T *w, T *y, int cols, float eps) {         \
        rms_norm<T>(x, w, y, cols, eps);                                                                            \
    }                                                                                                               \
    extern "C" __global__ void dllm_rope_to_heads_##SUFFIX(const T *x, const float *cos, const float *sin, T *y,   \
                                                           uint32_t b, uint32_t t, uint32_t h, uint32_t d,         \
                                                           uint64_t sb, uint64_t st, uint64_t sh,                  \
                                                           uint32_t per_row) {                                      \
        rope_to_heads<T>(x, cos, sin, y, b, t, h, d, sb, st, sh, per_row);                                          \
    }                                                                                                               \
    extern "C" __global__ void dllm_silu_mul_##SUFFIX(const T *x, T *y, uint32_t rows, uint32_t inner) {           \
        silu_mul<T>(x, y, rows, inner);                                                                             \
    }

KERNELS(float, f32)
KERNELS(__nv_bfloat16, bf16)
KERNELS(__half, f16)
