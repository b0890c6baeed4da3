// Torch-free interface of the CPU tree-attention kernel (csrc/kernels/cpu/tree_attention.cpp).
//
// The launcher (csrc/ops/tree_attention_cpu.cpp) checks tensors, fills TreeAttentionCpuParams with
// raw pointers, sizes and strides, asks plan_tree_attention_cpu how to split the work into tasks,
// and runs the tasks on its thread pool, each chunk of tasks with its own float scratch buffer of
// plan.scratch_floats floats. Results do not depend on the plan or on which thread runs a
// task. Semantics: specdec/ops/tree_attention.py.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/tree_attention_params.h"  // DType

namespace specdec::kernels::cpu {

struct TreeAttentionCpuParams {
  const void* q;            // [B, N, Hq, D], strides q_stride (elements), last dim contiguous
  const void* k;            // [B, S, Hkv, D], strides k_stride, last dim contiguous
  const void* v;            // [B, S, Hkv, D], strides v_stride, last dim contiguous
  void* out;                // [B, N, Hq, D] contiguous, q's dtype
  const int64_t* mask;      // [B, N, W] contiguous packed ancestor bits (a valid ancestor relation)
  const int32_t* prefix;    // [B] committed prefix length per request, in [0, S - N]
  int64_t batch, nodes, q_heads, kv_heads, head_dim, seq, words;
  int64_t q_stride[3], k_stride[3], v_stride[3];  // strides of dims 0, 1, 2
  float scale;              // softmax scale applied to q.k
  DType dtype;              // of q, k, v and out
};

// How the work is cut: tasks of (batch b, KV head, block of node_block tree nodes).
struct TreeAttentionCpuPlan {
  int64_t node_block;       // tree nodes per task
  int64_t blocks;           // node blocks per (batch, KV head)
  int64_t tasks;            // batch * kv_heads * blocks
  size_t scratch_floats;    // scratch one thread needs, in floats
};

// Few large node blocks convert each K/V tile the fewest times; blocks are halved while there
// would be fewer than two tasks per thread (`threads`: the pool that runs them).
TreeAttentionCpuPlan plan_tree_attention_cpu(const TreeAttentionCpuParams& p, int64_t threads);

// Runs tasks [task_begin, task_end) of the plan, writing their rows of p.out. scratch: at least
// plan.scratch_floats floats owned by the calling thread (their contents are not read).
void run_tree_attention_cpu(const TreeAttentionCpuParams& p, const TreeAttentionCpuPlan& plan, int64_t task_begin,
                            int64_t task_end, float* scratch);

// Bit j of a packed mask row (node i's ancestors, itself included).
inline bool mask_bit(const int64_t* row, int64_t j) {
  return (static_cast<uint64_t>(row[j >> 6]) >> (j & 63)) & 1u;
}

}  // namespace specdec::kernels::cpu
