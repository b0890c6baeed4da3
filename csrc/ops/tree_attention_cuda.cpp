// CUDA launcher of torch.ops.specdec.tree_attention: tensor checks, workspace, stream, dispatch to
// the torch-free kernels in csrc/kernels/. Compiled only in the CUDA build (SPECDEC_WITH_CUDA),
// because a CPU-only torch has no CUDA runtime to link against. Registered for the CUDA dispatch
// key in csrc/bindings/torch_ops.cpp.
//
// The ancestor bitmask and prefix lengths are NOT validated here (that would cost a device-to-host
// sync per call): specdec.ops.tree_attention(validate=True) checks them on the device with torch ops.
// Kernel reads stay in bounds for any input: any mask bits, and prefix lengths the kernels clamp to
// [0, S - N] (an unvalidated out-of-range length gives a wrong answer, never an out-of-bounds read).
#ifdef SPECDEC_WITH_CUDA

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <atomic>

#include "kernels/tree_attention_params.h"
#include "ops/launchers.h"
#include "ops/tree_attention_checks.h"

namespace specdec {
namespace {

// cp.async copies 16-byte chunks of K/V rows: base pointer and row/batch/head strides must keep
// every row 16-byte aligned, else a contiguous copy is used.
at::Tensor rows_16b_aligned(const at::Tensor& t) {
  const int64_t elems = 16 / t.element_size();
  const bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % elems == 0 &&
                  t.stride(1) % elems == 0 && t.stride(2) % elems == 0;
  return ok ? t : t.contiguous();
}

// The device's SM count, queried once per device (the plan needs it on every call). A race between
// two first calls only queries twice.
int multiprocessors(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  const bool cache = device >= 0 && device < kMaxDevices;
  if (cache) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (cache) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace

// q [B, N, Hq, D], k/v [B, S, Hkv, D] (one dtype: float32, float16 or bfloat16; head dim at most
// kernels::kMaxHeadDim), tree_mask int64 [B, N, ceil(N/64)], prefix_lens int32 [B], all on one CUDA
// device -> out [B, N, Hq, D] in q's dtype.
at::Tensor tree_attention_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                               const at::Tensor& mask_in, const at::Tensor& prefix_in, std::optional<double> scale) {
  const TreeAttentionSizes sz = check_tree_attention_inputs(q_in, k_in, v_in, mask_in, prefix_in, scale);
  TORCH_CHECK_VALUE(sz.head_dim <= kernels::kMaxHeadDim, "tree_attention: the CUDA kernel takes head dims up to ",
                    kernels::kMaxHeadDim, ", got ", sz.head_dim, " (use impl='reference')");
  const c10::cuda::CUDAGuard guard(q_in.device());
  const at::Tensor q = last_dim_contiguous(q_in);
  const at::Tensor k = rows_16b_aligned(last_dim_contiguous(k_in));
  const at::Tensor v = rows_16b_aligned(last_dim_contiguous(v_in));
  const at::Tensor mask = mask_in.contiguous(), prefix = prefix_in.contiguous();
  at::Tensor out = at::empty({sz.batch, sz.nodes, sz.q_heads, sz.head_dim}, q.options());
  if (out.numel() == 0) return out;

  kernels::TreeAttentionParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.mask = mask.data_ptr<int64_t>();
  p.prefix = prefix.data_ptr<int32_t>();
  p.batch = static_cast<int>(sz.batch);
  p.nodes = static_cast<int>(sz.nodes);
  p.q_heads = static_cast<int>(sz.q_heads);
  p.kv_heads = static_cast<int>(sz.kv_heads);
  p.head_dim = static_cast<int>(sz.head_dim);
  p.seq = static_cast<int>(sz.seq);
  p.words = static_cast<int>(sz.words);
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i);
    p.k_stride[i] = k.stride(i);
    p.v_stride[i] = v.stride(i);
  }
  p.scale = sz.scale;
  const auto dtype = kernel_dtype(q.scalar_type());
  const int sms = multiprocessors(q.get_device());
  const kernels::TreeAttentionPlan plan = kernels::plan_tree_attention(p, dtype, sms);
  p.num_splits = plan.num_splits;
  p.split_keys = plan.split_keys;
  at::Tensor partial_out, partial_lse;
  if (plan.num_splits > 1) {
    const auto f32 = q.options().dtype(at::kFloat);
    partial_out = at::empty({plan.num_splits, sz.batch, sz.nodes, sz.q_heads, sz.head_dim}, f32);
    partial_lse = at::empty({plan.num_splits, sz.batch, sz.nodes, sz.q_heads}, f32);
    p.partial_out = partial_out.data_ptr<float>();
    p.partial_lse = partial_lse.data_ptr<float>();
  }
  const int err = kernels::launch_tree_attention(p, plan, dtype, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "tree_attention: CUDA kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace specdec

#endif  // SPECDEC_WITH_CUDA
