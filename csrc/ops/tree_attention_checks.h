// Argument checks shared by the CPU and CUDA tree-attention launchers, and the kernels' dtype code.
//
// Every failure names the argument, what was found and what was expected, and maps to Python's
// ValueError (shapes, values) or TypeError (dtypes) through TORCH_CHECK_VALUE / TORCH_CHECK_TYPE.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>

#include "kernels/tree_attention_params.h"  // DType

namespace specdec {

// Sizes of one tree-attention call, read off the checked tensors.
struct TreeAttentionSizes {
  int64_t batch;       // B
  int64_t nodes;       // N (tree nodes per request, padded)
  int64_t q_heads;     // Hq
  int64_t kv_heads;    // Hkv
  int64_t head_dim;    // D
  int64_t seq;         // S (rows of k / v)
  int64_t words;       // W = ceil(N / 64)
  float scale;         // softmax scale
};

inline TreeAttentionSizes check_tree_attention_inputs(
    const at::Tensor& q,           // [B, N, Hq, D]
    const at::Tensor& k,           // [B, S, Hkv, D]
    const at::Tensor& v,           // [B, S, Hkv, D]
    const at::Tensor& tree_mask,   // int64 [B, N, W]
    const at::Tensor& prefix_lens, // int32 [B]
    std::optional<double> scale) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                    "tree_attention: expected q [B, N, Hq, D] and k, v [B, S, Hkv, D] (4-D), got q ",
                    q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  const auto dt = q.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16,
                   "tree_attention: q must be float32, float16 or bfloat16, got ", dt);
  TORCH_CHECK_TYPE(k.scalar_type() == dt && v.scalar_type() == dt,
                   "tree_attention: q, k, v must share one dtype, got ", dt, ", ", k.scalar_type(), ", ",
                   v.scalar_type());
  TORCH_CHECK_TYPE(tree_mask.scalar_type() == at::kLong,
                   "tree_attention: tree_mask must be int64 packed bit words, got ", tree_mask.scalar_type());
  TORCH_CHECK_TYPE(prefix_lens.scalar_type() == at::kInt,
                   "tree_attention: prefix_lens must be int32, got ", prefix_lens.scalar_type());
  const auto dev = q.device();
  TORCH_CHECK_VALUE(k.device() == dev && v.device() == dev && tree_mask.device() == dev &&
                        prefix_lens.device() == dev,
                    "tree_attention: all tensors must be on one device, got q ", dev, ", k ", k.device(), ", v ",
                    v.device(), ", tree_mask ", tree_mask.device(), ", prefix_lens ", prefix_lens.device());
  TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "tree_attention: k and v shapes differ: ", k.sizes(), " vs ",
                    v.sizes());
  TreeAttentionSizes s{};
  s.batch = q.size(0);
  s.nodes = q.size(1);
  s.q_heads = q.size(2);
  s.head_dim = q.size(3);
  s.seq = k.size(1);
  s.kv_heads = k.size(2);
  s.words = (s.nodes + 63) / 64;
  TORCH_CHECK_VALUE(k.size(0) == s.batch, "tree_attention: batch of q (", s.batch, ") and k/v (", k.size(0),
                    ") differ");
  TORCH_CHECK_VALUE(k.size(3) == s.head_dim, "tree_attention: head dim of q (", s.head_dim, ") and k/v (",
                    k.size(3), ") differ");
  TORCH_CHECK_VALUE(s.head_dim > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0,
                    "tree_attention: query heads (", s.q_heads, ") must be a positive multiple of KV heads (",
                    s.kv_heads, ")");
  TORCH_CHECK_VALUE(tree_mask.dim() == 3 && tree_mask.size(0) == s.batch && tree_mask.size(1) == s.nodes &&
                        tree_mask.size(2) == s.words,
                    "tree_attention: tree_mask must have shape [B, N, ceil(N/64)] = [", s.batch, ", ", s.nodes,
                    ", ", s.words, "], got ", tree_mask.sizes());
  TORCH_CHECK_VALUE(prefix_lens.dim() == 1 && prefix_lens.size(0) == s.batch,
                    "tree_attention: prefix_lens must have shape [B] = [", s.batch, "], got ", prefix_lens.sizes());
  TORCH_CHECK_VALUE(s.seq >= s.nodes, "tree_attention: k/v hold ", s.seq, " rows, fewer than the ", s.nodes,
                    " tree nodes");
  const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  TORCH_CHECK_VALUE(sc > 0.0 && std::isfinite(sc), "tree_attention: scale must be positive and finite, got ", sc);
  s.scale = static_cast<float>(sc);
  return s;
}

// q/k/v are read through their strides; only the last (head) dimension must be contiguous, so
// views such as Hugging Face's [B, H, S, D] caches transposed to [B, S, H, D] need no copy.
inline at::Tensor last_dim_contiguous(const at::Tensor& t) {
  return (t.size(3) <= 1 || t.stride(3) == 1) ? t : t.contiguous();
}

// The torch-free kernels' code of a (checked) q dtype.
inline kernels::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return kernels::DType::kFloat16;
    case at::kBFloat16:
      return kernels::DType::kBFloat16;
    default:
      return kernels::DType::kFloat32;
  }
}

}  // namespace specdec
