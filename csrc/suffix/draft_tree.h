// Best-first draft-tree expansion over one or more suffix automata (request and global caches).
//
// Each tree node carries, per cache, the automaton state of "matched context + path so far".
// A child token's conditional probability is estimated by pooling counts over the caches:
//   p(c | node) = sum_k count_k(child on c) / (sum_k sum_{c'} count_k(child on c') + count_prior),
// where the denominator includes end-of-document (separator) continuations. count_prior > 0
// keeps a continuation seen once from counting as certain (1 / (1 + prior) instead of 1). A node's path
// probability is the product along its path: under greedy verification it estimates the chance
// the node is accepted, so the sum over the tree estimates the accepted draft length.
// Nodes are taken in decreasing path probability (ties: the earlier parent, then the smaller
// token, so the tree does not depend on the order an automaton stores its transitions in) until
// the budget, the probability floor or the depth limit stops expansion; the depth limit adapts to
// the match length (short matches draft little, matches under min_match_len draft nothing). A path that reaches the end of the indexed
// text continues from the longest shorter context (suffix link) that still has a continuation,
// so a loop in the request's own text is drafted beyond one period.
//
// With a MatchCalibration, a child's conditional is the calibrated one (match_calibration.h):
// the frequency scaled by how nodes of its cell (cache, matched context length, evidence, share)
// have fared, so long matches draft deep and 1-token matches draft little.
#pragma once

#include <cstdint>
#include <vector>

#include "suffix/match_calibration.h"
#include "suffix/suffix_automaton.h"

namespace specdec::suffix {

struct DraftSource {
  const SuffixAutomaton* sam;
  Match match;  // where the current context's suffix ends in this cache
};

struct DraftParams {
  int32_t budget = 16;          // max nodes
  int32_t min_match_len = 1;    // a cache whose match is shorter contributes nothing
  double min_prob = 0.05;       // nodes with estimated path probability below this are not drafted
  int32_t max_depth = 32;       // hard depth limit
  double depth_factor = 4.0;    // depth limit <= ceil(depth_factor * longest usable match); <= 0 disables
  double count_prior = 0.0;     // pseudo-count added to every denominator (shrinks small-count estimates)
  const MatchCalibration* calibration = nullptr;  // null: raw frequencies
  DraftCache cache = DraftCache::kRequest;        // the calibration cell's cache (kPooled for several sources)
};

struct Draft {
  std::vector<int32_t> tokens;   // [n]
  std::vector<int32_t> parents;  // [n], -1 = child of the last committed token, parents first
  std::vector<float> probs;      // [n], estimated path (acceptance) probability per node
  std::vector<float> raws;       // [n], raw conditional count / (total + prior) under the parent
  std::vector<int32_t> cells;    // [n], MatchCalibration::cell of the node
  std::vector<int32_t> ctx_lens; // [n], context length the node's continuation was counted under
};

// Throws std::invalid_argument for out-of-range parameters or more than kMaxSources sources.
Draft build_draft(const std::vector<DraftSource>& sources, const DraftParams& params);

constexpr int kMaxSources = 4;

}  // namespace specdec::suffix
