// Suffix drafting over engine batch rows in one call: request identity (RowTracker), each request's
// automaton extended with the tokens the engine committed, the global-cache match kept current, a
// best-first draft tree per row (build_draft) and its best root-to-leaf path as a chain of at most
// k tokens (engines that verify chains only, e.g. vLLM V1).
//
// SuffixProposer (specdec/proposers/suffix.py) is the reference; this is its fast path for engines,
// request for request: the same request automaton, the same global match rule (re-matched over the
// last rematch_window tokens when the global automaton changed, advanced over committed tokens
// otherwise), the same "longest" or "pool" choice of caches and priors, the same calibration
// updates. What the Python proposer does per call (begin/commit/propose/end), this does for a whole
// step in C++. tests/integrations/test_vllm_tracking.py
// (test_batched_cpp_path_drafts_exactly_what_the_python_proposer_drafts) holds the two to the same
// drafts, chain for chain, and the same learnt calibration; a rule changed in one must change in
// both. Both draw their trees from one build_draft (draft_tree.h) and their chains from one
// best_path (below; specdec.integrations.rows.best_chain calls it).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "suffix/draft_tree.h"
#include "suffix/row_tracker.h"
#include "suffix/suffix_automaton.h"

namespace specdec::suffix {

struct RowBatchParams {
  DraftParams draft;            // budget = nodes of the tree the chain is chosen from
  int32_t rematch_window = 1024;
  bool combine_longest = true;  // false: pool both caches' counts
  double global_count_prior = 0.0;
  TrackerParams tracking;
  bool calibrate = true;        // draft with the batch's MatchCalibration
  bool learn = true;            // and update it from every committed step (false: frozen)
  double calibration_prior = 4.0;
  double calibration_max_weight = 4096.0;
};

// Best root-to-leaf path of a draft tree by summed node probability (the expected accepted tokens
// of that chain under greedy verification), at most k nodes deep; ties go to the lower node index.
// parents[i] < i, -1 for children of the root. Returns node indices root to leaf.
std::vector<int32_t> best_path(const std::vector<int32_t>& parents, const std::vector<float>& probs, int32_t k);

class SuffixRowBatch {
 public:
  // Throws std::invalid_argument for bad parameters.
  SuffixRowBatch(int64_t vocab_size, const RowBatchParams& params);

  // One engine step at time `now` (see RowTracker::step for tokens/stride/n/sampled/max_unseen/strict). Rows
  // with sampled > 0 get a chain of at most k tokens (k = 0: bookkeeping only), cut before its first
  // token whose path probability is below min_prob (a cost gate's per-token bar); refused rows get
  // none. global: the shared automaton or null; generation changes whenever the caller replaced
  // (rebuilt) it.
  void step(const int32_t* tokens, int64_t stride, const int32_t* n, const int32_t* sampled, int32_t rows, int32_t k,
            const SuffixAutomaton* global, int64_t generation, float min_prob, int32_t max_unseen, double now,
            bool strict);

  const std::vector<int32_t>& offsets() const { return offsets_; }  // [rows + 1] into chains()
  const std::vector<int32_t>& chains() const { return chains_; }
  const std::vector<float>& chain_probs() const { return chain_probs_; }  // path probability per chain token
  const RowTracker& tracker() const { return tracker_; }
  MatchCalibration& calibration() { return calibration_; }
  size_t memory_bytes() const;

 private:
  struct State {
    explicit State(int64_t vocab) : sam(vocab) {}
    SuffixAutomaton sam;
    int64_t g_generation = -1;
    int32_t g_len = 0;
    int32_t g_state = 0;
    Draft last;                 // the last tree drafted, scored against the next commit
    int64_t drafted_at = -1;    // committed tokens when it was drafted (-1: none pending)
  };
  void commit(State& st, const int32_t* ids, size_t count, const SuffixAutomaton* global, int64_t generation);
  void draft(State& st, const TrackedRequest& req, int32_t k, const SuffixAutomaton* global, int64_t generation,
             float min_prob);

  int64_t vocab_;
  RowBatchParams params_;
  RowTracker tracker_;
  MatchCalibration calibration_;
  std::unordered_map<int64_t, std::unique_ptr<State>> states_;
  std::vector<int32_t> offsets_;
  std::vector<int32_t> chains_;
  std::vector<float> chain_probs_;
  std::vector<State*> row_states_;  // scratch: each row's state during a step
};

}  // namespace specdec::suffix
