#include "suffix/link_cut.h"

#include "suffix/grow.h"

namespace specdec::suffix {

int32_t LinkCutForest::add_node(int32_t value) {
  push_compact(nodes_, Node{{-1, -1}, -1, value, 0});
  return static_cast<int32_t>(nodes_.size() - 1);
}

bool LinkCutForest::is_splay_root(int32_t x) const {
  const int32_t f = nodes_[x].fa;
  return f < 0 || (nodes_[f].ch[0] != x && nodes_[f].ch[1] != x);
}

void LinkCutForest::push(int32_t x) {
  Node& n = nodes_[x];
  if (n.tag == 0) return;
  for (int32_t c : n.ch) {
    if (c >= 0) {
      nodes_[c].val += n.tag;
      nodes_[c].tag += n.tag;
    }
  }
  n.tag = 0;
}

void LinkCutForest::rotate(int32_t x) {
  const int32_t y = nodes_[x].fa;
  const int32_t z = nodes_[y].fa;
  const int k = nodes_[y].ch[1] == x ? 1 : 0;
  if (!is_splay_root(y)) nodes_[z].ch[nodes_[z].ch[1] == y ? 1 : 0] = x;
  nodes_[x].fa = z;
  const int32_t b = nodes_[x].ch[1 - k];
  nodes_[y].ch[k] = b;
  if (b >= 0) nodes_[b].fa = y;
  nodes_[x].ch[1 - k] = y;
  nodes_[y].fa = x;
}

void LinkCutForest::splay(int32_t x) {
  stack_.clear();
  stack_.push_back(x);
  for (int32_t y = x; !is_splay_root(y); y = nodes_[y].fa) stack_.push_back(nodes_[y].fa);
  for (size_t i = stack_.size(); i-- > 0;) push(stack_[i]);
  while (!is_splay_root(x)) {
    const int32_t y = nodes_[x].fa;
    if (!is_splay_root(y)) {
      const int32_t z = nodes_[y].fa;
      const bool same_side = (nodes_[y].ch[0] == x) == (nodes_[z].ch[0] == y);
      rotate(same_side ? y : x);
    }
    rotate(x);
  }
}

void LinkCutForest::access(int32_t x) {
  for (int32_t y = -1; x >= 0; y = x, x = nodes_[x].fa) {
    splay(x);
    nodes_[x].ch[1] = y;
  }
}

void LinkCutForest::link(int32_t x, int32_t parent) {
  access(x);
  splay(x);
  nodes_[x].fa = parent;
}

void LinkCutForest::cut(int32_t x) {
  access(x);
  splay(x);
  const int32_t left = nodes_[x].ch[0];
  if (left >= 0) {
    push(x);
    nodes_[left].fa = -1;
    nodes_[x].ch[0] = -1;
  }
}

void LinkCutForest::add_to_root_path(int32_t x, int32_t delta) {
  access(x);
  splay(x);
  nodes_[x].val += delta;
  nodes_[x].tag += delta;
}

int32_t LinkCutForest::value(int32_t x) {
  // Fast path: sum pending tags of a few splay ancestors without restructuring.
  int32_t sum = nodes_[x].val;
  int32_t y = x;
  for (int steps = 0; steps < 48; ++steps) {
    if (is_splay_root(y)) return sum;
    y = nodes_[y].fa;
    sum += nodes_[y].tag;
  }
  // Deep node: splaying pushes every pending tag onto x and pays for itself (amortised).
  splay(x);
  return nodes_[x].val;
}

size_t LinkCutForest::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + stack_.capacity() * sizeof(int32_t);
}

void LinkCutForest::clear() {
  std::vector<Node>().swap(nodes_);
  std::vector<int32_t>().swap(stack_);
}

bool LinkCutForest::check_structure(std::string* why) const {
  const int32_t n = static_cast<int32_t>(nodes_.size());
  for (int32_t x = 0; x < n; ++x) {
    const Node& node = nodes_[x];
    if (node.fa >= n || node.fa == x) {
      *why = "link-cut node " + std::to_string(x) + " has invalid parent " + std::to_string(node.fa);
      return false;
    }
    for (int32_t c : node.ch) {
      if (c >= n || (c >= 0 && nodes_[c].fa != x)) {
        *why = "link-cut node " + std::to_string(x) + " has child " + std::to_string(c) +
               " whose parent does not point back";
        return false;
      }
    }
  }
  return true;
}

}  // namespace specdec::suffix
