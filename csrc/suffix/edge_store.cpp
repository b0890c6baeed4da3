#include "suffix/edge_store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "suffix/grow.h"

namespace specdec::suffix {

uint32_t EdgeStore::alloc(uint32_t lg) {
  if (free_.size() <= lg) free_.resize(lg + 1);
  if (!free_[lg].empty()) {
    const uint32_t off = free_[lg].back();
    free_[lg].pop_back();
    return off;
  }
  const size_t cap = size_t{1} << lg;
  const size_t off = arena_.size();
  if (off + cap > UINT32_MAX) throw std::length_error("suffix automaton transition arena exceeds 2^32 entries");
  reserve_for(arena_, cap);
  arena_.resize(off + cap, Edge{kEmpty, -1});
  return static_cast<uint32_t>(off);
}

void EdgeStore::release(uint32_t off, uint32_t lg) {
  if (free_.size() <= lg) free_.resize(lg + 1);
  push_compact(free_[lg], off);
}

int32_t EdgeStore::get(const EdgeList& e, int32_t tok) const {
  if (e.n == 0) return -1;
  if (e.n == 1) return e.a == tok ? e.b : -1;
  const Edge* blk = arena_.data() + static_cast<uint32_t>(e.a);
  if (e.lg <= kSortedMaxLg) {
    for (uint32_t i = 0; i < e.n; ++i) {
      if (blk[i].tok >= tok) return blk[i].tok == tok ? blk[i].dst : -1;
    }
    return -1;
  }
  const uint32_t mask = (1u << e.lg) - 1;
  for (uint32_t i = slot(tok, e.lg);; i = (i + 1) & mask) {
    if (blk[i].tok == tok) return blk[i].dst;
    if (blk[i].tok == kEmpty) return -1;
  }
}

void EdgeStore::hash_insert(Edge* blk, uint32_t lg, int32_t tok, int32_t dst) const {
  const uint32_t mask = (1u << lg) - 1;
  uint32_t i = slot(tok, lg);
  while (blk[i].tok != kEmpty && blk[i].tok != tok) i = (i + 1) & mask;
  blk[i] = Edge{tok, dst};
}

void EdgeStore::rehash(EdgeList& e, uint32_t new_lg) {
  const uint32_t off = alloc(new_lg);
  Edge* dst_blk = arena_.data() + off;
  std::fill(dst_blk, dst_blk + (size_t{1} << new_lg), Edge{kEmpty, -1});
  const Edge* src = arena_.data() + static_cast<uint32_t>(e.a);
  const uint32_t n_slots = e.lg <= kSortedMaxLg ? e.n : (1u << e.lg);
  for (uint32_t i = 0; i < n_slots; ++i) {
    if (src[i].tok != kEmpty) hash_insert(dst_blk, new_lg, src[i].tok, src[i].dst);
  }
  release(static_cast<uint32_t>(e.a), e.lg);
  e.a = static_cast<int32_t>(off);
  e.lg = new_lg;
}

void EdgeStore::set(EdgeList& e, int32_t tok, int32_t dst) {
  if (e.n == 0) {
    e = EdgeList{1, 0, tok, dst};
    return;
  }
  if (e.n == 1) {
    if (e.a == tok) {
      e.b = dst;
      return;
    }
    const uint32_t off = alloc(1);
    Edge* blk = arena_.data() + off;
    const Edge old{e.a, e.b};
    const Edge add{tok, dst};
    blk[0] = old.tok < tok ? old : add;
    blk[1] = old.tok < tok ? add : old;
    e = EdgeList{2, 1, static_cast<int32_t>(off), -1};
    return;
  }
  if (e.lg <= kSortedMaxLg) {
    Edge* blk = arena_.data() + static_cast<uint32_t>(e.a);
    uint32_t pos = 0;
    while (pos < e.n && blk[pos].tok < tok) ++pos;
    if (pos < e.n && blk[pos].tok == tok) {
      blk[pos].dst = dst;
      return;
    }
    if (e.n == (1u << e.lg)) {
      if (e.lg == kSortedMaxLg) {
        rehash(e, kSortedMaxLg + 2);
        hash_insert(arena_.data() + static_cast<uint32_t>(e.a), e.lg, tok, dst);
        ++e.n;
        return;
      }
      const uint32_t off = alloc(e.lg + 1);
      std::memcpy(arena_.data() + off, arena_.data() + static_cast<uint32_t>(e.a), sizeof(Edge) * e.n);
      release(static_cast<uint32_t>(e.a), e.lg);
      e.a = static_cast<int32_t>(off);
      ++e.lg;
      blk = arena_.data() + off;
    }
    std::memmove(blk + pos + 1, blk + pos, sizeof(Edge) * (e.n - pos));
    blk[pos] = Edge{tok, dst};
    ++e.n;
    return;
  }
  Edge* blk = arena_.data() + static_cast<uint32_t>(e.a);
  const uint32_t mask = (1u << e.lg) - 1;
  for (uint32_t i = slot(tok, e.lg);; i = (i + 1) & mask) {
    if (blk[i].tok == tok) {
      blk[i].dst = dst;
      return;
    }
    if (blk[i].tok == kEmpty) break;
  }
  if (2 * (e.n + 1) > (1u << e.lg)) rehash(e, e.lg + 1);
  hash_insert(arena_.data() + static_cast<uint32_t>(e.a), e.lg, tok, dst);
  ++e.n;
}

EdgeList EdgeStore::copy(const EdgeList& e) {
  if (e.n <= 1) return e;
  const uint32_t off = alloc(e.lg);
  std::memcpy(arena_.data() + off, arena_.data() + static_cast<uint32_t>(e.a), sizeof(Edge) << e.lg);
  EdgeList out = e;
  out.a = static_cast<int32_t>(off);
  return out;
}

size_t EdgeStore::memory_bytes() const {
  size_t bytes = arena_.capacity() * sizeof(Edge) + free_.capacity() * sizeof(std::vector<uint32_t>);
  for (const auto& f : free_) bytes += f.capacity() * sizeof(uint32_t);
  return bytes;
}

void EdgeStore::clear() {
  std::vector<Edge>().swap(arena_);
  std::vector<std::vector<uint32_t>>().swap(free_);
}

bool EdgeStore::check(const EdgeList& e, std::string* why) const {
  if (e.n <= 1) return true;
  if (e.lg == 0 || static_cast<size_t>(static_cast<uint32_t>(e.a)) + (size_t{1} << e.lg) > arena_.size()) {
    *why = "transition block out of arena bounds";
    return false;
  }
  const Edge* blk = arena_.data() + static_cast<uint32_t>(e.a);
  if (e.lg <= kSortedMaxLg) {
    if (e.n > (1u << e.lg)) {
      *why = "sorted transition block overfull";
      return false;
    }
    for (uint32_t i = 1; i < e.n; ++i) {
      if (blk[i - 1].tok >= blk[i].tok) {
        *why = "sorted transition block not strictly increasing";
        return false;
      }
    }
    return true;
  }
  uint32_t used = 0;
  for (uint32_t i = 0; i < (1u << e.lg); ++i) {
    if (blk[i].tok == kEmpty) continue;
    ++used;
    if (get(e, blk[i].tok) != blk[i].dst) {
      *why = "hashed transition not reachable by probing";
      return false;
    }
  }
  if (used != e.n || 2 * e.n > (1u << e.lg)) {
    *why = "hashed transition block count/load mismatch";
    return false;
  }
  return true;
}

}  // namespace specdec::suffix
