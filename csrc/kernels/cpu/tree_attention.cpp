// CPU kernel of torch.ops.specdec.tree_attention, torch-free: raw pointers, sizes and strides in,
// launched by csrc/ops/tree_attention_cpu.cpp (semantics: specdec/ops/tree_attention.py).
//
// Same algorithm as the CUDA kernel: online softmax over key tiles, no materialised mask. One task
// is (batch b, KV head, block of tree nodes); its rows are every (node, query head) of that KV
// head's group, so each key/value tile is converted to float once and reused by all G query heads
// and all nodes of the block (up to 256 rows; smaller blocks only when threads would idle). The
// launcher runs tasks in parallel. The two inner loops work on 4 rows at a time (each loaded K / V
// element feeds 4 FMAs from registers) and vectorise without reassociation: scores accumulate over
// d into key-contiguous rows (K tile stored transposed), outputs accumulate over keys into
// d-contiguous register chunks. On x86-64 they are compiled for AVX-512 / AVX2+FMA / baseline and
// picked at load time (target_clones), because the extension itself is built for the baseline ISA.
// float16 / bfloat16 values are widened exactly and results narrowed as torch's Half / BFloat16 do
// (csrc/kernels/cpu/float16.h).
#include "kernels/cpu/tree_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/float16.h"
#include "kernels/cpu/multiversion.h"

namespace specdec::kernels::cpu {
namespace {
constexpr int64_t kKeyTile = 32;   // keys per tile (T)
constexpr int64_t kMaxRows = 256;  // rows (node x head pairs) per task at most
constexpr int64_t kMinNodeBlock = 4;  // smallest node block when splitting for parallelism
constexpr int64_t kRowBlock = 4;   // rows sharing each loaded K / V element (register blocking)
constexpr int64_t kDimChunk = 32;  // output dims kept in registers while streaming a V tile

// s[r * T + j] = sum_d q[r * D + d] * kt[d * T + j] for 4 rows r, j < T.
// q: [4, D] rows, kt: [D, T] transposed key tile, s: [4, T].
SPECDEC_MULTIVERSION void scores_block(const float* q, const float* kt, int64_t dim, float* s) {
  float acc[kRowBlock][kKeyTile] = {};
  for (int64_t d = 0; d < dim; ++d) {
    const float* row = kt + d * kKeyTile;
    for (int64_t r = 0; r < kRowBlock; ++r) {
      const float qd = q[r * dim + d];
      for (int64_t j = 0; j < kKeyTile; ++j) acc[r][j] += qd * row[j];
    }
  }
  for (int64_t r = 0; r < kRowBlock; ++r) {
    for (int64_t j = 0; j < kKeyTile; ++j) s[r * kKeyTile + j] = acc[r][j];
  }
}

// out[r, d] = out[r, d] * alpha[r] + sum_j p[r * T + j] * vt[j * D + d] for 4 rows r.
// p: [4, T] probabilities, vt: [T, D] value tile, out: [4, D]. Dims go in chunks of 32 held in
// registers (2 AVX-512 vectors per row: each loaded V vector feeds 4 FMAs). One flat loop per row
// with restrict pointers: written as a 4 x 32 nest, GCC vectorised across the 4 rows with
// gathers instead (7x slower than the score loop on the same data).
SPECDEC_MULTIVERSION void accumulate_block(const float* __restrict p, const float* __restrict vt, int64_t keys,
                                           int64_t dim, const float* __restrict alpha, float* __restrict out) {
  static_assert(kRowBlock == 4, "accumulate_block is written for 4 rows");
  int64_t d0 = 0;
  for (; d0 + kDimChunk <= dim; d0 += kDimChunk) {
    float o0[kDimChunk], o1[kDimChunk], o2[kDimChunk], o3[kDimChunk];
    for (int64_t c = 0; c < kDimChunk; ++c) o0[c] = out[d0 + c] * alpha[0];
    for (int64_t c = 0; c < kDimChunk; ++c) o1[c] = out[dim + d0 + c] * alpha[1];
    for (int64_t c = 0; c < kDimChunk; ++c) o2[c] = out[2 * dim + d0 + c] * alpha[2];
    for (int64_t c = 0; c < kDimChunk; ++c) o3[c] = out[3 * dim + d0 + c] * alpha[3];
    for (int64_t j = 0; j < keys; ++j) {
      const float* __restrict row = vt + j * dim + d0;
      const float p0 = p[j], p1 = p[kKeyTile + j], p2 = p[2 * kKeyTile + j], p3 = p[3 * kKeyTile + j];
      for (int64_t c = 0; c < kDimChunk; ++c) o0[c] += p0 * row[c];
      for (int64_t c = 0; c < kDimChunk; ++c) o1[c] += p1 * row[c];
      for (int64_t c = 0; c < kDimChunk; ++c) o2[c] += p2 * row[c];
      for (int64_t c = 0; c < kDimChunk; ++c) o3[c] += p3 * row[c];
    }
    for (int64_t c = 0; c < kDimChunk; ++c) out[d0 + c] = o0[c];
    for (int64_t c = 0; c < kDimChunk; ++c) out[dim + d0 + c] = o1[c];
    for (int64_t c = 0; c < kDimChunk; ++c) out[2 * dim + d0 + c] = o2[c];
    for (int64_t c = 0; c < kDimChunk; ++c) out[3 * dim + d0 + c] = o3[c];
  }
  for (; d0 < dim; ++d0) {
    for (int64_t r = 0; r < kRowBlock; ++r) {
      float o = out[r * dim + d0] * alpha[r];
      for (int64_t j = 0; j < keys; ++j) o += p[r * kKeyTile + j] * vt[j * dim + d0];
      out[r * dim + d0] = o;
    }
  }
}

// s[j] = exp(s[j] - m) for j < T, vectorisable (std::exp is a scalar libm call and dominated the
// kernel). 2^y with y = (s - m) log2(e) <= 0 split as 2^n * 2^f, n = round(y), |f| <= 1/2, 2^f by
// its degree-6 Taylor polynomial (relative error < 2e-7, about one float ulp); y < -125 -> 0, so
// masked keys (-inf) give exactly 0.
inline __attribute__((always_inline)) void exp_shifted(float* s, float m) {
  constexpr float kLog2e = 1.44269504088896341f, kRound = 12582912.0f;  // 1.5 * 2^23
  for (int64_t j = 0; j < kKeyTile; ++j) {
    const float y = (s[j] - m) * kLog2e;
    const float yc = y < -125.0f ? -125.0f : y;
    const float n = (yc + kRound) - kRound;  // round to nearest
    const float f = yc - n;
    float p = 1.54035304e-4f;
    p = p * f + 1.33335581e-3f;
    p = p * f + 9.61812911e-3f;
    p = p * f + 5.55041087e-2f;
    p = p * f + 2.40226507e-1f;
    p = p * f + 6.93147181e-1f;
    p = p * f + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    s[j] = y < -125.0f ? 0.0f : p * scale;
  }
}

// Largest / sum of T values by a fixed halving tree (vectorises without reassociation flags; the
// order is the same on every ISA, so results do not depend on which clone runs).
inline __attribute__((always_inline)) float tree_max(const float* x) {
  float t[kKeyTile];
  std::memcpy(t, x, sizeof(t));
  for (int64_t w = kKeyTile / 2; w > 0; w /= 2) {
    for (int64_t j = 0; j < w; ++j) t[j] = t[j] > t[j + w] ? t[j] : t[j + w];
  }
  return t[0];
}

inline __attribute__((always_inline)) float tree_sum(const float* x) {
  float t[kKeyTile];
  std::memcpy(t, x, sizeof(t));
  for (int64_t w = kKeyTile / 2; w > 0; w /= 2) {
    for (int64_t j = 0; j < w; ++j) t[j] += t[j + w];
  }
  return t[0];
}

// Online-softmax update of 4 rows for one key tile. s [4, T]: scores in, unnormalised
// probabilities out (0 for hidden keys). visible [4, T] (1 = the row sees the key) or nullptr when
// every row sees every key of the tile. m, l: the rows' running max and sum; alpha: the factor
// their accumulated outputs must be rescaled by. Returns whether any row saw a key.
SPECDEC_MULTIVERSION bool softmax_rows(float* s, const float* visible, float* m, float* l, float* alpha) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  bool touched = false;
  for (int64_t i = 0; i < kRowBlock; ++i) {
    float* sr = s + i * kKeyTile;
    if (visible != nullptr) {
      const float* vr = visible + i * kKeyTile;
      for (int64_t j = 0; j < kKeyTile; ++j) sr[j] = vr[j] > 0.0f ? sr[j] : kNegInf;
    }
    alpha[i] = 1.0f;
    const float tile_max = tree_max(sr);
    if (tile_max == kNegInf) {  // nothing visible in this tile: contributes nothing
      std::fill(sr, sr + kKeyTile, 0.0f);
      continue;
    }
    const float m_new = std::max(m[i], tile_max);
    alpha[i] = std::exp(m[i] - m_new);  // 0 when m was -inf
    exp_shifted(sr, m_new);
    l[i] = l[i] * alpha[i] + tree_sum(sr);
    m[i] = m_new;
    touched = true;
  }
  return touched;
}

// Element types: how a stored value widens to float and a float result narrows back (exactly as
// torch's CPU types do).
struct F32 {
  using T = float;
  static float widen(float x) { return x; }
  static float narrow(float x) { return x; }
};
struct F16 {
  using T = uint16_t;
  static float widen(uint16_t x) { return half_to_float(x); }
  static uint16_t narrow(float x) { return float_to_half(x); }
};
struct BF16 {
  using T = uint16_t;
  static float widen(uint16_t x) { return bf16_to_float(x); }
  static uint16_t narrow(float x) { return float_to_bf16(x); }
};

// One key tile as float: kt [D, T] (transposed, columns >= keys zero) and vt [T, D] (rows >= keys
// zero) from `keys` rows of K and V (`k_row` / `v_row`: element strides between consecutive keys).
// K is converted row by row into kr ([T, D] scratch) (a contiguous, vectorisable conversion: for bf16 a
// 16-bit shift), then transposed into kt.
template <typename E, typename T = typename E::T>
inline void load_tile_impl(const T* k, int64_t k_row, const T* v, int64_t v_row, int64_t keys, int64_t dim,
                           float* kr, float* kt, float* vt) {
  for (int64_t j = 0; j < kKeyTile; ++j) {
    float* kd = kr + j * dim;
    float* vd = vt + j * dim;
    if (j < keys) {
      const T* ks = k + j * k_row;
      const T* vs = v + j * v_row;
      for (int64_t d = 0; d < dim; ++d) kd[d] = E::widen(ks[d]);
      for (int64_t d = 0; d < dim; ++d) vd[d] = E::widen(vs[d]);
    } else {
      std::fill(kd, kd + dim, 0.0f);
      std::fill(vd, vd + dim, 0.0f);
    }
  }
  for (int64_t d = 0; d < dim; ++d) {
    for (int64_t j = 0; j < kKeyTile; ++j) kt[d * kKeyTile + j] = kr[j * dim + d];
  }
}

SPECDEC_MULTIVERSION void load_tile(F32, const float* k, int64_t k_row, const float* v, int64_t v_row, int64_t keys,
                                    int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl<F32>(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}
SPECDEC_MULTIVERSION void load_tile(F16, const uint16_t* k, int64_t k_row, const uint16_t* v, int64_t v_row,
                                    int64_t keys, int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl<F16>(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}
SPECDEC_MULTIVERSION void load_tile(BF16, const uint16_t* k, int64_t k_row, const uint16_t* v, int64_t v_row,
                                    int64_t keys, int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl<BF16>(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}

template <typename E, typename T = typename E::T>
struct CpuTask {
  const T* q; const T* k; const T* v; T* out;
  const int64_t* mask; const int32_t* prefix;
  const TreeAttentionCpuParams& sz;
  const int64_t* qs; const int64_t* ks; const int64_t* vs;  // strides (elements) of dims 0..2 of q, k, v

  // Rows of one task: nodes [n0, n1) x the G query heads of KV head kvh, row r = (node - n0) * G + g.
  void run(int64_t b, int64_t kvh, int64_t n0, int64_t n1, float* scratch) const {
    const int64_t dim = sz.head_dim, g_count = sz.q_heads / sz.kv_heads, w = sz.words;
    const int64_t rows = (n1 - n0) * g_count;
    const int64_t rows_pad = (rows + kRowBlock - 1) / kRowBlock * kRowBlock;
    const int64_t p_len = prefix[b];
    float* qf = scratch;                         // [rows_pad, D], pre-scaled, padding rows zero
    float* acc = qf + rows_pad * dim;            // [rows_pad, D]
    float* kt = acc + rows_pad * dim;            // [D, T]
    float* vt = kt + dim * kKeyTile;             // [T, D]
    float* m = vt + kKeyTile * dim;              // [rows]
    float* l = m + rows_pad;                     // [rows]
    float* s = l + rows_pad;                     // [kRowBlock, T]
    float* kr = s + kRowBlock * kKeyTile;        // [T, D] K tile before the transpose
    float* vis = kr + kKeyTile * dim;            // [kRowBlock, T] key visibility of masked tiles
    std::fill(qf, qf + 2 * rows_pad * dim, 0.0f);
    std::vector<char> real(rows_pad, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t node = n0 + r / g_count, h = kvh * g_count + r % g_count;
      real[r] = mask_bit(mask + (b * sz.nodes + node) * w, node);
      const T* src = q + b * qs[0] + node * qs[1] + h * qs[2];
      for (int64_t d = 0; d < dim; ++d) qf[r * dim + d] = E::widen(src[d]) * sz.scale;
    }
    std::fill(m, m + rows_pad, -std::numeric_limits<float>::infinity());  // padding rows run too (q = 0)
    std::fill(l, l + rows_pad, 0.0f);
    // Keys beyond the last node of this block's tree part are never attended by its rows.
    const int64_t key_end = p_len + n1;
    for (int64_t t0 = 0; t0 < key_end; t0 += kKeyTile) {
      const int64_t tk = std::min(kKeyTile, key_end - t0);
      load_tile(E{}, k + b * ks[0] + t0 * ks[1] + kvh * ks[2], ks[1], v + b * vs[0] + t0 * vs[1] + kvh * vs[2], vs[1],
                tk, dim, kr, kt, vt);
      // Prefix tiles that are full need no mask; the last partial tile and tiles reaching the tree
      // get per-row visibility (prefix keys: every real row; tree key j: the row's ancestor bits).
      const bool masked = tk < kKeyTile || t0 + kKeyTile > p_len;
      for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
        bool any_real = false;
        for (int64_t i = 0; i < kRowBlock; ++i) any_real = any_real || real[r0 + i];
        if (!any_real) continue;
        if (masked) {
          for (int64_t i = 0; i < kRowBlock; ++i) {
            const int64_t r = r0 + i;
            float* vr = vis + i * kKeyTile;
            const int64_t* mrow = real[r] ? mask + (b * sz.nodes + n0 + r / g_count) * w : nullptr;
            for (int64_t j = 0; j < kKeyTile; ++j) {
              const int64_t t = t0 + j;
              vr[j] = mrow != nullptr && j < tk && (t < p_len || mask_bit(mrow, t - p_len)) ? 1.0f : 0.0f;
            }
          }
        }
        scores_block(qf + r0 * dim, kt, dim, s);
        float alpha[kRowBlock];
        const bool touched = softmax_rows(s, masked ? vis : nullptr, m + r0, l + r0, alpha);
        if (touched) accumulate_block(s, vt, tk, dim, alpha, acc + r0 * dim);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t node = n0 + r / g_count, h = kvh * g_count + r % g_count;
      T* dst = out + ((b * sz.nodes + node) * sz.q_heads + h) * dim;
      if (!real[r] || !(l[r] > 0.0f)) {  // padding node (or nothing visible): exactly zero, even
        std::fill(dst, dst + dim, E::narrow(0.0f));  // if its q made acc inf/NaN
        continue;
      }
      const float inv = 1.0f / l[r];
      for (int64_t d = 0; d < dim; ++d) dst[d] = E::narrow(acc[r * dim + d] * inv);
    }
  }
};

template <typename E>
void run_tasks(const TreeAttentionCpuParams& p, const TreeAttentionCpuPlan& plan, int64_t begin, int64_t end,
               float* scratch) {
  using T = typename E::T;
  const CpuTask<E> task{static_cast<const T*>(p.q), static_cast<const T*>(p.k), static_cast<const T*>(p.v),
                        static_cast<T*>(p.out), p.mask, p.prefix, p, p.q_stride, p.k_stride, p.v_stride};
  for (int64_t t = begin; t < end; ++t) {
    const int64_t blk = t % plan.blocks, bh = t / plan.blocks;
    const int64_t n0 = blk * plan.node_block;
    task.run(bh / p.kv_heads, bh % p.kv_heads, n0, std::min(p.nodes, n0 + plan.node_block), scratch);
  }
}

}  // namespace

TreeAttentionCpuPlan plan_tree_attention_cpu(const TreeAttentionCpuParams& p, int64_t threads) {
  const int64_t g_count = p.q_heads / p.kv_heads;
  // A task converts (and transposes) every K/V tile of its (batch, KV head) once for all its rows,
  // so few large node blocks convert the least; but every thread needs work, so blocks are halved
  // while there are fewer than two tasks per thread.
  int64_t nb = std::max<int64_t>(1, std::min<int64_t>(p.nodes, kMaxRows / g_count));
  const int64_t want = 2 * threads;
  while (nb > kMinNodeBlock && p.batch * p.kv_heads * ((p.nodes + nb - 1) / nb) < want) nb = (nb + 1) / 2;
  TreeAttentionCpuPlan plan{};
  plan.node_block = nb;
  plan.blocks = (p.nodes + nb - 1) / nb;
  plan.tasks = p.batch * p.kv_heads * plan.blocks;
  const int64_t rows_max = (nb * g_count + kRowBlock - 1) / kRowBlock * kRowBlock;
  plan.scratch_floats =
      2 * rows_max * p.head_dim + 3 * p.head_dim * kKeyTile + 2 * rows_max + 2 * kRowBlock * kKeyTile;
  return plan;
}

void run_tree_attention_cpu(const TreeAttentionCpuParams& p, const TreeAttentionCpuPlan& plan, int64_t task_begin,
                            int64_t task_end, float* scratch) {
  switch (p.dtype) {
    case DType::kFloat16:
      run_tasks<F16>(p, plan, task_begin, task_end, scratch);
      break;
    case DType::kBFloat16:
      run_tasks<BF16>(p, plan, task_begin, task_end, scratch);
      break;
    default:
      run_tasks<F32>(p, plan, task_begin, task_end, scratch);
      break;
  }
}

}  // namespace specdec::kernels::cpu
