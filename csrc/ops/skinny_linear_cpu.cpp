// CPU kernel of torch.ops.specdec.skinny_linear: y[M, N] = x[M, K] @ w[N, K]^T (+ bias), float32
// inputs and outputs, for the few rows a verify step feeds (semantics: specdec/ops/skinny_linear.py).
// The weight is float32 or float16. A float16 weight is widened to float32 as it is loaded and then
// goes through exactly the FMAs of the float32 path, so its results are bitwise those of the float32
// weight it came from; only the bytes read halve. That is the point: a draft layer stored in fp16
// (EAGLE, Medusa) is read from memory at half the cost, with no change to what it computes.
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

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cpu/multiversion.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_X86_DISPATCH 1
#include <immintrin.h>
#else
#define SPECDEC_X86_DISPATCH 0
#endif

namespace specdec {
namespace {

constexpr int kLanes = 16;
constexpr int kTile = 4;                 // weight rows and input rows per register tile
constexpr int64_t kRowsPerTask = 64;     // weight rows per parallel task
constexpr int kPrefetchRows = 4;         // weight rows prefetched per tile
constexpr int64_t kPrefetchAhead = 16;    // ... this many rows past the tile's first row

typedef float vec16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef uint32_t u32x16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t u16x16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));

#define SPECDEC_INLINE inline __attribute__((always_inline))

SPECDEC_INLINE vec16 load16(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// uint32 -> float, one value or 16 (exact here: the values are below 2^15).
SPECDEC_INLINE float to_float(uint32_t v) { return static_cast<float>(v); }
SPECDEC_INLINE vec16 to_float(u32x16 v) { return __builtin_convertvector(v, vec16); }

// fp16 bits (zero-extended in U: uint32_t or u32x16) -> the fp32 value (F: float or vec16), exactly,
// with integer and int->float ops only (no FP16 hardware, no float subnormals, so it holds under
// flush-to-zero too): normal values rebias the exponent 15 -> 127, subnormals are mantissa * 2^-24,
// exponent 31 is inf/nan with its payload.
template <typename U, typename F>
SPECDEC_INLINE F half_bits_to_float(U h) {
  const U em = h & 0x7fffu;
  const U normal = (em << 13) + 0x38000000u;
  const U special = (em << 13) | 0x7f800000u;
  const F sub = to_float(em) * 0x1p-24f;
  U sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub);
  U bits = em >= 0x7c00u ? special : (em < 0x0400u ? sub_bits : normal);
  bits |= (h & 0x8000u) << 16;
  F out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Weight loaders: element type T, 16 weights as fp32 (load) and one (scalar). Every one is exact,
// so the FMAs that follow see the same fp32 values whatever the weight type.
struct F32 {
  using T = float;
  static SPECDEC_INLINE vec16 load(const float* p) { return load16(p); }
  static SPECDEC_INLINE float scalar(float w) { return w; }
};

struct F16Bits {  // portable: the integer conversion above, vectorised
  using T = uint16_t;
  static SPECDEC_INLINE vec16 load(const uint16_t* p) {
    u16x16 h;
    std::memcpy(&h, p, sizeof h);
    return half_bits_to_float<u32x16, vec16>(__builtin_convertvector(h, u32x16));
  }
  static SPECDEC_INLINE float scalar(uint16_t w) { return half_bits_to_float<uint32_t, float>(w); }
};

#if SPECDEC_X86_DISPATCH
// Not always_inline: GCC refuses to force an AVX function into the generic templates below; the
// per-ISA entry points are `flatten`, which inlines these loads once they sit inside an AVX function.
struct F16C8x2 : F16Bits {  // AVX2 + F16C: two vcvtph2ps ymm
  static inline __attribute__((target("avx2,f16c"))) vec16 load(const uint16_t* p) {
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    vec16 v;
    std::memcpy(&v, &lo, sizeof lo);
    std::memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
    return v;
  }
};

struct F16Avx512 : F16Bits {  // AVX-512F: one vcvtph2ps zmm
  static inline __attribute__((target("avx512f"))) vec16 load(const uint16_t* p) {
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    vec16 out;
    std::memcpy(&out, &v, sizeof v);
    return out;
  }
};
#endif

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
template <int R, int MT, typename L, typename W = typename L::T>
SPECDEC_INLINE void tile(const W* w, const float* x, int64_t K, float* y, int64_t ldy, const W* next) {
  vec16 acc[kTile * kTile] = {};  // slot r * kTile + m; unused slots stay zero
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (next != nullptr)
      for (int r = 0; r < kPrefetchRows; ++r) __builtin_prefetch(next + r * K + k, 0, 2);
    vec16 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = L::load(w + r * K + k);
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
      // An explicit FMA: contraction of the tail must not differ between the weight types.
      for (int64_t t = k; t < K; ++t) s = __builtin_fmaf(L::scalar(w[r * K + t]), x[m * K + t], s);
      y[m * ldy + r] = s;
    }
  }
}

// The first pass over the R weight rows (input rows 0-3) prefetches ``next`` (or nothing: null).
template <int R, typename L, typename W = typename L::T>
SPECDEC_INLINE void row_tile(const W* w, const float* x, int64_t M, int64_t K, float* y, int64_t ldy,
                             const W* next) {
  int64_t m = 0;
  for (; m + kTile <= M; m += kTile, next = nullptr) tile<R, kTile, L>(w, x + m * K, K, y + m * ldy, ldy, next);
  switch (M - m) {
    case 3: tile<R, 3, L>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    case 2: tile<R, 2, L>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    case 1: tile<R, 1, L>(w, x + m * K, K, y + m * ldy, ldy, next); break;
    default: break;
  }
}

// Weight rows [n0, n1): y[:, n0:n1] for all M input rows. Each full tile prefetches the weight rows
// kPrefetchRows further on (within [n0, n1)), so DRAM streams the next rows while the FMAs of this
// tile run: without it a step of 2-8 rows costs the single-row DRAM time PLUS the FMA time.
template <typename L, typename W = typename L::T>
SPECDEC_INLINE void rows_block_impl(
    const W* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  int64_t n = n0;
  for (; n + kTile <= n1; n += kTile) {
    constexpr int64_t ahead = kPrefetchAhead * static_cast<int64_t>(sizeof(float) / sizeof(W));
    // fp16 rows are half as long: prefetch twice as many rows ahead, and with one input row too (the
    // hardware prefetchers alone left a 1-row product of fp16 weights at 1.2x the fp32 one, not 2x).
    const W* next =
        (M > 1 || sizeof(W) < sizeof(float)) && n + ahead + kPrefetchRows <= N ? w + (n + ahead) * K : nullptr;
    row_tile<kTile, L, W>(w + n * K, x, M, K, y + n, N, next);
  }
  switch (n1 - n) {
    case 3: row_tile<3, L, W>(w + n * K, x, M, K, y + n, N, nullptr); break;
    case 2: row_tile<2, L, W>(w + n * K, x, M, K, y + n, N, nullptr); break;
    case 1: row_tile<1, L, W>(w + n * K, x, M, K, y + n, N, nullptr); break;
    default: break;
  }
}

// float32 weights: one multiversioned entry (target_clones picks AVX-512 / AVX2+FMA / baseline).
SPECDEC_MULTIVERSION void rows_block(
    const float* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  rows_block_impl<F32>(w, x, M, K, n0, n1, y, N);
}

// float16 weights: the conversion instruction differs per ISA, which target_clones cannot express
// (one body for every clone), so one function per ISA with its loader, picked at run time.
using HalfRows = void (*)(const uint16_t*, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

__attribute__((optimize("fp-contract=fast"))) void rows_block_f16_base(
    const uint16_t* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  rows_block_impl<F16Bits>(w, x, M, K, n0, n1, y, N);
}

#if SPECDEC_X86_DISPATCH
__attribute__((target("arch=x86-64-v3"), optimize("fp-contract=fast"), flatten)) void rows_block_f16_v3(
    const uint16_t* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  rows_block_impl<F16C8x2>(w, x, M, K, n0, n1, y, N);
}

__attribute__((target("arch=x86-64-v4"), optimize("fp-contract=fast"), flatten)) void rows_block_f16_v4(
    const uint16_t* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  rows_block_impl<F16Avx512>(w, x, M, K, n0, n1, y, N);
}
#endif

// The float16 path: "auto" is the widest this CPU runs; a named one is refused where it cannot run.
HalfRows half_rows(c10::string_view path) {
#if SPECDEC_X86_DISPATCH
  const bool v4 = __builtin_cpu_supports("x86-64-v4"), v3 = __builtin_cpu_supports("x86-64-v3");
#else
  const bool v4 = false, v3 = false;
#endif
  if (path == "portable") return rows_block_f16_base;
#if SPECDEC_X86_DISPATCH
  if (path == "auto") return v4 ? rows_block_f16_v4 : v3 ? rows_block_f16_v3 : rows_block_f16_base;
  if (path == "avx512" && v4) return rows_block_f16_v4;
  if (path == "avx2" && v3) return rows_block_f16_v3;
#else
  if (path == "auto") return rows_block_f16_base;
#endif
  TORCH_CHECK(path == "avx512" || path == "avx2", "skinny_linear: half_path must be 'auto', 'avx512', 'avx2' or ",
              "'portable', got '", std::string(path), "'");
  TORCH_CHECK(false, "skinny_linear: half_path '", std::string(path), "' does not run on this CPU");
}

template <typename W, typename Rows>
void run_rows(Rows rows, const W* wp, const float* xp, int64_t M, int64_t K, int64_t N, float* yp) {
  const int64_t tasks = (N + kRowsPerTask - 1) / kRowsPerTask;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kRowsPerTask;
      rows(wp, xp, M, K, n0, std::min(N, n0 + kRowsPerTask), yp, N);
    }
  });
}

at::Tensor skinny_linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             c10::string_view half_path) {
  const HalfRows half = half_rows(half_path);  // refuses a bad path before any other check
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
    using FloatRows = void (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
    run_rows(static_cast<FloatRows>(rows_block), wc.data_ptr<float>(), xp, M, K, N, yp);
  }
  if (bias.has_value()) y.add_(bias->unsqueeze(0));
  return y;
}

}  // namespace

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_linear", &skinny_linear_cpu); }

}  // namespace specdec
