// Capacity policy shared by the suffix-automaton containers.
//
// std::vector doubles its capacity, which would let a 1M-token cache hold up to 2x the memory it
// needs; growing by 1.25x keeps the slack (and the reported memory_bytes) close to the live size
// while push_back stays amortised O(1).
#pragma once

#include <cstddef>
#include <vector>

namespace specdec::suffix {

template <class T>
void reserve_for(std::vector<T>& v, size_t extra) {
  const size_t need = v.size() + extra;
  if (need <= v.capacity()) return;
  size_t cap = v.capacity() + v.capacity() / 4 + 64;
  if (cap < need) cap = need;
  v.reserve(cap);
}

template <class T>
void push_compact(std::vector<T>& v, const T& x) {
  reserve_for(v, 1);
  v.push_back(x);
}

}  // namespace specdec::suffix
