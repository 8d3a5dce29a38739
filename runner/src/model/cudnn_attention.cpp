// Fused attention on CUDA through cuDNN's scaled-dot-product attention (its flash-attention engines), for
// `run.attention = "cudnn"` (the `cudnn` cargo feature; compiled by `runner/build.rs`). One C function, called from
// `attention.rs`: it builds (once per shape, then cached) a cuDNN frontend graph Q, K, V (, bias) -> O on the
// caller's stream and runs it. The scores never reach memory; softmax and accumulation in f32.
//
// cuDNN is loaded at run time (`libcudnn.so.9`, the frontend's dynamic loading): a binary built with the feature
// runs without cuDNN until this attention is asked for, and then says what is missing.

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

// The handle of libcudnn that the frontend's dynamic loading resolves every cuDNN call through.
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

enum Uid : int64_t { Q_UID = 1, K_UID, V_UID, O_UID, BIAS_UID };

struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace = 0;
};

std::mutex lock;
cudnnHandle_t handle = nullptr;
std::map<std::vector<int64_t>, Plan> plans;

void say(char *err, size_t len, const std::string &message) {
    if (err != nullptr && len > 0) {
        std::snprintf(err, len, "%s", message.c_str());
    }
}

std::vector<int64_t> four(const int64_t *p) { return {p[0], p[1], p[2], p[3]}; }

// Throws with the stage's name when a frontend call fails.
void check(fe::error_t status, const char *stage) {
    if (!status.is_good()) {
        throw std::runtime_error(std::string("cuDNN ") + stage + ": " + status.get_message());
    }
}

Plan build(int dtype, const int64_t *q_dims, const int64_t *q_strides, const int64_t *k_dims,
           const int64_t *k_strides, const int64_t *v_dims, const int64_t *v_strides, const int64_t *o_strides,
           const int64_t *bias_dims, const int64_t *bias_strides, float scale) {
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(dtype == 0 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, Uid uid, const int64_t *dims, const int64_t *strides) {
        return graph->tensor(
            fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(four(dims)).set_stride(four(strides)));
    };
    auto q = tensor("Q", Q_UID, q_dims, q_strides);
    auto k = tensor("K", K_UID, k_dims, k_strides);
    auto v = tensor("V", V_UID, v_dims, v_strides);
    auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(scale);
    if (bias_dims != nullptr) {
        options.set_bias(tensor("bias", BIAS_UID, bias_dims, bias_strides));
    }
    auto outputs = graph->sdpa(q, k, v, options);
    const std::vector<int64_t> o_dims = {q_dims[0], q_dims[1], q_dims[2], v_dims[3]};
    outputs[0]->set_output(true).set_uid(O_UID).set_dim(o_dims).set_stride(four(o_strides));
    check(graph->validate(), "validate");
    check(graph->build_operation_graph(handle), "build_operation_graph");
    check(graph->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
    check(graph->check_support(handle), "check_support");
    check(graph->build_plans(handle), "build_plans");
    Plan plan;
    plan.graph = graph;
    check(graph->get_workspace_size(plan.workspace), "get_workspace_size");
    return plan;
}

}  // namespace

// Attention O = softmax(scale Q K^T + bias) V of 4-D tensors (batch, heads, sequence, head dim) with any strides
// (unit stride along the head dim): Q (b, hq, sq, d), K and V (b, hkv, skv, d) with hq a multiple of hkv, O written
// with `o_strides`, the bias (optional: null dims) broadcast by its dims of 1. dtype: 0 bf16, 1 f16. Returns 0 when
// O is written; 1 when `workspace_len` is below the bytes the plan needs (written to `workspace_needed`: call
// again with that much); -1 on an error (its text in `err`).
extern "C" int dllm_cudnn_sdpa(void *stream, int dtype, const int64_t *q_dims, const int64_t *q_strides, const void *q,
                               const int64_t *k_dims, const int64_t *k_strides, const void *k, const int64_t *v_dims,
                               const int64_t *v_strides, const void *v, const int64_t *o_strides, void *o,
                               const int64_t *bias_dims, const int64_t *bias_strides, const void *bias, float scale,
                               void *workspace, int64_t workspace_len, int64_t *workspace_needed, char *err,
                               size_t err_len) {
    try {
        std::lock_guard<std::mutex> guard(lock);
        if (cudnn_frontend::cudnn_dlhandle == nullptr) {
            void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
            if (lib == nullptr) {
                const char *why = dlerror();
                say(err, err_len,
                    std::string("cannot load libcudnn.so.9 (cuDNN 9): ") + (why ? why : "not found") +
                        "; put the folder that holds it on LD_LIBRARY_PATH (PyTorch's wheels carry one, under "
                        "nvidia/cudnn/lib)");
                return -1;
            }
            cudnn_frontend::cudnn_dlhandle = lib;
        }
        if (handle == nullptr) {
            const cudnnStatus_t status = fe::detail::create_handle(&handle);
            if (status != CUDNN_STATUS_SUCCESS) {
                handle = nullptr;
                say(err, err_len, std::string("cudnnCreate: ") + fe::detail::get_error_string(status));
                return -1;
            }
        }
        const cudnnStatus_t status = fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream));
        if (status != CUDNN_STATUS_SUCCESS) {
            say(err, err_len, std::string("cudnnSetStream: ") + fe::detail::get_error_string(status));
            return -1;
        }
        std::vector<int64_t> key = {dtype};
        for (const int64_t *p : {q_dims, q_strides, k_dims, k_strides, v_dims, v_strides, o_strides}) {
            key.insert(key.end(), p, p + 4);
        }
        if (bias_dims != nullptr) {
            key.insert(key.end(), bias_dims, bias_dims + 4);
            key.insert(key.end(), bias_strides, bias_strides + 4);
        }
        uint32_t scale_bits = 0;
        std::memcpy(&scale_bits, &scale, sizeof scale_bits);
        key.push_back(scale_bits);
        auto found = plans.find(key);
        if (found == plans.end()) {
            Plan plan = build(dtype, q_dims, q_strides, k_dims, k_strides, v_dims, v_strides, o_strides, bias_dims,
                              bias_strides, scale);
            found = plans.emplace(key, plan).first;
        }
        const Plan &plan = found->second;
        *workspace_needed = plan.workspace;
        if (plan.workspace > workspace_len) {
            return 1;
        }
        std::unordered_map<int64_t, void *> pack = {
            {Q_UID, const_cast<void *>(q)}, {K_UID, const_cast<void *>(k)}, {V_UID, const_cast<void *>(v)}, {O_UID, o}};
        if (bias_dims != nullptr) {
            pack[BIAS_UID] = const_cast<void *>(bias);
        }
        check(plan.graph->execute(handle, pack, workspace), "execute");
        return 0;
    } catch (const std::exception &e) {
        say(err, err_len, e.what());
        return -1;
    }
}
