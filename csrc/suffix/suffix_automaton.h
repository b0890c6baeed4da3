// Online suffix automaton (Blumer et al. 1985) over int32 token ids, with exact occurrence counts.
//
// extend() appends tokens in amortised O(1) automaton work per token, plus the upkeep of every
// state's end-position count: appending a token adds one end position to each state on the new
// state's suffix-link path. On natural text that path is short (3-4 states on average over the
// dev prompts and the synthetic traffic, at most 10), so counts are a plain array and the path is
// walked. On repetitive text ("a a a a ...") it grows with the text, so the first walk longer than
// walk_limit states moves the counts into a link-cut forest (O(n) once), whose path additions are
// amortised O(log n) whatever the text; the automaton stays there.
// Documents of a shared cache are appended with add_document(), which ends each one with the
// internal separator kSeparator: a user context never contains it, so a match can never span two
// documents, and draft expansion never follows a separator transition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "suffix/edge_store.h"
#include "suffix/link_cut.h"

namespace specdec::suffix {

struct Match {
  int32_t length;  // tokens matched (0 = nothing)
  int32_t state;   // automaton state holding the matched string (0 = root)
};

class SuffixAutomaton {
 public:
  static constexpr int32_t kSeparator = -1;
  static constexpr int32_t kWalkLimit = 64;

  // `vocab_size`: ids must lie in [0, vocab_size). Throws std::invalid_argument if < 1 or if
  // walk_limit < 0 (0: counts in the link-cut forest from the start).
  explicit SuffixAutomaton(int64_t vocab_size, int32_t walk_limit = kWalkLimit);

  // Appends tokens[0..n). Validates every id first (std::invalid_argument), so a bad array
  // leaves the automaton unchanged.
  void extend(const int32_t* tokens, size_t n);
  // Appends a complete document followed by the separator.
  void add_document(const int32_t* tokens, size_t n);
  // Longest suffix of ctx[0..n) that occurs in the indexed text, and its state. O(n).
  Match longest_match(const int32_t* ctx, size_t n) const;
  // Continues a match (state, length) obtained earlier over further context tokens; first
  // re-normalises it, since extends made after it was taken may have split its state. O(n) amortised.
  Match advance(Match m, const int32_t* tokens, size_t n) const;
  // Longest suffix of the indexed text that also occurs earlier in it (the per-request lookup).
  Match repeat_match() const;

  int32_t count(int32_t state) const;  // end-position set size (occurrences of the state's strings)
  // Whether the counts live in the link-cut forest (a suffix-link path longer than walk_limit was met).
  // Until then count() only reads; after, it may restructure the forest (not safe to call concurrently).
  bool counts_linked() const { return linked_; }
  int32_t transition(int32_t state, int32_t tok) const;
  template <class F>
  void for_each_transition(int32_t state, F&& f) const {
    edges_.for_each(states_[state].edges, f);
  }

  int64_t vocab_size() const { return vocab_; }
  size_t num_states() const { return states_.size(); }
  size_t num_transitions() const { return num_edges_; }
  size_t num_tokens() const { return num_tokens_; }  // separators included
  int32_t last_state() const { return last_; }
  int32_t state_len(int32_t s) const { return states_[s].len; }
  int32_t state_link(int32_t s) const { return states_[s].link; }
  uint32_t out_degree(int32_t s) const { return states_[s].edges.n; }
  bool state_is_clone(int32_t s) const { return is_clone_[s]; }
  void check_state(int32_t s) const;  // throws std::invalid_argument for an unknown state id

  size_t memory_bytes() const;
  // Verifies lengths, suffix links, the one-solid-in-edge property, transition storage and every
  // count against an offline recount; throws std::logic_error naming the first violation.
  void check_integrity() const;

 private:
  struct State {
    int32_t len;
    int32_t link;
    EdgeList edges;
  };
  void validate(const int32_t* tokens, size_t n, const char* what) const;
  void extend_one(int32_t c);
  int32_t add_state(int32_t len, int32_t link, const EdgeList& edges, bool clone, int32_t count);
  int32_t count_of(int32_t s) const { return linked_ ? forest_.value(s) : counts_[s]; }
  void move_counts_to_forest();

  int64_t vocab_;
  std::vector<State> states_;
  std::vector<bool> is_clone_;
  EdgeStore edges_;
  int32_t walk_limit_;
  bool linked_ = false;
  std::vector<int32_t> counts_;    // per state, while !linked_
  mutable LinkCutForest forest_;   // the counts once linked_ (reads splay)
  int32_t last_ = 0;
  size_t num_tokens_ = 0;
  size_t num_edges_ = 0;
};

}  // namespace specdec::suffix
