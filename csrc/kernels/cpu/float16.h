// float16 / bfloat16 <-> float32 on bit patterns (uint16_t), torch-free, for the CPU kernels.
//
// Widening is exact (half_to_float returns a NaN quiet, as c10::Half does). Narrowing rounds to nearest, ties to even, as torch's CPU Half and BFloat16
// types do, with the same NaN encodings (float16: the sign and 0x7E00; bfloat16: 0x7FC0), so a
// kernel storing through these writes the bits an ATen kernel storing c10::Half / c10::BFloat16
// would. Integer operations only (plus one int -> float conversion of a value below 2^10), so the
// results hold under flush-to-zero too.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace specdec::kernels::cpu {

// fp16 bits (zero-extended in U: uint32_t, or a GCC vector of uint32_t) -> the fp32 value (F: float,
// or the matching float vector), exactly: normal values rebias the exponent 15 -> 127, subnormals
// are mantissa * 2^-24, exponent 31 is inf/nan with its payload.
template <typename U, typename F>
inline __attribute__((always_inline)) F half_bits_to_float(U h) {
  const U em = h & 0x7fffu;
  const U normal = (em << 13) + 0x38000000u;
  const U special = (em << 13) | 0x7f800000u;
  F sub;
  if constexpr (std::is_arithmetic_v<U>) {
    sub = static_cast<F>(em) * 0x1p-24f;
  } else {
    sub = __builtin_convertvector(em, F) * 0x1p-24f;
  }
  U sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub);
  U bits = em >= 0x7c00u ? special : (em < 0x0400u ? sub_bits : normal);
  bits |= (h & 0x8000u) << 16;
  F out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// One value, as c10::Half widens it: a signalling NaN comes back quiet (half_bits_to_float keeps it
// signalling, which arithmetic quiets anyway).
inline float half_to_float(uint16_t h) {
  const float f = half_bits_to_float<uint32_t, float>(h);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= (h & 0x7fffu) > 0x7c00u ? 0x400000u : 0u;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Round half-way cases of `dropped` (the discarded low bits, `half` = the weight of half a unit of
// the kept ones) to the even neighbour of `kept`.
inline uint32_t round_even(uint32_t kept, uint32_t dropped, uint32_t half) {
  return kept + ((dropped > half || (dropped == half && (kept & 1u))) ? 1u : 0u);
}

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {  // a normal half (>= 2^-14): rebias 127 -> 15, keep 10 mantissa bits
    // a carry out of the mantissa moves to the next binade (or to inf), as it should
    return static_cast<uint16_t>(sign | round_even((a - 0x38000000u) >> 13, a & 0x1fffu, 0x1000u));
  }
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to zero (2^-25: tie, even)
  // a half subnormal: the value in units of 2^-24 is the 24-bit significand shifted right by 126 - e
  const uint32_t shift = 126u - (a >> 23);  // 14 .. 24
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign | round_even(m >> shift, m & ((1u << shift) - 1u), 1u << (shift - 1u)));
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN
  return static_cast<uint16_t>(round_even(x >> 16, x & 0xffffu, 0x8000u));
}

}  // namespace specdec::kernels::cpu
