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
// they cost 1.2-1.5x the single-row GEMV in a real forward (benchmarks/kernels/skinny_linear.py).
// This kernel reads each weight row once and applies it to all M input rows from registers.
//
// Layout of the work: register tiles of TW weight rows x TM input rows, one accumulator of 16 floats
// per (weight row, input row); each loaded weight vector feeds TM FMAs and each loaded input vector TW.
// The tile is sized to the ISA's vector registers, since a spilled accumulator costs a store and a
// load per FMA: AVX-512 runs 4 x 4 (16 + 4 + 1 of 32 zmm), AVX2 and the baseline 2 x 2 (8 + 4 + 2
// of 16 ymm; a 4 x 4 tile of 16-float accumulators needs 32 ymm and spilled, which made 8 input rows
// cost 1.7x BLAS on an AVX2 machine). Input rows (M x K floats, at most 64 x 4 KB here) stay in
// L1/L2, so DRAM traffic is the weight matrix once. With 2+ input rows each tile also prefetches the
// weight rows 16 rows ahead: the hardware prefetchers lose these short row streams once FMAs slow the
// loads, and DRAM time and FMA time then add up instead of overlapping (8 rows: 24.4 -> 18.4 ms over
// a SmolLM2 forward's products, benchmarks/kernels/skinny_linear.py). Tasks are blocks of weight rows,
// run in parallel by the launcher. Every output is summed by one thread in a fixed order (16 lane
// partial sums over k, a fixed pairwise tree over the lanes, then the scalar tail) whatever the tile
// shape, so results depend neither on the thread count nor on the ISA.
#include "kernels/cpu/skinny_linear.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/float16.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_X86_DISPATCH 1
#include <immintrin.h>
#else
#define SPECDEC_X86_DISPATCH 0
#endif

namespace specdec::kernels::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kPrefetchAhead = 16;  // weight rows a tile prefetches ahead of its first row

typedef float vec16 __attribute__((vector_size(kLanes * sizeof(float))));
typedef float vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef uint32_t u32x16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t u16x16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t u32x8 __attribute__((vector_size(8 * sizeof(uint32_t))));
typedef uint16_t u16x8 __attribute__((vector_size(8 * sizeof(uint16_t))));

// The native vector of V floats: 16 (one zmm) on AVX-512, 8 (one ymm) elsewhere. GCC lowers a
// 16-float vector on AVX2 through general registers and the stack, so an AVX2 tile works on halves.
template <int V>
using vec_t = std::conditional_t<V == 16, vec16, vec8>;

#define SPECDEC_INLINE inline __attribute__((always_inline))

template <int V>
SPECDEC_INLINE vec_t<V> loadf(const float* p) {
  vec_t<V> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Weight loaders: element type T, V weights as fp32 (load<V>) and one (scalar). Every one is exact,
// so the FMAs that follow see the same fp32 values whatever the weight type.
struct F32 {
  using T = float;
  template <int V>
  static SPECDEC_INLINE vec_t<V> load(const float* p) { return loadf<V>(p); }
  static SPECDEC_INLINE float scalar(float w) { return w; }
};

struct F16Bits {  // portable: the integer conversion above, vectorised
  using T = uint16_t;
  template <int V>
  static SPECDEC_INLINE vec_t<V> load(const uint16_t* p) {
    using h_t = std::conditional_t<V == 16, u16x16, u16x8>;
    using u_t = std::conditional_t<V == 16, u32x16, u32x8>;
    h_t h;
    std::memcpy(&h, p, sizeof h);
    return half_bits_to_float<u_t, vec_t<V>>(__builtin_convertvector(h, u_t));
  }
  static SPECDEC_INLINE float scalar(uint16_t w) { return half_bits_to_float<uint32_t, float>(w); }
};

#if SPECDEC_X86_DISPATCH
// Not always_inline: GCC refuses to force an AVX function into the generic templates below; the
// per-ISA entry points are `flatten`, which inlines these loads once they sit inside an AVX function.
struct F16C : F16Bits {  // AVX2 + F16C: one vcvtph2ps ymm
  template <int V>
  static inline __attribute__((target("avx2,f16c"))) vec8 load(const uint16_t* p) {
    static_assert(V == 8, "the F16C loader widens 8 weights");
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    vec8 out;
    std::memcpy(&out, &v, sizeof v);
    return out;
  }
};

struct F16Avx512 : F16Bits {  // AVX-512F: one vcvtph2ps zmm
  template <int V>
  static inline __attribute__((target("avx512f"))) vec16 load(const uint16_t* p) {
    static_assert(V == 16, "the AVX-512 loader widens 16 weights");
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

// The lane sum of one 16-lane accumulator held as H = 16 / V native vectors (lanes 0-7 in the
// first half), by reduce16's tree (halves added pairwise: 8, then 4, 2, 1 lanes), so every tile
// shape and vector width gives bitwise the outputs of a 4 x 4 tile of 16-float vectors.
template <int V>
SPECDEC_INLINE float reduce_one(const vec_t<V>* parts) {
  typedef float vec4 __attribute__((vector_size(4 * sizeof(float))));
  typedef float vec2 __attribute__((vector_size(2 * sizeof(float))));
  vec8 s8;
  if constexpr (V == 8) {
    s8 = parts[0] + parts[1];
  } else {
    s8 = __builtin_shufflevector(parts[0], parts[0], 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(parts[0], parts[0], 8, 9, 10, 11, 12, 13, 14, 15);
  }
  const vec4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  const vec2 s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
  return s2[0] + s2[1];
}

// The TW * TM lane sums of a tile's accumulators (slot r * TM + m), by the one fixed tree.
template <int TW, int TM, int V>
SPECDEC_INLINE void reduce_tile(const vec_t<V>* acc, float* out) {
  if constexpr (V == kLanes && TW * TM == kLanes) {
    const vec16 sums = reduce16(acc);
    for (int l = 0; l < kLanes; ++l) out[kBitReverse4[l]] = sums[l];
  } else {
    for (int i = 0; i < TW * TM; ++i) out[i] = reduce_one<V>(acc + i * (kLanes / V));
  }
}

// y[m * ldy + r] = dot(w[r * K:], x[m * K:]) for r < R, m < MT (R <= TW, MT <= TM), in native
// vectors of V floats. When ``next`` is not null, the same columns of the TW weight rows at ``next``
// are prefetched on the way.
template <int TW, int TM, int V, int R, int MT, typename L, typename W = typename L::T>
SPECDEC_INLINE void tile(const W* w, const float* x, int64_t K, float* y, int64_t ldy, const W* next) {
  constexpr int H = kLanes / V;  // native vectors per 16-lane accumulator
  vec_t<V> acc[TW * TM * H] = {};  // slot (r * TM + m) * H + h; unused slots stay zero
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    if (next != nullptr)
      for (int r = 0; r < TW; ++r) __builtin_prefetch(next + r * K + k, 0, 2);
    for (int h = 0; h < H; ++h) {
      vec_t<V> wv[R];
      for (int r = 0; r < R; ++r) wv[r] = L::template load<V>(w + r * K + k + h * V);
      for (int m = 0; m < MT; ++m) {
        const vec_t<V> xv = loadf<V>(x + m * K + k + h * V);
        for (int r = 0; r < R; ++r) acc[(r * TM + m) * H + h] += wv[r] * xv;
      }
    }
  }
  float out[TW * TM];
  reduce_tile<TW, TM, V>(acc, out);
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < MT; ++m) {
      float s = out[r * TM + m];
      // An explicit FMA: contraction of the tail must not differ between the weight types.
      for (int64_t t = k; t < K; ++t) s = __builtin_fmaf(L::scalar(w[r * K + t]), x[m * K + t], s);
      y[m * ldy + r] = s;
    }
  }
}

// The first pass over the R weight rows (input rows 0 to TM - 1) prefetches ``next`` (or nothing: null).
template <int TW, int TM, int V, int R, typename L, typename W = typename L::T>
SPECDEC_INLINE void row_tile(const W* w, const float* x, int64_t M, int64_t K, float* y, int64_t ldy,
                             const W* next) {
  int64_t m = 0;
  for (; m + TM <= M; m += TM, next = nullptr) tile<TW, TM, V, R, TM, L>(w, x + m * K, K, y + m * ldy, ldy, next);
  if constexpr (TM > 3) {
    if (M - m == 3) return tile<TW, TM, V, R, 3, L>(w, x + m * K, K, y + m * ldy, ldy, next);
  }
  if constexpr (TM > 2) {
    if (M - m == 2) return tile<TW, TM, V, R, 2, L>(w, x + m * K, K, y + m * ldy, ldy, next);
  }
  if (M - m == 1) tile<TW, TM, V, R, 1, L>(w, x + m * K, K, y + m * ldy, ldy, next);
}

// Weight rows [n0, n1): y[:, n0:n1] for all M input rows. Each full tile prefetches the weight rows
// kPrefetchAhead further on (within [0, N)), so DRAM streams the next rows while the FMAs of this
// tile run: without it a step of 2-8 rows costs the single-row DRAM time PLUS the FMA time.
template <int TW, int TM, int V, typename L, typename W = typename L::T>
SPECDEC_INLINE void rows_block_impl(
    const W* w, const float* x, int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N) {
  int64_t n = n0;
  for (; n + TW <= n1; n += TW) {
    constexpr int64_t ahead = kPrefetchAhead * static_cast<int64_t>(sizeof(float) / sizeof(W));
    // fp16 rows are half as long: prefetch twice as many rows ahead, and with one input row too (the
    // hardware prefetchers alone left a 1-row product of fp16 weights at 1.2x the fp32 one, not 2x).
    const W* next = (M > 1 || sizeof(W) < sizeof(float)) && n + ahead + TW <= N ? w + (n + ahead) * K : nullptr;
    row_tile<TW, TM, V, TW, L, W>(w + n * K, x, M, K, y + n, N, next);
  }
  if constexpr (TW > 3) {
    if (n1 - n == 3) return row_tile<TW, TM, V, 3, L, W>(w + n * K, x, M, K, y + n, N, nullptr);
  }
  if constexpr (TW > 2) {
    if (n1 - n == 2) return row_tile<TW, TM, V, 2, L, W>(w + n * K, x, M, K, y + n, N, nullptr);
  }
  if (n1 - n == 1) row_tile<TW, TM, V, 1, L, W>(w + n * K, x, M, K, y + n, N, nullptr);
}

// One function per ISA and weight type, each with its tile shape and float16 loader (target_clones
// compiles one body for every clone, so it cannot vary the tile), picked at run time.
#define SPECDEC_ROWS_ARGS int64_t M, int64_t K, int64_t n0, int64_t n1, float* y, int64_t N
#define SPECDEC_ROWS_CALL M, K, n0, n1, y, N

__attribute__((optimize("fp-contract=fast"))) void rows_f32_base(const float* w, const float* x, SPECDEC_ROWS_ARGS) {
  rows_block_impl<2, 2, 8, F32>(w, x, SPECDEC_ROWS_CALL);
}

__attribute__((optimize("fp-contract=fast"))) void rows_f16_base(const uint16_t* w, const float* x,
                                                                  SPECDEC_ROWS_ARGS) {
  rows_block_impl<2, 2, 8, F16Bits>(w, x, SPECDEC_ROWS_CALL);
}

#if SPECDEC_X86_DISPATCH
#define SPECDEC_ISA(arch) __attribute__((target(arch), optimize("fp-contract=fast"), flatten))

SPECDEC_ISA("arch=x86-64-v3") void rows_f32_v3(const float* w, const float* x, SPECDEC_ROWS_ARGS) {
  rows_block_impl<2, 2, 8, F32>(w, x, SPECDEC_ROWS_CALL);
}

SPECDEC_ISA("arch=x86-64-v3") void rows_f16_v3(const uint16_t* w, const float* x, SPECDEC_ROWS_ARGS) {
  rows_block_impl<2, 2, 8, F16C>(w, x, SPECDEC_ROWS_CALL);
}

SPECDEC_ISA("arch=x86-64-v4") void rows_f32_v4(const float* w, const float* x, SPECDEC_ROWS_ARGS) {
  rows_block_impl<4, 4, 16, F32>(w, x, SPECDEC_ROWS_CALL);
}

SPECDEC_ISA("arch=x86-64-v4") void rows_f16_v4(const uint16_t* w, const float* x, SPECDEC_ROWS_ARGS) {
  rows_block_impl<4, 4, 16, F16Avx512>(w, x, SPECDEC_ROWS_CALL);
}
#endif

}  // namespace

// float32 weights: the widest ISA this CPU runs.
void skinny_rows_f32(const float* w, const float* x, SPECDEC_ROWS_ARGS) {
#if SPECDEC_X86_DISPATCH
  if (__builtin_cpu_supports("x86-64-v4")) return rows_f32_v4(w, x, SPECDEC_ROWS_CALL);
  if (__builtin_cpu_supports("x86-64-v3")) return rows_f32_v3(w, x, SPECDEC_ROWS_CALL);
#endif
  rows_f32_base(w, x, SPECDEC_ROWS_CALL);
}

// The float16 path: kAuto is the widest this CPU runs; a named one is null where it cannot run.
SkinnyRowsF16 skinny_rows_f16(HalfPath path) {
  if (path == HalfPath::kPortable) return rows_f16_base;
#if SPECDEC_X86_DISPATCH
  const bool v4 = __builtin_cpu_supports("x86-64-v4"), v3 = __builtin_cpu_supports("x86-64-v3");
  if (path == HalfPath::kAuto) return v4 ? rows_f16_v4 : v3 ? rows_f16_v3 : rows_f16_base;
  if (path == HalfPath::kAvx512) return v4 ? rows_f16_v4 : nullptr;
  return v3 ? rows_f16_v3 : nullptr;  // kAvx2
#else
  return path == HalfPath::kAuto ? rows_f16_base : nullptr;
#endif
}

}  // namespace specdec::kernels::cpu
