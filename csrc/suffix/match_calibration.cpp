#include "suffix/match_calibration.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace specdec::suffix {
namespace {

int32_t length_bucket(int32_t len) {  // 1, 2, 3-4, 5-8, ..., 65+
  if (len <= 1) return 0;
  int32_t b = 1;
  for (uint32_t v = static_cast<uint32_t>(len - 1); v > 1; v >>= 1) ++b;
  return std::min(b, MatchCalibration::kLengthBuckets - 1);
}

}  // namespace

MatchCalibration::MatchCalibration(double prior_weight, double max_weight)
    : prior_(prior_weight), max_weight_(max_weight) {
  if (!(prior_weight > 0.0 && std::isfinite(prior_weight))) {
    throw std::invalid_argument("MatchCalibration: prior_weight must be finite and > 0, got " +
                                std::to_string(prior_weight));
  }
  if (!(max_weight >= prior_weight && std::isfinite(max_weight))) {
    throw std::invalid_argument("MatchCalibration: max_weight must be finite and >= prior_weight, got " +
                                std::to_string(max_weight));
  }
}

int32_t MatchCalibration::cell(DraftCache cache, int32_t ctx_len, int32_t count, int32_t total) {
  const int32_t evidence = total <= 1 ? 0 : (total <= 4 ? 1 : 2);
  const int32_t share = count >= total ? 0 : (2 * count >= total ? 1 : 2);
  const int32_t c = static_cast<int32_t>(cache);
  return ((c * kLengthBuckets + length_bucket(ctx_len)) * kEvidenceBuckets + evidence) * kShareBuckets + share;
}

float MatchCalibration::conditional(int32_t cell, double raw) const {
  return static_cast<float>(std::min(1.0, raw * ratio(cell)));
}

void MatchCalibration::observe(const int32_t* tokens, const int32_t* parents, const int32_t* cells, const float* raws,
                               size_t n, const int32_t* committed, size_t m) {
  depth_.assign(n, 0);
  matched_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = parents[i];
    if (p >= static_cast<int32_t>(i) || p < -1) throw std::invalid_argument("MatchCalibration.observe: parents must precede children");
    if (cells[i] < 0 || cells[i] >= kCells) throw std::invalid_argument("MatchCalibration.observe: cell out of range");
    depth_[i] = p < 0 ? 1 : depth_[p] + 1;
    // Tested: the target's token at this depth is known and the path above it was accepted.
    if ((p >= 0 && !matched_[p]) || static_cast<size_t>(depth_[i]) > m) continue;
    matched_[i] = tokens[i] == committed[depth_[i] - 1];
    const int32_t c = cells[i];
    predicted_[c] += raws[i];
    accepted_[c] += matched_[i];
    ++tested_[c];
    if (std::max(predicted_[c], accepted_[c]) > max_weight_) {
      predicted_[c] *= 0.5;
      accepted_[c] *= 0.5;
    }
  }
}

}  // namespace specdec::suffix
