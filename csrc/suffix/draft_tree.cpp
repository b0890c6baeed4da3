#include "suffix/draft_tree.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

namespace specdec::suffix {
namespace {

struct Candidate {
  float prob;
  float raw;
  int32_t parent;
  int32_t token;
  int32_t depth;
  int32_t cell;
  int32_t ctx_len;
  int32_t states[kMaxSources];
  int32_t lens[kMaxSources];  // context length matched in each cache at this node
};

struct Kid {
  int32_t token;
  int32_t source;
  int32_t state;
  int32_t count;
  int32_t len;  // context length the count was taken under
};

void check_params(const std::vector<DraftSource>& sources, const DraftParams& p) {
  if (sources.size() > static_cast<size_t>(kMaxSources)) {
    throw std::invalid_argument("build_draft: at most " + std::to_string(kMaxSources) + " sources, got " +
                                std::to_string(sources.size()));
  }
  if (p.budget < 0) throw std::invalid_argument("build_draft: budget must be >= 0");
  if (p.min_match_len < 1) throw std::invalid_argument("build_draft: min_match_len must be >= 1");
  if (!(p.min_prob >= 0.0 && p.min_prob <= 1.0)) throw std::invalid_argument("build_draft: min_prob must be in [0, 1]");
  if (p.max_depth < 0) throw std::invalid_argument("build_draft: max_depth must be >= 0");
  if (!std::isfinite(p.depth_factor)) throw std::invalid_argument("build_draft: depth_factor must be finite");
  if (!(p.count_prior >= 0.0 && std::isfinite(p.count_prior))) {
    throw std::invalid_argument("build_draft: count_prior must be finite and >= 0");
  }
  for (const DraftSource& s : sources) {
    if (s.sam == nullptr) throw std::invalid_argument("build_draft: null automaton");
    s.sam->check_state(s.match.state);
    if (s.match.length < 0 || s.match.length > s.sam->state_len(s.match.state)) {
      throw std::invalid_argument("build_draft: match length outside [0, len(state)]");
    }
  }
}

}  // namespace

Draft build_draft(const std::vector<DraftSource>& sources, const DraftParams& params) {
  check_params(sources, params);
  Draft out;
  const int nsrc = static_cast<int>(sources.size());
  Candidate root{1.0f, 1.0f, -1, -1, 0, 0, 0, {-1, -1, -1, -1}, {0, 0, 0, 0}};
  int32_t longest = 0;
  bool any = false;
  for (int k = 0; k < nsrc; ++k) {
    const Match m = sources[k].match;
    if (m.length >= params.min_match_len && m.state > 0) {
      // Re-normalise: extends made since the match was taken may have split its state.
      int32_t s = m.state;
      const SuffixAutomaton& sam = *sources[k].sam;
      while (s > 0 && m.length <= sam.state_len(sam.state_link(s))) s = sam.state_link(s);
      root.states[k] = s;
      root.lens[k] = m.length;
      longest = std::max(longest, m.length);
      any = true;
    }
  }
  if (!any || params.budget == 0 || params.max_depth == 0) return out;
  int32_t depth_limit = params.max_depth;
  if (params.depth_factor > 0.0) {
    const double lim = std::ceil(params.depth_factor * static_cast<double>(longest));
    depth_limit = static_cast<int32_t>(std::min<double>(depth_limit, std::max(1.0, lim)));
  }
  const float floor_prob = static_cast<float>(params.min_prob);

  std::vector<Candidate> heap;
  std::vector<Kid> kids;
  // A total order: which nodes a budget keeps never depends on the order children were pushed in
  // (the edge storage order of the automaton).
  auto by_prob = [](const Candidate& a, const Candidate& b) {
    if (a.prob != b.prob) return a.prob < b.prob;
    if (a.parent != b.parent) return a.parent > b.parent;
    return a.token > b.token;
  };
  auto expand = [&](const Candidate& node, int32_t node_index) {
    kids.clear();
    int64_t total = 0;
    for (int k = 0; k < nsrc; ++k) {
      int32_t s = node.states[k];
      if (s < 0) continue;
      int32_t len = node.lens[k];
      const SuffixAutomaton& sam = *sources[k].sam;
      // The path reached the end of the indexed text (a state seen only there, e.g. the second
      // period of a loop): continue from the longest shorter context that has a continuation.
      while (s > 0 && sam.out_degree(s) == 0 && sam.state_len(sam.state_link(s)) >= params.min_match_len) {
        s = sam.state_link(s);
        len = sam.state_len(s);
      }
      sam.for_each_transition(s, [&](int32_t tok, int32_t dst) {
        const int32_t c = sam.count(dst);
        total += c;
        if (tok != SuffixAutomaton::kSeparator) kids.push_back(Kid{tok, k, dst, c, len});
      });
    }
    if (total <= 0) return;
    if (nsrc > 1) {
      std::sort(kids.begin(), kids.end(), [](const Kid& a, const Kid& b) { return a.token < b.token; });
    }
    size_t i = 0;
    while (i < kids.size()) {
      Candidate c{0.0f, 0.0f, node_index, kids[i].token, node.depth + 1, 0, 0, {-1, -1, -1, -1}, {0, 0, 0, 0}};
      int64_t cnt = 0;
      for (; i < kids.size() && kids[i].token == c.token; ++i) {
        c.states[kids[i].source] = kids[i].state;
        c.lens[kids[i].source] = kids[i].len + 1;
        c.ctx_len = std::max(c.ctx_len, kids[i].len);
        cnt += kids[i].count;
      }
      const double raw = static_cast<double>(cnt) / (static_cast<double>(total) + params.count_prior);
      c.raw = static_cast<float>(raw);
      c.cell = MatchCalibration::cell(params.cache, c.ctx_len, static_cast<int32_t>(std::min<int64_t>(cnt, INT32_MAX)),
                                      static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX)));
      c.prob = node.prob * (params.calibration != nullptr ? params.calibration->conditional(c.cell, raw)
                                                          : static_cast<float>(raw));
      if (c.prob >= floor_prob && c.prob > 0.0f) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), by_prob);
      }
    }
  };

  expand(root, -1);
  while (!heap.empty() && static_cast<int32_t>(out.tokens.size()) < params.budget) {
    std::pop_heap(heap.begin(), heap.end(), by_prob);
    const Candidate best = heap.back();
    heap.pop_back();
    const int32_t index = static_cast<int32_t>(out.tokens.size());
    out.tokens.push_back(best.token);
    out.parents.push_back(best.parent);
    out.probs.push_back(best.prob);
    out.raws.push_back(best.raw);
    out.cells.push_back(best.cell);
    out.ctx_lens.push_back(best.ctx_len);
    // The last node's children could not be taken: the budget is spent.
    if (best.depth < depth_limit && static_cast<int32_t>(out.tokens.size()) < params.budget) expand(best, index);
  }
  return out;
}

}  // namespace specdec::suffix
