// CPU launcher of torch.ops.specdec.skinny_linear: tensor checks, the float16 path, then the
// torch-free kernel (csrc/kernels/cpu/skinny_linear.h) over blocks of weight rows on ATen's thread
// pool, and the bias. Registered for the CPU dispatch key in csrc/bindings/torch_ops.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu/skinny_linear.h"
#include "ops/launchers.h"

namespace specdec {
namespace {

using kernels::cpu::HalfPath;
using kernels::cpu::kSkinnyRowsPerTask;

// The float16 path: "auto" is the widest this CPU runs; a named one is refused where it cannot run.
kernels::cpu::SkinnyRowsF16 half_rows(c10::string_view path) {
  TORCH_CHECK(path == "auto" || path == "avx512" || path == "avx2" || path == "portable",
              "skinny_linear: half_path must be 'auto', 'avx512', 'avx2' or ", "'portable', got '", std::string(path),
              "'");
  const HalfPath hp = path == "auto"     ? HalfPath::kAuto
                      : path == "avx512" ? HalfPath::kAvx512
                      : path == "avx2"   ? HalfPath::kAvx2
                                         : HalfPath::kPortable;
  const kernels::cpu::SkinnyRowsF16 rows = kernels::cpu::skinny_rows_f16(hp);
  TORCH_CHECK(rows != nullptr, "skinny_linear: half_path '", std::string(path), "' does not run on this CPU");
  return rows;
}

template <typename W, typename Rows>
void run_rows(Rows rows, const W* wp, const float* xp, int64_t M, int64_t K, int64_t N, float* yp) {
  const int64_t tasks = (N + kSkinnyRowsPerTask - 1) / kSkinnyRowsPerTask;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kSkinnyRowsPerTask;
      rows(wp, xp, M, K, n0, std::min(N, n0 + kSkinnyRowsPerTask), yp, N);
    }
  });
}

}  // namespace

// x [M, K] float32, weight [N, K] float32 or float16, bias [N] float32 or none, half_path: how a
// float16 weight is widened ("auto", "avx512", "avx2", "portable") -> x @ weight^T + bias [M, N] float32.
at::Tensor skinny_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             c10::string_view half_path) {
  const kernels::cpu::SkinnyRowsF16 half = half_rows(half_path);  // refuses a bad path before any other check
  TORCH_CHECK(x.dim() == 2, "skinny_linear: x must be [M, K], got ", x.sizes());
  TORCH_CHECK(weight.dim() == 2, "skinny_linear: weight must be [N, K], got ", weight.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat, "skinny_linear: x must be float32, got ", x.scalar_type());
  TORCH_CHECK(weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kHalf,
              "skinny_linear: weight must be float32 or float16, got ", weight.scalar_type());
  TORCH_CHECK(x.size(1) == weight.size(1), "skinny_linear: x has K=", x.size(1), " but weight has K=", weight.size(1));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N && bias->scalar_type() == at::kFloat,
                "skinny_linear: bias must be float32 [", N, "], got ", bias->scalar_type(), " ", bias->sizes());
  }
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  if (K == 0) return bias.has_value() ? y.copy_(bias->unsqueeze(0).expand({M, N})) : y.zero_();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (wc.scalar_type() == at::kHalf) {
    run_rows(half, reinterpret_cast<const uint16_t*>(wc.data_ptr<at::Half>()), xp, M, K, N, yp);
  } else {
    run_rows(kernels::cpu::skinny_rows_f32, wc.data_ptr<float>(), xp, M, K, N, yp);
  }
  if (bias.has_value()) y.add_(bias->unsqueeze(0));
  return y;
}

}  // namespace specdec
