// The ATen launchers of the torch.ops.specdec tensor ops, for their registration in
// csrc/bindings/torch_ops.cpp (schemas and semantics there). Each checks its arguments, then runs
// a torch-free kernel: csrc/kernels/cpu/ (CPU) or csrc/kernels/ (CUDA).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace specdec {

// ops/tree_attention_cpu.cpp
at::Tensor tree_attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& tree_mask, const at::Tensor& prefix_lens, std::optional<double> scale);

#ifdef SPECDEC_WITH_CUDA
// ops/tree_attention_cuda.cpp
at::Tensor tree_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& tree_mask, const at::Tensor& prefix_lens, std::optional<double> scale);
#endif

// ops/skinny_linear_cpu.cpp
at::Tensor skinny_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             c10::string_view half_path);

}  // namespace specdec
