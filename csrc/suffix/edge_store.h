// Compact sparse transition storage for the suffix automaton.
//
// Most automaton states have one or two outgoing transitions while a few (the root, states of
// very common short contexts) have thousands, over vocabularies of ~50k ids. So a state keeps
// 0 or 1 transition inline in its 16-byte EdgeList, up to 16 in a sorted block, and more in an
// open-addressing hash block (load <= 1/2). Blocks live in one arena with per-size free lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::suffix {

struct Edge {
  int32_t tok;
  int32_t dst;
};

// Per-state header: n transitions; n <= 1 are stored inline in (a, b) = (token, target);
// n >= 2 live in the arena block at offset a with capacity 1 << lg.
struct EdgeList {
  uint32_t n = 0;
  uint32_t lg = 0;
  int32_t a = -1;
  int32_t b = -1;
};

class EdgeStore {
 public:
  static constexpr int32_t kEmpty = INT32_MIN;  // hash slot marker; never a token id
  static constexpr uint32_t kSortedMaxLg = 4;   // sorted blocks hold up to 16 transitions

  // Target state for `tok`, or -1.
  int32_t get(const EdgeList& e, int32_t tok) const;
  // Inserts or overwrites the transition on `tok`.
  void set(EdgeList& e, int32_t tok, int32_t dst);
  // A new list with the same transitions (for cloned states).
  EdgeList copy(const EdgeList& e);
  // Calls f(tok, dst) for every transition; sorted by token unless the list is hashed.
  template <class F>
  void for_each(const EdgeList& e, F&& f) const {
    if (e.n == 0) return;
    if (e.n == 1) {
      f(e.a, e.b);
      return;
    }
    const Edge* blk = arena_.data() + static_cast<uint32_t>(e.a);
    if (e.lg <= kSortedMaxLg) {
      for (uint32_t i = 0; i < e.n; ++i) f(blk[i].tok, blk[i].dst);
      return;
    }
    const uint32_t cap = 1u << e.lg;
    for (uint32_t i = 0; i < cap; ++i) {
      if (blk[i].tok != kEmpty) f(blk[i].tok, blk[i].dst);
    }
  }
  size_t memory_bytes() const;
  void clear();
  // Checks the list's representation (sortedness, hash occupancy); fills `why` on failure.
  bool check(const EdgeList& e, std::string* why) const;

 private:
  uint32_t alloc(uint32_t lg);
  void release(uint32_t off, uint32_t lg);
  static uint32_t slot(int32_t tok, uint32_t lg) {
    return (static_cast<uint32_t>(tok) * 0x9E3779B1u) >> (32 - lg);
  }
  void hash_insert(Edge* blk, uint32_t lg, int32_t tok, int32_t dst) const;
  void rehash(EdgeList& e, uint32_t new_lg);

  std::vector<Edge> arena_;
  std::vector<std::vector<uint32_t>> free_;  // free block offsets per lg
};

}  // namespace specdec::suffix
