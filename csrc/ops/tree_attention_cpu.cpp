// CPU launcher of torch.ops.specdec.tree_attention: tensor checks (shapes, dtypes, the mask's
// ancestor relation), then the torch-free kernel (csrc/kernels/cpu/tree_attention.h) on ATen's
// thread pool. Registered for the CPU dispatch key in csrc/bindings/torch_ops.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <vector>

#include "kernels/cpu/tree_attention.h"
#include "ops/launchers.h"
#include "ops/tree_attention_checks.h"

namespace specdec {
namespace {

using kernels::cpu::mask_bit;

// Checks that tree_mask (contiguous int64 [B, N, W]) is an ancestor relation and that prefix_lens
// fits in S rows: a row is all zero (padding) or holds its own bit, no bit j > i, and every real row
// equals its parent's row (highest set bit below i) plus its own bit. O(B N W).
void validate_mask(const int64_t* mask, const int32_t* prefix, const TreeAttentionSizes& sz) {
  const int64_t n = sz.nodes, w = sz.words;
  for (int64_t b = 0; b < sz.batch; ++b) {
    TORCH_CHECK_VALUE(prefix[b] >= 0 && prefix[b] + n <= sz.seq, "tree_attention: prefix_lens[", b, "] = ", prefix[b],
                      " must lie in [0, S - N] = [0, ", sz.seq - n, "]");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t* row = mask + (b * n + i) * w;
      bool any = false;
      for (int64_t x = 0; x < w; ++x) any = any || row[x] != 0;
      if (!any) continue;
      TORCH_CHECK_VALUE(mask_bit(row, i), "tree_attention: tree_mask[", b, ", ", i,
                        "] has ancestor bits but not its own bit (rows are all-zero padding or include node i itself)");
      for (int64_t x = i >> 6; x < w; ++x) {
        uint64_t future = static_cast<uint64_t>(row[x]);
        if (x == (i >> 6)) future &= (i & 63) == 63 ? 0 : ~((uint64_t{2} << (i & 63)) - 1);
        TORCH_CHECK_VALUE(future == 0, "tree_attention: tree_mask[", b, ", ", i,
                          "] has a bit j > i (parents must precede children; bits past N must be zero)");
      }
      int64_t parent = -1;
      for (int64_t j = i - 1; j >= 0 && parent < 0; --j) parent = mask_bit(row, j) ? j : -1;
      const int64_t* prow = parent >= 0 ? mask + (b * n + parent) * w : nullptr;
      for (int64_t x = 0; x < w; ++x) {
        uint64_t expect = prow ? static_cast<uint64_t>(prow[x]) : 0;
        if (x == (i >> 6)) expect |= uint64_t{1} << (i & 63);
        TORCH_CHECK_VALUE(static_cast<uint64_t>(row[x]) == expect, "tree_attention: tree_mask[", b, ", ", i,
                          "] is not its parent's row plus its own bit (not a consistent ancestor relation)");
      }
    }
  }
}

}  // namespace

// q [B, N, Hq, D], k/v [B, S, Hkv, D] (one dtype: float32, float16 or bfloat16), tree_mask int64
// [B, N, ceil(N/64)], prefix_lens int32 [B] -> out [B, N, Hq, D] in q's dtype.
at::Tensor tree_attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                              const at::Tensor& mask_in, const at::Tensor& prefix_in, std::optional<double> scale) {
  const TreeAttentionSizes sz = check_tree_attention_inputs(q_in, k_in, v_in, mask_in, prefix_in, scale);
  const at::Tensor q = last_dim_contiguous(q_in), k = last_dim_contiguous(k_in), v = last_dim_contiguous(v_in);
  const at::Tensor mask = mask_in.contiguous(), prefix = prefix_in.contiguous();
  validate_mask(mask.data_ptr<int64_t>(), prefix.data_ptr<int32_t>(), sz);
  at::Tensor out = at::empty({sz.batch, sz.nodes, sz.q_heads, sz.head_dim}, q.options());
  if (out.numel() == 0) return out;
  kernels::cpu::TreeAttentionCpuParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.mask = mask.data_ptr<int64_t>();
  p.prefix = prefix.data_ptr<int32_t>();
  p.batch = sz.batch;
  p.nodes = sz.nodes;
  p.q_heads = sz.q_heads;
  p.kv_heads = sz.kv_heads;
  p.head_dim = sz.head_dim;
  p.seq = sz.seq;
  p.words = sz.words;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.stride(i);
    p.k_stride[i] = k.stride(i);
    p.v_stride[i] = v.stride(i);
  }
  p.scale = sz.scale;
  p.dtype = kernel_dtype(q.scalar_type());
  const kernels::cpu::TreeAttentionCpuPlan plan = kernels::cpu::plan_tree_attention_cpu(p, at::get_num_threads());
  at::parallel_for(0, plan.tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(plan.scratch_floats);
    kernels::cpu::run_tree_attention_cpu(p, plan, begin, end, scratch.data());
  });
  return out;
}

}  // namespace specdec
