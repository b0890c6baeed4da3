// SPECDEC_MULTIVERSION: compile a CPU hot loop for AVX-512 / AVX2+FMA / baseline x86-64 and pick the
// best one when the extension is loaded (GCC target_clones). The extension itself is built for the
// baseline ISA so that it loads on any x86-64 machine; only the marked functions use wider vectors.
// They also contract a * b + c into one FMA (fp-contract=fast): ISO C++ mode (-std=c++17/20) turns
// contraction off, which halves the arithmetic rate of these multiply-accumulate loops and rounds
// twice instead of once.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("fp-contract=fast")))
#else
#define SPECDEC_MULTIVERSION
#endif
