// Link-cut forest (Sleator & Tarjan) with "add to root path" and point reads.
//
// The suffix automaton keeps exact end-position counts online with it: appending a token adds one
// end position to every state on the new state's suffix-link path (a root path in the suffix-link
// tree), and cloning a state re-hangs one subtree. Both are amortised O(log n) here, where walking
// the suffix-link path would be O(n) per token on repetitive text ("a a a a ...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::suffix {

class LinkCutForest {
 public:
  // Adds an isolated node (a tree root) holding `value`; returns its index.
  int32_t add_node(int32_t value);
  // Makes tree root `x` a child of `parent`.
  void link(int32_t x, int32_t parent);
  // Detaches `x` from its parent, making it a tree root.
  void cut(int32_t x);
  // Adds `delta` to every node on the path from `x` to its tree root (both included).
  void add_to_root_path(int32_t x, int32_t delta);
  // Current value of `x`. Logically const; may splay to keep reads amortised O(log n).
  int32_t value(int32_t x);
  size_t size() const { return nodes_.size(); }
  size_t memory_bytes() const;
  void clear();
  // Checks that splay children and parents agree; returns false and fills `why` otherwise.
  bool check_structure(std::string* why) const;

 private:
  struct Node {
    int32_t ch[2];
    int32_t fa;   // splay parent, or path-parent when this node is a splay root
    int32_t val;  // exact once all tags of splay ancestors are pushed
    int32_t tag;  // pending addition for both splay subtrees
  };
  bool is_splay_root(int32_t x) const;
  void push(int32_t x);
  void rotate(int32_t x);
  void splay(int32_t x);
  void access(int32_t x);

  std::vector<Node> nodes_;
  std::vector<int32_t> stack_;
};

}  // namespace specdec::suffix
