// Torch-free interface of the CUDA tree-attention kernels (csrc/kernels/tree_attention.cuh).
//
// The launcher in csrc/ops/ checks tensors, fills TreeAttentionParams with raw pointers, sizes and
// strides, asks plan_tree_attention how many prefix splits to use (to size the fp32 workspace),
// then calls launch_tree_attention. Semantics: specdec/ops/tree_attention.py.
#pragma once

#include <cstdint>

namespace specdec {
namespace kernels {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct TreeAttentionParams {
  const void* q;            // [B, N, Hq, D], strides q_stride (elements), last dim contiguous
  const void* k;            // [B, S, Hkv, D], strides k_stride
  const void* v;            // [B, S, Hkv, D], strides v_stride
  void* out;                // [B, N, Hq, D] contiguous, q's dtype
  const int64_t* mask;      // [B, N, W] contiguous packed ancestor bits
  const int32_t* prefix;    // [B] committed prefix length per request (kernels clamp to [0, seq - nodes])
  float* partial_out;       // [splits, B, N, Hq, D] fp32 workspace (only when splits > 1)
  float* partial_lse;       // [splits, B, N, Hq] fp32 log2-sum-exp per split (only when splits > 1)
  int batch, nodes, q_heads, kv_heads, head_dim, seq, words;
  int64_t q_stride[3], k_stride[3], v_stride[3];  // strides of dims 0, 1, 2
  float scale;              // softmax scale applied to q.k
  int num_splits;           // prefix splits (grid z); filled by plan_tree_attention
  int split_keys;           // keys per split, a multiple of the key tile
};

struct TreeAttentionPlan {
  bool tensor_cores;  // fp16/bf16 with D in {64, 128}: mma.sync kernel; else the scalar fallback
  int num_splits;
  int split_keys;
};

// Chooses the kernel and the prefix split so the grid covers ~4 CTAs per multiprocessor.
TreeAttentionPlan plan_tree_attention(const TreeAttentionParams& p, DType dtype, int sm_count);

// Launches the kernels `plan` chose on `stream` (a cudaStream_t); returns the cudaError_t of the
// launches (0 = success). p.num_splits / p.split_keys must be the plan's, with the workspace
// allocated; a mismatch returns cudaErrorInvalidValue.
int launch_tree_attention(const TreeAttentionParams& p, const TreeAttentionPlan& plan, DType dtype, void* stream);

// Largest head dim the fallback kernel takes (the tensor-core kernel takes 64 and 128).
constexpr int kMaxHeadDim = 256;

}  // namespace kernels
}  // namespace specdec
