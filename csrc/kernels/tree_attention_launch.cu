// Host side of the CUDA tree-attention kernels: the plan (kernel choice, prefix split) and the
// launches, with the kernel templates instantiated here. Torch-free; called by
// csrc/ops/tree_attention_cuda.cpp. Kernels: tree_attention.cuh.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/tree_attention.cuh"

namespace specdec {
namespace kernels {
namespace {

constexpr int kMinTilesPerSplit = 4;  // keep each split's loop long enough to amortise its reduction
constexpr int kMaxDevices = 64;

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Raises the kernel's dynamic shared-memory limit once per device (an idempotent driver call that
// cost a few microseconds on every launch). One flag per instantiation and device; a race between
// two first launches only sets the same attribute twice.
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, size_t smem) {
  static std::atomic<bool> done[kMaxDevices] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device < kMaxDevices;
  if (cached && done[device].load(std::memory_order_acquire)) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err == cudaSuccess && cached) done[device].store(true, std::memory_order_release);
  return err;
}

template <typename T, int D>
cudaError_t launch_mma(const TreeAttentionParams& p, cudaStream_t stream) {
  const size_t smem = 2 * 2 * kKeyTile * (D + kPad) * sizeof(T);
  auto kernel = tree_attention_mma_kernel<T, D>;
  cudaError_t err = allow_dynamic_smem(kernel, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(ceil_div(static_cast<int64_t>(p.nodes) * (p.q_heads / p.kv_heads), kRowsPerCta),
                  p.batch * p.kv_heads, p.num_splits);
  kernel<<<grid, kWarps * 32, smem, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess || p.num_splits == 1) return err;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nodes * p.q_heads;
  combine_splits_kernel<T><<<ceil_div(rows, 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const TreeAttentionParams& p, bool tensor_cores, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (tensor_cores) return p.head_dim == 64 ? launch_mma<T, 64>(p, stream) : launch_mma<T, 128>(p, stream);
  }
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nodes * p.q_heads;
  tree_attention_scalar_kernel<T><<<ceil_div(rows, 4), 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

TreeAttentionPlan plan_tree_attention(const TreeAttentionParams& p, DType dtype, int sm_count) {
  TreeAttentionPlan plan{};
  plan.tensor_cores = dtype != DType::kFloat32 && (p.head_dim == 64 || p.head_dim == 128);
  plan.num_splits = 1;
  plan.split_keys = std::max(p.seq, 1);
  if (!plan.tensor_cores) return plan;
  const int64_t base = static_cast<int64_t>(ceil_div(static_cast<int64_t>(p.nodes) * (p.q_heads / p.kv_heads),
                                                     kRowsPerCta)) * p.batch * p.kv_heads;
  const int tiles = ceil_div(p.seq, kKeyTile);
  const int64_t target = 4 * static_cast<int64_t>(std::max(sm_count, 1));
  int splits = static_cast<int>(std::min<int64_t>((target + base - 1) / base, ceil_div(tiles, kMinTilesPerSplit)));
  splits = std::max(splits, 1);
  const int tiles_per_split = ceil_div(tiles, splits);
  plan.num_splits = ceil_div(tiles, tiles_per_split);
  plan.split_keys = tiles_per_split * kKeyTile;
  return plan;
}

int launch_tree_attention(const TreeAttentionParams& p, const TreeAttentionPlan& plan, DType dtype,
                          void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const bool tc = plan.tensor_cores;
  if (p.head_dim > kMaxHeadDim || (!tc && p.num_splits != 1) || p.num_splits != plan.num_splits ||
      p.split_keys != plan.split_keys) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  switch (dtype) {
    case DType::kFloat16:
      return static_cast<int>(launch_typed<__half>(p, tc, stream));
    case DType::kBFloat16:
      return static_cast<int>(launch_typed<__nv_bfloat16>(p, tc, stream));
    default:
      return static_cast<int>(launch_typed<float>(p, false, stream));
  }
}

}  // namespace kernels
}  // namespace specdec
