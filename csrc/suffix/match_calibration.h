// Online calibration of the suffix drafter's per-node conditional estimates, by the features that
// predict acceptance better than tree depth does.
//
// A draft node's raw conditional is a frequency: count(child) / (total continuations + prior),
// counted under the context the node continues. Two nodes with the same frequency are not equally
// likely: a single continuation after a 16-token match is accepted several times as often as one
// after a 1-token match, and a continuation seen once is far less certain than one seen 40 times
// out of 40. So every node falls in a cell of
//   (drafting cache) x (matched context length: 1, 2, 3-4, 5-8, ..., 65+)
//                    x (evidence: total 1, 2-4, 5+) x (share count / total: 1, [1/2, 1), < 1/2)
// and its calibrated conditional is  min(1, raw * ratio[cell]),  with
//   ratio[cell] = (accepted[cell] + prior_weight) / (predicted[cell] + prior_weight),
// where predicted sums the raw conditionals of the cell's tested nodes and accepted counts those
// whose token the target produced. A cell without evidence keeps the raw estimate (ratio 1).
//
// The evidence is free and unbiased in every decoding mode: after a step, the committed tokens are
// the target's own tokens at the positions along the accepted path, so every drafted node whose
// parent was accepted (or is the root) was tested, whether or not it was verified: it would have
// been accepted exactly when its token equals the committed one. Under sampling the committed
// token follows the target's distribution (exact verification), so the indicator's expectation is
// the node's acceptance probability there too. When a cell's predicted mass passes max_weight,
// both of its sums are halved: old evidence fades and the table follows the workload.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace specdec::suffix {

// Which caches drafted a node: the request's own text, the global cache, or both pooled.
enum class DraftCache : int32_t { kRequest = 0, kGlobal = 1, kPooled = 2 };

class MatchCalibration {
 public:
  static constexpr int kCaches = 3;
  static constexpr int kLengthBuckets = 8;    // 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65+
  static constexpr int kEvidenceBuckets = 3;  // total 1, 2-4, 5+
  static constexpr int kShareBuckets = 3;     // count / total: 1, [1/2, 1), < 1/2
  static constexpr int kCells = kCaches * kLengthBuckets * kEvidenceBuckets * kShareBuckets;

  // Throws std::invalid_argument unless prior_weight > 0 and max_weight >= prior_weight (finite).
  explicit MatchCalibration(double prior_weight = 4.0, double max_weight = 4096.0);

  // The cell of a node counted under a context of ctx_len >= 1 tokens, with count of total
  // (1 <= count <= total) continuations.
  static int32_t cell(DraftCache cache, int32_t ctx_len, int32_t count, int32_t total);
  double ratio(int32_t cell) const { return (accepted_[cell] + prior_) / (predicted_[cell] + prior_); }
  float conditional(int32_t cell, double raw) const;

  // Scores one draft tree against the tokens committed right after it was drafted.
  // tokens/parents/cells/raws: [n] (parents[i] < i, -1 = child of the root); committed: [m].
  void observe(const int32_t* tokens, const int32_t* parents, const int32_t* cells, const float* raws, size_t n,
               const int32_t* committed, size_t m);

  const std::array<double, kCells>& predicted() const { return predicted_; }
  const std::array<double, kCells>& accepted() const { return accepted_; }
  const std::array<int64_t, kCells>& tested() const { return tested_; }
  double prior_weight() const { return prior_; }
  double max_weight() const { return max_weight_; }

 private:
  double prior_;
  double max_weight_;
  std::array<double, kCells> predicted_{};
  std::array<double, kCells> accepted_{};
  std::array<int64_t, kCells> tested_{};  // lifetime count of tested nodes (not halved), for reports
  std::vector<int32_t> depth_;            // scratch for observe
  std::vector<uint8_t> matched_;
};

}  // namespace specdec::suffix
