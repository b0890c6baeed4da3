// Torch-free interface of the CPU skinny-linear kernel (csrc/kernels/cpu/skinny_linear.cpp).
//
// The launcher (csrc/ops/skinny_linear_cpu.cpp) checks tensors and runs one of these row functions
// over blocks of kSkinnyRowsPerTask weight rows on its thread pool. Each output is summed by one
// call in a fixed order, so results do not depend on how the rows are split or on the thread count.
// Semantics: specdec/ops/skinny_linear.py.
#pragma once

#include <cstdint>

namespace specdec::kernels::cpu {

constexpr int64_t kSkinnyRowsPerTask = 64;  // weight rows per parallel task

// y[m * N + r] = dot(w[r * K:], x[m * K:]) for weight rows n0 <= r < n1 and all m < M: x [M, K],
// w [N, K] and y [M, N] contiguous; the weight float32 (f32) or float16 bits (f16, widened exactly,
// so a float16 weight gives the results of the float32 weight it equals).
using SkinnyRowsF32 = void (*)(const float* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y,
                               int64_t N);
using SkinnyRowsF16 = void (*)(const uint16_t* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1,
                               float* y, int64_t N);

void skinny_rows_f32(const float* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y,
                     int64_t N);

// How float16 weights are widened: the best this CPU runs, or one path (tests of each).
enum class HalfPath { kAuto, kAvx512, kAvx2, kPortable };

// The float16 row function of a path; nullptr when this CPU cannot run it (kAuto and kPortable
// always run).
SkinnyRowsF16 skinny_rows_f16(HalfPath path);

}  // namespace specdec::kernels::cpu
