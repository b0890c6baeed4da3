// A std::vector copied into a new 1-D numpy array, for the suffix bindings (suffix.cpp, rows.cpp).
#pragma once

#include <pybind11/numpy.h>

#include <algorithm>
#include <vector>

namespace specdec::bindings {

template <class T>
pybind11::array_t<T> to_numpy(const std::vector<T>& v) {
  pybind11::array_t<T> a(static_cast<pybind11::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

}  // namespace specdec::bindings
