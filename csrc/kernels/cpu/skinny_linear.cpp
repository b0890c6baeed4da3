// CPU kernel of torch.ops.specdec.skinny_linear: y[M, N] = x[M, K] @ w[N, K]^T, float32 inputs and
// outputs, for the few rows a verify step feeds; torch-free (raw pointers and sizes), launched by
// csrc/ops/skinny_linear_cpu.cpp, which adds the bias (semantics: specdec/ops/skinny_linear.py).
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
// SmolLM2 forward's products, benchmarks/bench_skinny_linear.py). Tasks are blocks of weight rows, run in
// parallel by the launcher. Every output is summed by one thread in a fixed order (16 lane partial sums over
// k, a fixed pairwise tree over the lanes, then the scalar tail), so results do not depend on the
// thread count.
#include "kernels/cpu/skinny_linear.h"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/float16.h"
#include "kernels/cpu/multiversion.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_X86_DISPATCH 1
#include <immintrin.h>
#else
#define SPECDEC_X86_DISPATCH 0
#endif

namespace specdec::kernels::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int kTile = 4;                 // weight rows and input rows per register tile
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

// float16 weights: the conversion instruction differs per ISA, which target_clones cannot express
// (one body for every clone), so one function per ISA with its loader, picked at run time.
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

}  // namespace

// float32 weights: one multiversioned entry (target_clones picks AVX-512 / AVX2+FMA / baseline).
SPECDEC_MULTIVERSION void skinny_rows_f32(
    const float* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  rows_block_impl<F32>(w, x, M, K, n0, n1, y, N);
}

// The float16 path: kAuto is the widest this CPU runs; a named one is null where it cannot run.
SkinnyRowsF16 skinny_rows_f16(HalfPath path) {
  if (path == HalfPath::kPortable) return rows_block_f16_base;
#if SPECDEC_X86_DISPATCH
  const bool v4 = __builtin_cpu_supports("x86-64-v4"), v3 = __builtin_cpu_supports("x86-64-v3");
  if (path == HalfPath::kAuto) return v4 ? rows_block_f16_v4 : v3 ? rows_block_f16_v3 : rows_block_f16_base;
  if (path == HalfPath::kAvx512) return v4 ? rows_block_f16_v4 : nullptr;
  return v3 ? rows_block_f16_v3 : nullptr;  // kAvx2
#else
  return path == HalfPath::kAuto ? rows_block_f16_base : nullptr;
#endif
}

}  // namespace specdec::kernels::cpu
