// CPU kernel of torch.ops.specdec.skinny_linear: y[M, N] = x[M, K] @ w[N, K]^T (+ bias), float32,
// for the few rows a verify step feeds (semantics: specdec/ops/skinny_linear.py).
//
// Why it exists: a speculative verify step pushes 2-17 rows (pending token + draft tree) through
// every linear layer of the target. On CPU the weights come from DRAM (SmolLM2-135M: 540 MB per
// step), so a step should cost what one row costs. The BLAS small-M GEMM paths do not: for 2-9 rows
// they cost 1.2-1.5x the single-row GEMV in a real forward (benchmarks/bench_skinny_linear.py).
// This kernel reads each weight row once and applies it to all M input rows from registers.
//
// Layout of the work: tiles of 4 weight rows x 4 input rows keep 16 accumulators of 16 floats in
// registers (AVX-512: 16 + 4 + 1 of 32 zmm registers); each loaded weight vector feeds 4 FMAs and
// each loaded input vector 4 FMAs. Input rows (M x K floats, at most 17 x 4 KB here) stay in L1/L2,
// so DRAM traffic is the weight matrix once. With 2+ input rows each tile also prefetches the weight
// rows 16 rows ahead: the hardware prefetchers lose these short row streams once FMAs slow the loads,
// and DRAM time and FMA time then add up instead of overlapping (8 rows: 24.4 -> 18.4 ms over a
// SmolLM2 forward's products, benchmarks/bench_skinny_linear.py). Tasks are blocks of weight rows, run with
// at::parallel_for. Every output is summed by one thread in a fixed order (16 lane partial sums over
// k, a fixed pairwise tree over the lanes, then the scalar tail), so results do not depend on the
// thread count.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

#include "ops/cpu_multiversion.h"

namespace specdec {
namespace {

constexpr int kLanes = 16;
constexpr int kTile = 4;                 // weight rows and input rows per register tile
constexpr int64_t kRowsPerTask = 64;     // weight rows per parallel task
constexpr int kPrefetchRows = 4;         // weight rows prefetched per tile
constexpr int64_t kPrefetchAhead = 16;    // ... this many rows past the tile's first row

typedef float vec16 __attribute__((vector_size(kLanes * sizeof(float))));

#define SPECDEC_INLINE inline __attribute__((always_inline))

SPECDEC_INLINE vec16 load16(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Pairwise step of the 16-accumulator reduction: with segments of width W, each segment j of a and
// of b is halved (first half + second half) and the halves are interleaved into one vector.
#define SPECDEC_HALVE(a, b, ...) (__builtin_shufflevector(a, b, __VA_ARGS__))

// Reduces 16 vectors to one: lane l holds the lane sum of v[bit_reverse4(l)] (a fixed summation
// tree: 15 vector adds instead of 240 scalar ones, which would cost as much as the FMAs of a tile).
SPECDEC_INLINE vec16 reduce16(const vec16* v) {
  vec16 c[8], d[4], e[2];
  for (int i = 0; i < 8; ++i)
    c[i] = SPECDEC_HALVE(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           SPECDEC_HALVE(v[2 * i], v[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)
    d[i] = SPECDEC_HALVE(c[2 * i], c[2 * i + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           SPECDEC_HALVE(c[2 * i], c[2 * i + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)
    e[i] = SPECDEC_HALVE(d[2 * i], d[2 * i + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           SPECDEC_HALVE(d[2 * i], d[2 * i + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  return SPECDEC_HALVE(e[0], e[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
         SPECDEC_HALVE(e[0], e[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}

constexpr int kBitReverse4[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

// y[m * ldy + r] = dot(w[r * K:], x[m * K:]) for r < R, m < MT (R, MT <= kTile). When ``next`` is
// not null, the same columns of the kPrefetchRows weight rows at ``next`` are prefetched on the way.
template <int R, int MT>
SPECDEC_INLINE void tile(const float* w, const float* x, int64_t K, float* y, int64_t ldy, const float* next) {
  vec16 acc[kTile * kTile] = {};  // slot r * kTile + m; unused slots stay zero
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (next != nullptr)
      for (int r = 0; r < kPrefetchRows; ++r) __builtin_prefetch(next + r * K + k, 0, 2);
    vec16 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load16(w + r * K + k);
    for (int m = 0; m < MT; ++m) {
      const vec16 xv = load16(x + m * K + k);
      for (int r = 0; r < R; ++r) acc[r * kTile + m] += wv[r] * xv;
    }
  }
  const vec16 sums = reduce16(acc);
  float out[kTile * kTile];
  for (int l = 0; l < kLanes; ++l) out[kBitReverse4[l]] = sums[l];
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < MT; ++m) {
      float s = out[r * kTile + m];
      for (int64_t t = k; t < K; ++t) s += w[r * K + t] * x[m * K + t];
      y[m * ldy + r] = s;
    }
  }
}

// The first pass over the R weight rows (input rows 0-3) prefetches ``next`` (or nothing: null).
template <int R>
SPECDEC_INLINE void row_tile(const float* w, const float* x, int64_t M, int64_t K, float* y, int64_t ldy,
                             const float* next) {
  int64_t m = 0;
  for (; m + kTile <= M; m += kTile, next = nullptr) tile<R, kTile>(w, x + m * K, K, y + m * ldy, ldy, next);
  switch (M - m) {
    case 3: tile<R, 3>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    case 2: tile<R, 2>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    case 1: tile<R, 1>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    default: break;
  }
}

// Weight rows [n0, n1): y[:, n0:n1] for all M input rows. Each full tile prefetches the weight rows
// kPrefetchRows further on (within [n0, n1)), so DRAM streams the next rows while the FMAs of this
// tile run: without it a step of 2-8 rows costs the single-row DRAM time PLUS the FMA time.
SPECDEC_MULTIVERSION void rows_block(
    const float* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  int64_t n = n0;
  for (; n + kTile <= n1; n += kTile) {
    const float* next = M > 1 && n + kPrefetchAhead + kPrefetchRows <= N ? w + (n + kPrefetchAhead) * K : nullptr;
    row_tile<kTile>(w + n * K, x, M, K, y + n, N, next);
  }
  switch (n1 - n) {
    case 3: row_tile<3>(w + n * K, x, M, K, y + n, N, nullptr); break;
    case 2: row_tile<2>(w + n * K, x, M, K, y + n, N, nullptr); break;
    case 1: row_tile<1>(w + n * K, x, M, K, y + n, N, nullptr); break;
    default: break;
  }
}

at::Tensor skinny_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2, "skinny_linear: x must be [M, K], got ", x.sizes());
  TORCH_CHECK(weight.dim() == 2, "skinny_linear: weight must be [N, K], got ", weight.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
              "skinny_linear: x and weight must be float32, got ", x.scalar_type(), " and ", weight.scalar_type());
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
  const float* wp = wc.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kRowsPerTask;
      rows_block(wp, xp, M, K, n0, std::min(N, n0 + kRowsPerTask), yp, N);
    }
  });
  if (bias.has_value()) y.add_(bias->unsqueeze(0));
  return y;
}

}  // namespace

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_linear", &skinny_linear_cpu); }

}  // namespace specdec
