#include "suffix/row_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specdec::suffix {

std::vector<int32_t> best_path(const std::vector<int32_t>& parents, const std::vector<float>& probs, int32_t k) {
  const int32_t n = static_cast<int32_t>(parents.size());
  std::vector<int32_t> depth(n, 0), child(n, -1);
  std::vector<double> best(n, 0.0);
  for (int32_t i = 0; i < n; ++i) {
    if (parents[i] >= i || parents[i] < -1) throw std::invalid_argument("best_path: parents must precede children");
    depth[i] = parents[i] < 0 ? 1 : depth[parents[i]] + 1;
  }
  int32_t root = -1;
  for (int32_t i = n - 1; i >= 0; --i) {  // descending, so on ties the lower index (visited later) wins
    if (depth[i] > k) continue;
    best[i] = probs[i] + (child[i] >= 0 ? best[child[i]] : 0.0);
    int32_t& slot = parents[i] >= 0 ? child[parents[i]] : root;
    if (slot < 0 || best[i] >= best[slot]) slot = i;
  }
  std::vector<int32_t> path;
  for (int32_t v = root; v >= 0; v = child[v]) path.push_back(v);
  return path;
}

SuffixRowBatch::SuffixRowBatch(int64_t vocab_size, const RowBatchParams& params)
    : vocab_(vocab_size),
      params_(params),
      tracker_(vocab_size, params.tracking),
      calibration_(params.calibration_prior, params.calibration_max_weight) {
  if (params.rematch_window < 1) throw std::invalid_argument("SuffixRowBatch: rematch_window must be >= 1");
  if (!(params.global_count_prior >= 0.0)) {
    throw std::invalid_argument("SuffixRowBatch: global_count_prior must be >= 0");
  }
  build_draft({}, params.draft);  // validates the draft parameters before any step
}

void SuffixRowBatch::commit(State& st, const int32_t* ids, size_t count, const SuffixAutomaton* global,
                            int64_t generation) {
  if (count == 0) return;
  if (params_.learn && st.drafted_at >= 0 && static_cast<int64_t>(st.sam.num_tokens()) == st.drafted_at) {
    const Draft& d = st.last;
    calibration_.observe(d.tokens.data(), d.parents.data(), d.cells.data(), d.raws.data(), d.tokens.size(), ids, count);
  }
  st.drafted_at = -1;
  st.sam.extend(ids, count);
  if (global != nullptr && st.g_generation == generation) {
    const Match m = global->advance(Match{st.g_len, st.g_state}, ids, count);
    st.g_len = m.length;
    st.g_state = m.state;
  }
}

void SuffixRowBatch::draft(State& st, const TrackedRequest& req, int32_t k, const SuffixAutomaton* global,
                           int64_t generation, float min_prob) {
  const int32_t min_len = params_.draft.min_match_len;
  DraftSource local{&st.sam, st.sam.repeat_match()};
  bool use_local = local.match.length >= min_len;
  bool use_global = false;
  DraftSource shared{global, Match{0, 0}};
  if (global != nullptr) {
    if (st.g_generation != generation) {
      const size_t size = req.tokens.size();
      const size_t window = std::min(size, static_cast<size_t>(params_.rematch_window));
      const Match m = global->longest_match(req.tokens.data() + (size - window), window);
      st.g_len = m.length;
      st.g_state = m.state;
      st.g_generation = generation;
    }
    shared.match = Match{st.g_len, st.g_state};
    use_global = st.g_len >= min_len;
  }
  if (params_.combine_longest && use_local && use_global) {
    if (shared.match.length > local.match.length) use_local = false; else use_global = false;
  }
  std::vector<DraftSource> sources;
  if (use_local) sources.push_back(local);
  if (use_global) sources.push_back(shared);
  DraftParams p = params_.draft;
  if (use_global && !use_local) p.count_prior = params_.global_count_prior;
  p.cache = use_local && use_global ? DraftCache::kPooled : (use_global ? DraftCache::kGlobal : DraftCache::kRequest);
  if (params_.calibrate) p.calibration = &calibration_;
  st.last = build_draft(sources, p);
  st.drafted_at = static_cast<int64_t>(st.sam.num_tokens());
  const Draft& d = st.last;
  for (int32_t v : best_path(d.parents, d.probs, k)) {
    if (d.probs[v] < min_prob) break;
    chains_.push_back(d.tokens[v]);
    chain_probs_.push_back(d.probs[v]);
  }
}

void SuffixRowBatch::step(const int32_t* tokens, int64_t stride, const int32_t* n, const int32_t* sampled, int32_t rows,
                          int32_t k, const SuffixAutomaton* global, int64_t generation, float min_prob,
                          int32_t max_unseen, double now, bool strict) {
  if (k < 0) throw std::invalid_argument("SuffixRowBatch.step: k must be >= 0, got " + std::to_string(k));
  if (!(min_prob >= 0.0f && min_prob <= 1.0f)) {
    throw std::invalid_argument("SuffixRowBatch.step: min_prob must be in [0, 1], got " + std::to_string(min_prob));
  }
  if (global != nullptr && global->vocab_size() != vocab_) {
    throw std::invalid_argument("SuffixRowBatch.step: the global automaton's vocab_size " +
                                std::to_string(global->vocab_size()) + " != " + std::to_string(vocab_));
  }
  tracker_.step(tokens, stride, n, sampled, rows, max_unseen, now, strict);
  for (int64_t id : tracker_.ended()) states_.erase(id);
  offsets_.assign(1, 0);
  chains_.clear();
  chain_probs_.clear();
  const auto& events = tracker_.events();
  std::vector<State*>& row_states = row_states_;
  row_states.assign(rows, nullptr);
  // Every row's commit before any row's draft: the drafts of one step all see the calibration
  // with the whole step's evidence, as SuffixProposer's begin/commit-then-propose order does.
  for (int32_t r = 0; r < rows; ++r) {
    const RowEvent& e = events[r];
    if (e.kind == RowKind::kRefused) continue;
    const int32_t* row = tokens + r * stride;
    auto it = states_.find(e.id);
    if (e.kind == RowKind::kNew) {
      it = states_.emplace(e.id, std::make_unique<State>(vocab_)).first;
      it->second->sam.extend(row, static_cast<size_t>(e.prompt_end));
    } else if (it == states_.end()) {
      throw std::logic_error("SuffixRowBatch.step: a tracked request has no automaton");
    }
    row_states[r] = it->second.get();
    commit(*row_states[r], row + e.commit_begin, static_cast<size_t>(e.commit_end - e.commit_begin), global, generation);
  }
  for (int32_t r = 0; r < rows; ++r) {
    if (k > 0 && sampled[r] > 0 && row_states[r] != nullptr) {
      draft(*row_states[r], tracker_.request(events[r].id), k, global, generation, min_prob);
    }
    offsets_.push_back(static_cast<int32_t>(chains_.size()));
  }
  tracker_.record_drafts(offsets_.data(), chains_.data(), rows);
}

size_t SuffixRowBatch::memory_bytes() const {
  size_t total = sizeof(*this);
  for (const auto& kv : states_) {
    total += kv.second->sam.memory_bytes() + tracker_.request(kv.first).tokens.capacity() * sizeof(int32_t);
  }
  return total;
}

}  // namespace specdec::suffix
