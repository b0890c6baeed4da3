// CPU kernel of torch.ops.specdec.tree_attention (semantics: specdec/ops/tree_attention.py).
//
// Same algorithm as the CUDA kernel: online softmax over key tiles, no materialised mask. One task
// is (batch b, KV head, block of tree nodes); its rows are every (node, query head) of that KV
// head's group, so each key/value tile is converted to float once and reused by all G query heads
// and all nodes of the block (up to 256 rows; smaller blocks only when threads would idle). Tasks run in parallel with at::parallel_for. The two inner loops work
// on 4 rows at a time (each loaded K / V element feeds 4 FMAs from registers) and vectorise without
// reassociation: scores accumulate over d into key-contiguous rows (K tile stored transposed),
// outputs accumulate over keys into d-contiguous register chunks. On x86-64 they
// are compiled for AVX-512 / AVX2+FMA / baseline and picked at load time (target_clones), because
// the extension itself is built for the baseline ISA.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/multiversion.h"
#include "ops/tree_attention_checks.h"

namespace specdec {
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

// One key tile as float: kt [D, T] (transposed, columns >= keys zero) and vt [T, D] (rows >= keys
// zero) from `keys` rows of K and V (`k_row` / `v_row`: element strides between consecutive keys).
// K is converted row by row into kr ([T, D] scratch) (a contiguous, vectorisable conversion: for bf16 a
// 16-bit shift), then transposed into kt.
template <typename T>
inline void load_tile_impl(const T* k, int64_t k_row, const T* v, int64_t v_row, int64_t keys, int64_t dim,
                           float* kr, float* kt, float* vt) {
  for (int64_t j = 0; j < kKeyTile; ++j) {
    float* kd = kr + j * dim;
    float* vd = vt + j * dim;
    if (j < keys) {
      const T* ks = k + j * k_row;
      const T* vs = v + j * v_row;
      for (int64_t d = 0; d < dim; ++d) kd[d] = static_cast<float>(ks[d]);
      for (int64_t d = 0; d < dim; ++d) vd[d] = static_cast<float>(vs[d]);
    } else {
      std::fill(kd, kd + dim, 0.0f);
      std::fill(vd, vd + dim, 0.0f);
    }
  }
  for (int64_t d = 0; d < dim; ++d) {
    for (int64_t j = 0; j < kKeyTile; ++j) kt[d * kKeyTile + j] = kr[j * dim + d];
  }
}

SPECDEC_MULTIVERSION void load_tile(const float* k, int64_t k_row, const float* v, int64_t v_row, int64_t keys,
                                    int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}
SPECDEC_MULTIVERSION void load_tile(const double* k, int64_t k_row, const double* v, int64_t v_row, int64_t keys,
                                    int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}
SPECDEC_MULTIVERSION void load_tile(const c10::Half* k, int64_t k_row, const c10::Half* v, int64_t v_row, int64_t keys,
                                    int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}
SPECDEC_MULTIVERSION void load_tile(const c10::BFloat16* k, int64_t k_row, const c10::BFloat16* v, int64_t v_row,
                                    int64_t keys, int64_t dim, float* scratch, float* kt, float* vt) {
  load_tile_impl(k, k_row, v, v_row, keys, dim, scratch, kt, vt);
}

inline bool mask_bit(const int64_t* row, int64_t j) {
  return (static_cast<uint64_t>(row[j >> 6]) >> (j & 63)) & 1u;
}

// Checks that tree_mask (contiguous int64 [B, N, W]) is an ancestor relation and that prefix_lens
// fits in S rows: a row is all zero (padding) or holds its own bit, no bit j > i, and every real row
// equals its parent's row (highest set bit below i) plus its own bit. O(B N W).
void validate_mask(const int64_t* mask, const int32_t* prefix, const TreeAttentionSizes& sz) {
  const int64_t n = sz.nodes, w = sz.words;
  for (int64_t b = 0; b < sz.batch; ++b) {
    TORCH_CHECK_VALUE(prefix[b] >= 0 && prefix[b] + n <= sz.seq, "tree_attention: prefix_lens[", b, "] = ", prefix[b],
                      " must lie in [0, S - N] = [0, ", sz.seq - n, "]");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t* row = mask + (b * n + i) * w;
      bool any = false;
      for (int64_t x = 0; x < w; ++x) any = any || row[x] != 0;
      if (!any) continue;
      TORCH_CHECK_VALUE(mask_bit(row, i), "tree_attention: tree_mask[", b, ", ", i,
                        "] has ancestor bits but not its own bit (rows are all-zero padding or include node i itself)");
      for (int64_t x = i >> 6; x < w; ++x) {
        uint64_t future = static_cast<uint64_t>(row[x]);
        if (x == (i >> 6)) future &= (i & 63) == 63 ? 0 : ~((uint64_t{2} << (i & 63)) - 1);
        TORCH_CHECK_VALUE(future == 0, "tree_attention: tree_mask[", b, ", ", i,
                          "] has a bit j > i (parents must precede children; bits past N must be zero)");
      }
      int64_t parent = -1;
      for (int64_t j = i - 1; j >= 0 && parent < 0; --j) parent = mask_bit(row, j) ? j : -1;
      const int64_t* prow = parent >= 0 ? mask + (b * n + parent) * w : nullptr;
      for (int64_t x = 0; x < w; ++x) {
        uint64_t expect = prow ? static_cast<uint64_t>(prow[x]) : 0;
        if (x == (i >> 6)) expect |= uint64_t{1} << (i & 63);
        TORCH_CHECK_VALUE(static_cast<uint64_t>(row[x]) == expect, "tree_attention: tree_mask[", b, ", ", i,
                          "] is not its parent's row plus its own bit (not a consistent ancestor relation)");
      }
    }
  }
}

template <typename T>
struct CpuTask {
  const T* q; const T* k; const T* v; T* out;
  const int64_t* mask; const int32_t* prefix;
  TreeAttentionSizes sz;
  int64_t qs[3], ks[3], vs[3];  // strides (elements) of dims 0..2 of q, k, v
  int64_t node_block;

  // Rows of one task: nodes [n0, n1) x the G query heads of KV head kvh, row r = (node - n0) * G + g.
  void run(int64_t b, int64_t kvh, int64_t n0, int64_t n1, std::vector<float>& scratch) const {
    const int64_t dim = sz.head_dim, g_count = sz.q_heads / sz.kv_heads, w = sz.words;
    const int64_t rows = (n1 - n0) * g_count;
    const int64_t rows_pad = (rows + kRowBlock - 1) / kRowBlock * kRowBlock;
    const int64_t p_len = prefix[b];
    float* qf = scratch.data();                  // [rows_pad, D], pre-scaled, padding rows zero
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
      for (int64_t d = 0; d < dim; ++d) qf[r * dim + d] = static_cast<float>(src[d]) * sz.scale;
    }
    std::fill(m, m + rows_pad, -std::numeric_limits<float>::infinity());  // padding rows run too (q = 0)
    std::fill(l, l + rows_pad, 0.0f);
    // Keys beyond the last node of this block's tree part are never attended by its rows.
    const int64_t key_end = p_len + n1;
    for (int64_t t0 = 0; t0 < key_end; t0 += kKeyTile) {
      const int64_t tk = std::min(kKeyTile, key_end - t0);
      load_tile(k + b * ks[0] + t0 * ks[1] + kvh * ks[2], ks[1], v + b * vs[0] + t0 * vs[1] + kvh * vs[2], vs[1],
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
        std::fill(dst, dst + dim, static_cast<T>(0.0f));  // if its q made acc inf/NaN
        continue;
      }
      const float inv = 1.0f / l[r];
      for (int64_t d = 0; d < dim; ++d) dst[d] = static_cast<T>(acc[r * dim + d] * inv);
    }
  }
};

// Nodes per task. A task converts (and transposes) every K/V tile of its (batch, KV head) once for
// all its rows, so few large node blocks convert the least; but every thread needs work, so blocks
// are halved while there are fewer than two tasks per thread.
int64_t choose_node_block(const TreeAttentionSizes& sz, int64_t g_count) {
  int64_t nb = std::max<int64_t>(1, std::min<int64_t>(sz.nodes, kMaxRows / g_count));
  const int64_t want = 2 * static_cast<int64_t>(at::get_num_threads());
  while (nb > kMinNodeBlock && sz.batch * sz.kv_heads * ((sz.nodes + nb - 1) / nb) < want) nb = (nb + 1) / 2;
  return nb;
}

at::Tensor tree_attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                              const at::Tensor& mask_in, const at::Tensor& prefix_in, std::optional<double> scale) {
  const TreeAttentionSizes sz = check_tree_attention_inputs(q_in, k_in, v_in, mask_in, prefix_in, scale);
  const at::Tensor q = last_dim_contiguous(q_in), k = last_dim_contiguous(k_in), v = last_dim_contiguous(v_in);
  const at::Tensor mask = mask_in.contiguous(), prefix = prefix_in.contiguous();
  validate_mask(mask.data_ptr<int64_t>(), prefix.data_ptr<int32_t>(), sz);
  at::Tensor out = at::empty({sz.batch, sz.nodes, sz.q_heads, sz.head_dim}, q.options());
  if (out.numel() == 0) return out;
  const int64_t g_count = sz.q_heads / sz.kv_heads;
  const int64_t node_block = choose_node_block(sz, g_count);
  const int64_t blocks = (sz.nodes + node_block - 1) / node_block;
  const int64_t tasks = sz.batch * sz.kv_heads * blocks;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "tree_attention_cpu", [&] {
    CpuTask<scalar_t> task{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                           out.data_ptr<scalar_t>(), mask.data_ptr<int64_t>(), prefix.data_ptr<int32_t>(),
                           sz, {q.stride(0), q.stride(1), q.stride(2)}, {k.stride(0), k.stride(1), k.stride(2)},
                           {v.stride(0), v.stride(1), v.stride(2)}, node_block};
    const int64_t rows_max = (node_block * g_count + kRowBlock - 1) / kRowBlock * kRowBlock;
    const size_t scratch_len =
        2 * rows_max * sz.head_dim + 3 * sz.head_dim * kKeyTile + 2 * rows_max + 2 * kRowBlock * kKeyTile;
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(scratch_len);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t blk = t % blocks, bh = t / blocks;
        const int64_t n0 = blk * node_block;
        task.run(bh / sz.kv_heads, bh % sz.kv_heads, n0, std::min(sz.nodes, n0 + node_block), scratch);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("tree_attention", &tree_attention_cpu); }

}  // namespace specdec
