// CUDA tree attention (torch-free; raw pointers). Semantics: specdec/ops/tree_attention.py.
//
// Tensor-core kernel (fp16 / bf16, head dim 64 or 128), flash-decoding style:
// * grid (node block, batch x KV head, prefix split). A CTA owns 64 query rows = (tree node, query
//   head) pairs of ONE KV head (row r -> node r / G, head kvh * G + r % G), so every key/value tile
//   it loads serves all G query heads of the group and up to 64 / G tree nodes at once (GQA-aware);
//   node blocks of one KV head sit next to each other in the grid and share tiles through L2.
// * keys are the request's prefix followed by its tree rows; split z covers keys
//   [z * split_keys, (z + 1) * split_keys), so long prefixes spread over many CTAs. With several
//   splits each CTA writes its normalised fp32 partial output and log2-sum-exp, and
//   combine_splits_kernel merges them (the flash-decoding reduction).
// * 64-key K and V tiles are double buffered in shared memory with 16-byte cp.async copies (rows
//   padded by 16 bytes so the fragment loads below are bank-conflict free; rows past the last key are
//   zero-filled so no garbage reaches P.V).
// * each warp holds 16 query rows as mma A fragments; S = Q K^T and O += P V use
//   mma.sync.m16n8k16 with fp32 accumulation (V fragments through ldmatrix.trans); the softmax is
//   online in the log2 domain.
// * masking needs no materialised mask: prefix keys are visible to every real node, tree key j to
//   node i when bit j of tree_mask[b, i] is set (read from the packed words, only in tiles that reach
//   the tree part). Padded nodes (own bit clear) see nothing and output zeros.
// The scalar kernel (one warp per query row, any head dim <= 256, fp32 too) is the fallback.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tree_attention_params.h"

namespace specdec {
namespace kernels {

constexpr int kWarps = 4;                // warps per CTA of the tensor-core kernel
constexpr int kRowsPerCta = 16 * kWarps; // query rows per CTA
constexpr int kKeyTile = 64;             // keys per shared-memory tile
constexpr int kPad = 8;                  // elements of padding per shared-memory row (16 bytes)
constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
struct MmaOps;

template <>
struct MmaOps<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ uint32_t pack2(__half lo, __half hi) {
    __half2 h(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaOps<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ uint32_t pack2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    __nv_bfloat162 h(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: zero-fill the 16 bytes
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending)); }

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ bool mask_bit(const int64_t* row, int j) {
  return (static_cast<unsigned long long>(__ldg(row + (j >> 6))) >> (j & 63)) & 1ull;
}

// The committed prefix of request b, clamped so that prefix + nodes <= seq: the Python front end
// validates prefix_lens (a device sync it pays once per step), but a caller of the raw op that
// skipped it must still not make the kernels read keys past the end of K/V.
__device__ __forceinline__ int clamped_prefix(const TreeAttentionParams& p, int b) {
  return max(0, min(p.prefix[b], p.seq - p.nodes));
}

// One CTA: 64 query rows of KV head (blockIdx.y % Hkv) of request (blockIdx.y / Hkv), node block
// blockIdx.x, keys of split blockIdx.z. Dynamic shared memory: 2 stages x (K, V) x 64 x (D + 8).
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32, 2) tree_attention_mma_kernel(const TreeAttentionParams p) {
  constexpr int kLds = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  auto k_tile = [&](int stage) { return smem + (stage * 2) * kKeyTile * kLds; };
  auto v_tile = [&](int stage) { return smem + (stage * 2 + 1) * kKeyTile * kLds; };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int b = blockIdx.y / p.kv_heads, kvh = blockIdx.y % p.kv_heads, split = blockIdx.z;
  const int group = p.q_heads / p.kv_heads;
  const int rows_total = p.nodes * group;
  const int row0 = blockIdx.x * kRowsPerCta;
  const int prefix = clamped_prefix(p, b);
  const int last_node = min(p.nodes - 1, (min(row0 + kRowsPerCta, rows_total) - 1) / group);
  const int key_end_cta = prefix + last_node + 1;  // later tree keys are no ancestor of these rows
  const int k_begin = split * p.split_keys;
  const int k_end = min(k_begin + p.split_keys, key_end_cta);

  // This thread's two rows (mma fragment rows lane/4 and lane/4 + 8 of its warp).
  int row[2], node[2], head[2];
  bool real[2];
  const int64_t* mrow[2];
  for (int i = 0; i < 2; ++i) {
    row[i] = row0 + warp * 16 + (lane >> 2) + 8 * i;
    const bool in_range = row[i] < rows_total;
    node[i] = in_range ? row[i] / group : 0;
    head[i] = kvh * group + (in_range ? row[i] % group : 0);
    mrow[i] = p.mask + (static_cast<int64_t>(b) * p.nodes + node[i]) * p.words;
    real[i] = in_range && mask_bit(mrow[i], node[i]);
  }
  const bool warp_active = row0 + warp * 16 < rows_total;

  // Q fragments (A operand, row-major 16 x D per warp), loaded straight from global memory.
  const T* q = static_cast<const T*>(p.q);
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i & 1, col = kk * 16 + 2 * (lane & 3) + (i >> 1) * 8;
      const T* src = q + b * p.q_stride[0] + node[r] * p.q_stride[1] + head[r] * p.q_stride[2] + col;
      qa[kk][i] = real[r] ? MmaOps<T>::pack2(src[0], src[1]) : 0u;
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * kLog2e;

  const T* kg = static_cast<const T*>(p.k) + b * p.k_stride[0] + kvh * p.k_stride[2];
  const T* vg = static_cast<const T*>(p.v) + b * p.v_stride[0] + kvh * p.v_stride[2];
  auto load_tile = [&](int t0, int stage) {
    constexpr int kChunks = kKeyTile * D / 8;  // 16-byte chunks per tile
    T* ks = k_tile(stage);
    T* vs = v_tile(stage);
#pragma unroll
    for (int c = threadIdx.x; c < kChunks; c += kWarps * 32) {
      const int key = c / (D / 8), col = (c % (D / 8)) * 8;
      const bool valid = t0 + key < k_end;
      const int64_t t = valid ? t0 + key : 0;
      cp_async16(ks + key * kLds + col, kg + t * p.k_stride[1] + col, valid);
      cp_async16(vs + key * kLds + col, vg + t * p.v_stride[1] + col, valid);
    }
  };

  const int tiles = k_end > k_begin ? (k_end - k_begin + kKeyTile - 1) / kKeyTile : 0;
  if (tiles > 0) load_tile(k_begin, 0);
  cp_async_commit();
  for (int it = 0; it < tiles; ++it) {
    const int t0 = k_begin + it * kKeyTile;
    if (it + 1 < tiles) {
      load_tile(t0 + kKeyTile, (it + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (warp_active) {
      const T* ks = k_tile(it & 1);
      const T* vs = v_tile(it & 1);
      float s[kKeyTile / 8][4];
#pragma unroll
      for (int nt = 0; nt < kKeyTile / 8; ++nt) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
        const T* krow = ks + (nt * 8 + (lane >> 2)) * kLds + 2 * (lane & 3);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + kk * 16);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 8);
          MmaOps<T>::mma(s[nt], qa[kk], b0, b1);
        }
      }
      // Mask, scale to the log2 domain, and take the tile's row maxima.
      const bool plain = t0 + kKeyTile <= min(prefix, k_end);  // whole tile is prefix, all in range
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, t = t0 + nt * 8 + 2 * (lane & 3) + (e & 1);
          bool keep = real[r];
          if (!plain) keep = keep && t < k_end && (t < prefix || mask_bit(mrow[r], t - prefix));
          s[nt][e] = keep ? s[nt][e] * scale_log2 : -INFINITY;
          tile_max[r] = fmaxf(tile_max[r], s[nt][e]);
        }
      }
      float alpha[2], m_use[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float m_new = fmaxf(m_run[r], tile_max[r]);
        m_use[r] = m_new == -INFINITY ? 0.f : m_new;  // nothing visible yet: keep exp2 finite
        alpha[r] = exp2f(m_run[r] - m_use[r]);
        m_run[r] = m_new;
      }
      float row_sum[2] = {0.f, 0.f};
#pragma unroll
      for (int nt = 0; nt < kKeyTile / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
          row_sum[e >> 1] += s[nt][e];
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + row_sum[r];
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][0] *= alpha[0];
        o[dt][1] *= alpha[0];
        o[dt][2] *= alpha[1];
        o[dt][3] *= alpha[1];
      }
      // O += P V: the S accumulator layout is the A-fragment layout of P, 16 keys per step.
#pragma unroll
      for (int kk = 0; kk < kKeyTile / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = MmaOps<T>::pack(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = MmaOps<T>::pack(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = MmaOps<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = MmaOps<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const T* vrow = vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kLds + (lane >> 4) * 8;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, vrow + dt * 8);
          MmaOps<T>::mma(o[dt], pa, vb[0], vb[1]);
          MmaOps<T>::mma(o[dt + 1], pa, vb[2], vb[3]);
        }
      }
    }
    __syncthreads();
  }

  if (!warp_active) return;
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  const float inv[2] = {l_run[0] > 0.f ? 1.f / l_run[0] : 0.f, l_run[1] > 0.f ? 1.f / l_run[1] : 0.f};
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= rows_total) continue;
    const int64_t out_row = (static_cast<int64_t>(b) * p.nodes + node[r]) * p.q_heads + head[r];
    if (p.num_splits == 1) {
      T* dst = static_cast<T*>(p.out) + out_row * D + 2 * (lane & 3);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<uint32_t*>(dst + dt * 8) = MmaOps<T>::pack(o[dt][2 * r] * inv[r], o[dt][2 * r + 1] * inv[r]);
      }
    } else {
      const int64_t part_row = static_cast<int64_t>(split) * p.batch * p.nodes * p.q_heads + out_row;
      float* dst = p.partial_out + part_row * D + 2 * (lane & 3);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[dt][2 * r] * inv[r], o[dt][2 * r + 1] * inv[r]);
      }
      if ((lane & 3) == 0) p.partial_lse[part_row] = l_run[r] > 0.f ? m_run[r] + log2f(l_run[r]) : -INFINITY;
    }
  }
}

template <typename T>
__device__ __forceinline__ float to_float(T x) { return static_cast<float>(x); }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x) { return static_cast<T>(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Merges the per-split partial outputs: one warp per (b, node, q head) row.
// out = sum_z 2^(lse_z - M) o_z / sum_z 2^(lse_z - M); rows with no visible key (padding) get zeros.
template <typename T>
__global__ void combine_splits_kernel(const TreeAttentionParams p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nodes * p.q_heads;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float lse_max = -INFINITY;
  for (int z = 0; z < p.num_splits; ++z) lse_max = fmaxf(lse_max, p.partial_lse[z * rows + r]);
  T* dst = static_cast<T*>(p.out) + r * p.head_dim;
  if (lse_max == -INFINITY) {
    for (int d = lane; d < p.head_dim; d += 32) dst[d] = from_float<T>(0.f);
    return;
  }
  float acc[kMaxHeadDim / 32];
  for (int i = 0; i < kMaxHeadDim / 32; ++i) acc[i] = 0.f;
  float wsum = 0.f;
  for (int z = 0; z < p.num_splits; ++z) {
    const float w = exp2f(p.partial_lse[z * rows + r] - lse_max);
    wsum += w;
    const float* src = p.partial_out + (z * rows + r) * p.head_dim;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim) acc[i] += w * src[d];
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int d = lane + 32 * i;
    if (d < p.head_dim) dst[d] = from_float<T>(acc[i] / wsum);
  }
}

// Fallback: one warp per (b, node, q head) row, lane owns dims lane + 32 i; keys in order with an
// online softmax. Any dtype, any head dim <= kMaxHeadDim. Correct everywhere, tuned nowhere.
template <typename T>
__global__ void tree_attention_scalar_kernel(const TreeAttentionParams p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nodes * p.q_heads;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const int h = r % p.q_heads, n = (r / p.q_heads) % p.nodes, b = r / (static_cast<int64_t>(p.q_heads) * p.nodes);
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int64_t* mrow = p.mask + (static_cast<int64_t>(b) * p.nodes + n) * p.words;
  T* dst = static_cast<T*>(p.out) + r * p.head_dim;
  constexpr int kPer = kMaxHeadDim / 32;
  float qv[kPer], acc[kPer];
  const T* qs = static_cast<const T*>(p.q) + b * p.q_stride[0] + n * p.q_stride[1] + h * p.q_stride[2];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < p.head_dim ? to_float<T>(qs[d]) * p.scale * kLog2e : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int prefix = clamped_prefix(p, b);
  const bool real = mask_bit(mrow, n);
  const int key_end = real ? prefix + n + 1 : 0;
  const T* kb = static_cast<const T*>(p.k) + b * p.k_stride[0] + kvh * p.k_stride[2];
  const T* vb = static_cast<const T*>(p.v) + b * p.v_stride[0] + kvh * p.v_stride[2];
  for (int t = 0; t < key_end; ++t) {
    if (t >= prefix && !mask_bit(mrow, t - prefix)) continue;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim) dot += qv[i] * to_float<T>(kb[t * p.k_stride[1] + d]);
    }
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float m_new = fmaxf(m, dot);
    const float alpha = exp2f(m - m_new), pr = exp2f(dot - m_new);
    l = l * alpha + pr;
    m = m_new;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim) acc[i] = acc[i] * alpha + pr * to_float<T>(vb[t * p.v_stride[1] + d]);
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    if (d < p.head_dim) dst[d] = from_float<T>(acc[i] * inv);
  }
}

}  // namespace kernels
}  // namespace specdec
