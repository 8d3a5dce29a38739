// The runner's CUDA kernels (runner/src/model/kernels.cu) run on the host, against naive references: every
// thread of a block is a std::thread, `__syncthreads` and the warp shuffles are barriers, so the kernels' indexing,
// strides, tables and block reductions are checked on a machine without a GPU. `scripts/check-cuda-kernels.sh`
// builds and runs it (CUDA's headers for the bf16/f16 types, g++ with C++20); exit status 1 names what differs.
// What the host cannot show: the device's own rounding of expf/rsqrtf and nvcc's contractions (a GPU run does).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

// --- a CUDA block on host threads -------------------------------------------------------------------------------
struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};
thread_local Dim3 emu_thread;
thread_local Dim3 emu_block;
Dim3 emu_block_dim;
std::barrier<> *emu_barrier = nullptr;
float emu_lanes[1024];

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx emu_thread
#define blockIdx emu_block
#define blockDim emu_block_dim

inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
// Every thread of the block calls it together (the kernels' reductions are uniform): write, wait, read the partner.
inline float __shfl_xor_sync(unsigned, float v, int mask, int) {
    const unsigned t = threadIdx.x;
    emu_lanes[t] = v;
    __syncthreads();
    const float r = emu_lanes[(t & ~31u) | ((t & 31u) ^ (unsigned)mask)];
    __syncthreads();
    return r;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline __half hexp(__half x) { return __float2half(std::exp(__half2float(x))); }

#include "kernels.cu"

// Runs `kernel` over `grid` blocks of `block` threads; `threaded`: one std::thread per CUDA thread (kernels with
// barriers), else the threads one after the other (element-wise kernels).
void launch(unsigned grid, unsigned block, bool threaded, const std::function<void()> &kernel) {
    emu_block_dim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        if (!threaded) {
            emu_block.x = b;
            for (unsigned t = 0; t < block; ++t) {
                emu_thread.x = t;
                kernel();
            }
            continue;
        }
        std::barrier<> barrier(block);
        emu_barrier = &barrier;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t) {
            threads.emplace_back([&, t] {
                emu_block.x = b;
                emu_thread.x = t;
                kernel();
            });
        }
        for (auto &th : threads) {
            th.join();
        }
    }
}

// --- checks -----------------------------------------------------------------------------------------------------
int failures = 0;

void expect(bool ok, const std::string &what) {
    std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
    failures += ok ? 0 : 1;
}

std::mt19937 rng(7);
float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }

template <typename T> std::vector<T> values(size_t n, float scale = 1.0f) {
    std::vector<T> v(n);
    for (auto &x : v) {
        x = narrow<T>(normal() * scale);
    }
    return v;
}

std::string sci(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2e", v);
    return b;
}

// Largest difference, relative to max(1, |reference|).
template <typename T> double worst(const std::vector<T> &got, const std::vector<double> &want) {
    double w = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        w = std::max(w, std::abs(widen(got[i]) - want[i]) / std::max(1.0, std::abs(want[i])));
    }
    return w;
}

template <typename T>
void rms_norm_case(const char *name, void (*kernel)(const T *, const T *, T *, int, float), int rows, int cols,
                   double tol) {
    const float eps = 1e-5f;
    auto x = values<T>((size_t)rows * cols, 2.0f);
    auto w = values<T>(cols);
    std::vector<T> y((size_t)rows * cols);
    const unsigned threads = cols < 1024 ? 32 : 1024;
    launch(rows, threads, true, [&] { kernel(x.data(), w.data(), y.data(), cols, eps); });
    std::vector<double> want(y.size());
    for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int c = 0; c < cols; ++c) {
            sum += (double)widen(x[r * cols + c]) * widen(x[r * cols + c]);
        }
        const double scale = 1.0 / std::sqrt(sum / cols + eps);
        for (int c = 0; c < cols; ++c) {
            // The normed value rounded to T before the weight, as the kernel (and candle's ops) round it.
            want[r * cols + c] = widen(narrow<T>((float)(scale * widen(x[r * cols + c])))) * widen(w[c]);
        }
    }
    const double d = worst(y, want);
    expect(d <= tol, std::string("rms_norm ") + name + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                         " (block " + std::to_string(threads) + "): worst " + sci(d));
}

template <typename T>
void rope_case(const char *name,
               void (*kernel)(const T *, const float *, const float *, T *, uint32_t, uint32_t, uint32_t, uint32_t,
                              uint64_t, uint64_t, uint64_t, uint32_t),
               bool per_row, double tol) {
    // k of a fused projection (B, T, heads + 2 kv, D): the kv heads from column `heads * D` on, strided rows.
    const uint32_t b = 2, t = 5, heads = 4, kv = 2, d = 8, half = d / 2, all = heads + 2 * kv;
    auto qkv = values<T>((size_t)b * t * all * d);
    const uint64_t sb = (uint64_t)t * all * d, st = (uint64_t)all * d, sh = d, offset = (uint64_t)heads * d;
    const uint32_t rows = per_row ? b : 1;
    std::vector<float> cos((size_t)rows * t * half), sin(cos.size());
    for (size_t i = 0; i < cos.size(); ++i) {
        const float a = normal() * 3.0f;
        cos[i] = std::cos(a);
        sin[i] = std::sin(a);
    }
    std::vector<T> y((size_t)b * kv * t * d);
    const uint64_t n = (uint64_t)b * kv * t * half;
    launch((unsigned)((n + 255) / 256), 256, false, [&] {
        kernel(qkv.data() + offset, cos.data(), sin.data(), y.data(), b, t, kv, d, sb, st, sh, per_row ? 1 : 0);
    });
    std::vector<double> want(y.size());
    for (uint32_t bi = 0; bi < b; ++bi) {
        for (uint32_t hi = 0; hi < kv; ++hi) {
            for (uint32_t ti = 0; ti < t; ++ti) {
                const T *src = qkv.data() + offset + bi * sb + ti * st + hi * sh;
                const size_t table = ((per_row ? bi * t : 0) + ti) * half;
                double *dst = want.data() + (((size_t)bi * kv + hi) * t + ti) * d;
                for (uint32_t i = 0; i < half; ++i) {
                    const double x1 = widen(src[i]), x2 = widen(src[i + half]);
                    dst[i] = x1 * cos[table + i] - x2 * sin[table + i];
                    dst[i + half] = x1 * sin[table + i] + x2 * cos[table + i];
                }
            }
        }
    }
    const double w = worst(y, want);
    expect(w <= tol, std::string("rope_to_heads ") + name + (per_row ? " per-row tables" : " shared tables") +
                         ", strided k view: worst " + sci(w));
}

template <typename T>
void silu_case(const char *name, void (*kernel)(const T *, T *, uint32_t, uint32_t), double tol) {
    const uint32_t rows = 5, inner = 37;
    auto x = values<T>((size_t)rows * 2 * inner, 3.0f);
    std::vector<T> y((size_t)rows * inner);
    launch((rows * inner + 255) / 256, 256, false, [&] { kernel(x.data(), y.data(), rows, inner); });
    std::vector<double> want(y.size());
    for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t c = 0; c < inner; ++c) {
            const double g = widen(x[r * 2 * inner + c]), u = widen(x[r * 2 * inner + inner + c]);
            want[r * inner + c] = g / (1.0 + std::exp(-g)) * u;
        }
    }
    const double w = worst(y, want);
    expect(w <= tol, std::string("silu_mul ") + name + ": worst " + sci(w));
}

int main() {
    // f32: the references' f64 sums against the kernels' f32 ones. bf16 / f16: a few roundings of the type
    // (bf16 keeps 8 bits: 2^-8 = 0.0039 relative per rounding).
    rms_norm_case<float>("f32", dllm_rms_norm_f32, 3, 100, 1e-5);
    rms_norm_case<float>("f32", dllm_rms_norm_f32, 2, 2048, 1e-5);
    rms_norm_case<__nv_bfloat16>("bf16", dllm_rms_norm_bf16, 2, 4096, 8e-3);
    rms_norm_case<__half>("f16", dllm_rms_norm_f16, 2, 1000, 2e-3);
    for (bool per_row : {false, true}) {
        rope_case<float>("f32", dllm_rope_to_heads_f32, per_row, 1e-6);
        rope_case<__nv_bfloat16>("bf16", dllm_rope_to_heads_bf16, per_row, 8e-3);
    }
    silu_case<float>("f32", dllm_silu_mul_f32, 1e-6);
    silu_case<__nv_bfloat16>("bf16", dllm_silu_mul_bf16, 1.6e-2);
    silu_case<__half>("f16", dllm_silu_mul_f16, 4e-3);
    std::printf("%s\n", failures == 0 ? "all kernels agree with the references" : "kernels differ (see FAIL)");
    return failures == 0 ? 0 : 1;
}
