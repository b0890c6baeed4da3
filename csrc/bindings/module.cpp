// Python module `specdec._C`.
//
// Tensor ops are registered with TORCH_LIBRARY(specdec, ...) in csrc/bindings/torch_ops.cpp and
// become visible as torch.ops.specdec.* when this shared object is loaded. This file holds the
// pybind11 part: plain C++ objects (the suffix automaton, csrc/bindings/suffix.cpp) and build
// information.
#include <pybind11/pybind11.h>

namespace specdec {
void bind_suffix(pybind11::module_& m);  // csrc/bindings/suffix.cpp
}  // namespace specdec

PYBIND11_MODULE(_C, m) {
  m.doc() = "specdec compiled extension: suffix automaton and tree-attention ops";
  m.def(
      "cuda_built",
      []() {
#ifdef SPECDEC_WITH_CUDA
        return true;
#else
        return false;
#endif
      },
      "True when the extension was compiled with its CUDA kernels.");
  specdec::bind_suffix(m);
}
