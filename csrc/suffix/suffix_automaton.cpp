#include "suffix/suffix_automaton.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "suffix/grow.h"

namespace specdec::suffix {

SuffixAutomaton::SuffixAutomaton(int64_t vocab_size, int32_t walk_limit) : vocab_(vocab_size), walk_limit_(walk_limit) {
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    throw std::invalid_argument("SuffixAutomaton: vocab_size must be in [1, 2^31-1], got " +
                                std::to_string(vocab_size));
  }
  if (walk_limit < 0) {
    throw std::invalid_argument("SuffixAutomaton: walk_limit must be >= 0, got " + std::to_string(walk_limit));
  }
  linked_ = walk_limit == 0;
  add_state(0, -1, EdgeList{}, false, 0);
}

int32_t SuffixAutomaton::add_state(int32_t len, int32_t link, const EdgeList& edges, bool clone,
                                   int32_t count) {
  if (states_.size() >= static_cast<size_t>(INT32_MAX)) {
    throw std::length_error("SuffixAutomaton: more than 2^31-1 states");
  }
  push_compact(states_, State{len, link, edges});
  is_clone_.push_back(clone);
  if (linked_) {
    forest_.add_node(count);
  } else {
    push_compact(counts_, count);
  }
  return static_cast<int32_t>(states_.size() - 1);
}

void SuffixAutomaton::move_counts_to_forest() {
  // Every state becomes a node holding its count, hung under its suffix link: the forest's root
  // paths are then the suffix-link paths, and its values the counts.
  // Built aside, then moved in: running out of memory midway leaves the plain counts in use.
  LinkCutForest forest;
  for (size_t v = 0; v < states_.size(); ++v) forest.add_node(counts_[v]);
  for (size_t v = 1; v < states_.size(); ++v) forest.link(static_cast<int32_t>(v), states_[v].link);
  forest_ = std::move(forest);
  std::vector<int32_t>().swap(counts_);
  linked_ = true;
}

void SuffixAutomaton::validate(const int32_t* tokens, size_t n, const char* what) const {
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) {
      throw std::invalid_argument(std::string("SuffixAutomaton: ") + what + "[" + std::to_string(i) +
                                  "] = " + std::to_string(tokens[i]) + " is not a token id in [0, " +
                                  std::to_string(vocab_) + ")");
    }
  }
}

void SuffixAutomaton::extend(const int32_t* tokens, size_t n) {
  validate(tokens, n, "tokens");
  for (size_t i = 0; i < n; ++i) extend_one(tokens[i]);
}

void SuffixAutomaton::add_document(const int32_t* tokens, size_t n) {
  validate(tokens, n, "document");
  for (size_t i = 0; i < n; ++i) extend_one(tokens[i]);
  extend_one(kSeparator);
}

void SuffixAutomaton::extend_one(int32_t c) {
  if (num_tokens_ >= static_cast<size_t>(INT32_MAX) - 1) {
    throw std::length_error("SuffixAutomaton: more than 2^31-2 tokens indexed");
  }
  const int32_t cur = add_state(states_[last_].len + 1, -1, EdgeList{}, false, 0);
  int32_t p = last_;
  while (p >= 0 && edges_.get(states_[p].edges, c) < 0) {
    edges_.set(states_[p].edges, c, cur);
    ++num_edges_;
    p = states_[p].link;
  }
  if (p < 0) {
    states_[cur].link = 0;
  } else {
    const int32_t q = edges_.get(states_[p].edges, c);
    if (states_[p].len + 1 == states_[q].len) {
      states_[cur].link = q;
    } else {
      const EdgeList copied = edges_.copy(states_[q].edges);
      const int32_t clone = add_state(states_[p].len + 1, states_[q].link, copied, true, count_of(q));
      num_edges_ += copied.n;
      if (linked_) {
        forest_.link(clone, states_[q].link);
        forest_.cut(q);
        forest_.link(q, clone);
      }
      while (p >= 0 && edges_.get(states_[p].edges, c) == q) {
        edges_.set(states_[p].edges, c, clone);
        p = states_[p].link;
      }
      states_[q].link = clone;
      states_[cur].link = clone;
    }
  }
  // The token is indexed from here on: a failed move to the forest below (out of memory) leaves a
  // whole automaton on its plain counts, and the next long walk tries the move again.
  last_ = cur;
  ++num_tokens_;
  if (linked_) {
    forest_.link(cur, states_[cur].link);
    forest_.add_to_root_path(cur, 1);
  } else {
    int32_t walked = 0;
    for (int32_t v = cur; v >= 0; v = states_[v].link, ++walked) ++counts_[v];
    if (walked > walk_limit_) move_counts_to_forest();
  }
}

Match SuffixAutomaton::longest_match(const int32_t* ctx, size_t n) const {
  return advance(Match{0, 0}, ctx, n);
}

Match SuffixAutomaton::advance(Match m, const int32_t* tokens, size_t n) const {
  check_state(m.state);
  if (m.length < 0 || m.length > states_[m.state].len) {
    throw std::invalid_argument("SuffixAutomaton.advance: match length " + std::to_string(m.length) +
                                " is outside [0, len(state)=" + std::to_string(states_[m.state].len) + "]");
  }
  validate(tokens, n, "context");
  int32_t s = m.state;
  int32_t len = m.length;
  while (s > 0 && len <= states_[states_[s].link].len) s = states_[s].link;
  for (size_t i = 0; i < n; ++i) {
    const int32_t c = tokens[i];
    int32_t t = edges_.get(states_[s].edges, c);
    while (t < 0 && s > 0) {
      s = states_[s].link;
      len = states_[s].len;
      t = edges_.get(states_[s].edges, c);
    }
    if (t < 0) {
      s = 0;
      len = 0;
    } else {
      s = t;
      ++len;
    }
  }
  return Match{len, s};
}

Match SuffixAutomaton::repeat_match() const {
  const int32_t s = states_[last_].link;
  if (s < 0) return Match{0, 0};
  return Match{states_[s].len, s};
}

void SuffixAutomaton::check_state(int32_t s) const {
  if (s < 0 || static_cast<size_t>(s) >= states_.size()) {
    throw std::invalid_argument("SuffixAutomaton: state " + std::to_string(s) + " is not in [0, " +
                            std::to_string(states_.size()) + ")");
  }
}

int32_t SuffixAutomaton::count(int32_t state) const {
  check_state(state);
  return count_of(state);
}

int32_t SuffixAutomaton::transition(int32_t state, int32_t tok) const {
  check_state(state);
  return edges_.get(states_[state].edges, tok);
}

size_t SuffixAutomaton::memory_bytes() const {
  return sizeof(*this) + states_.capacity() * sizeof(State) + is_clone_.capacity() / 8 +
         edges_.memory_bytes() + counts_.capacity() * sizeof(int32_t) + forest_.memory_bytes();
}

void SuffixAutomaton::check_integrity() const {
  auto fail = [](const std::string& why) { throw std::logic_error("SuffixAutomaton integrity: " + why); };
  const int32_t n = static_cast<int32_t>(states_.size());
  if (states_[0].len != 0 || states_[0].link != -1) fail("root must have len 0 and no suffix link");
  if (states_[last_].len != static_cast<int32_t>(num_tokens_)) fail("last state length != tokens indexed");
  if (num_tokens_ >= 2 && static_cast<size_t>(n) > 2 * num_tokens_ - 1) fail("more than 2n-1 states");
  std::string why;
  if (linked_ ? forest_.size() != states_.size() || !counts_.empty()
              : counts_.size() != states_.size() || forest_.size() != 0) {
    fail("count storage does not hold one count per state");
  }
  if (linked_ && !forest_.check_structure(&why)) fail(why);
  std::vector<int32_t> solid_in(n, 0);
  size_t edges = 0;
  for (int32_t v = 0; v < n; ++v) {
    const State& st = states_[v];
    if (v > 0) {
      if (st.link < 0 || st.link >= n) fail("state " + std::to_string(v) + " has suffix link out of range");
      if (states_[st.link].len >= st.len) fail("suffix link of state " + std::to_string(v) + " is not shorter");
    }
    if (!edges_.check(st.edges, &why)) fail("state " + std::to_string(v) + ": " + why);
    edges_.for_each(st.edges, [&](int32_t tok, int32_t dst) {
      ++edges;
      if (dst <= 0 || dst >= n) fail("transition target out of range");
      if (tok != kSeparator && (tok < 0 || tok >= vocab_)) fail("transition token out of range");
      if (states_[dst].len < st.len + 1) fail("transition to a state shorter than len+1");
      if (states_[dst].len == st.len + 1) ++solid_in[dst];
    });
  }
  if (edges != num_edges_) fail("transition count mismatch");
  for (int32_t v = 1; v < n; ++v) {
    if (solid_in[v] != 1) fail("state " + std::to_string(v) + " has " + std::to_string(solid_in[v]) + " solid in-edges, expected 1");
  }
  std::vector<int32_t> order(n);
  for (int32_t v = 0; v < n; ++v) order[v] = v;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return states_[a].len > states_[b].len; });
  std::vector<int64_t> expect(n, 0);
  for (int32_t v = 1; v < n; ++v) expect[v] = is_clone_[v] ? 0 : 1;
  for (int32_t v : order) {
    if (v > 0) expect[states_[v].link] += expect[v];
  }
  for (int32_t v = 1; v < n; ++v) {
    if (count_of(v) != expect[v]) {
      fail("state " + std::to_string(v) + " count " + std::to_string(count_of(v)) + " != recount " +
           std::to_string(expect[v]));
    }
  }
}

}  // namespace specdec::suffix
