// The specdec operator library: the schema of every tensor op in torch.ops.specdec and the ATen
// launcher (csrc/ops/) that runs it on each device.
//
// This is the only TORCH_LIBRARY(specdec, ...) block in the extension (a namespace may be defined
// once). The fake (shape-only) implementations used by torch.compile live in Python, in the module
// named by set_python_module, which torch imports on demand.
#include <torch/library.h>

#include "ops/launchers.h"

TORCH_LIBRARY(specdec, m) {
  m.set_python_module("specdec.ops.fakes");
  // q [B, N, Hq, D], k/v [B, S, Hkv, D], tree_mask int64 [B, N, ceil(N/64)], prefix_lens int32 [B]
  // -> out [B, N, Hq, D]. Semantics: specdec/ops/tree_attention.py (tree_attention_reference).
  m.def(
      "tree_attention(Tensor q, Tensor k, Tensor v, Tensor tree_mask, Tensor prefix_lens, "
      "float? scale=None) -> Tensor");
  // x [M, K], weight [N, K] (float32 or float16), bias [N] (float32) -> x @ weight^T + bias [M, N]
  // float32, for small M (a verify step's rows). half_path picks how a float16 weight is widened:
  // "auto" (the best this CPU has), "avx512", "avx2" or "portable" (for tests of each path).
  // Semantics: specdec/ops/skinny_linear.py (skinny_linear_reference).
  m.def("skinny_linear(Tensor x, Tensor weight, Tensor? bias=None, str half_path=\"auto\") -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) {
  m.impl("tree_attention", &specdec::tree_attention_cpu);  // csrc/ops/tree_attention_cpu.cpp
  m.impl("skinny_linear", &specdec::skinny_linear_cpu);    // csrc/ops/skinny_linear_cpu.cpp
}

#ifdef SPECDEC_WITH_CUDA
TORCH_LIBRARY_IMPL(specdec, CUDA, m) {
  m.impl("tree_attention", &specdec::tree_attention_cuda);  // csrc/ops/tree_attention_cuda.cpp
}
#endif
