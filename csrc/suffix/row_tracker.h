// Request identity for engines that hand a drafter batch rows, not request ids (vLLM's custom_class
// proposer: a token matrix token_ids[rows, stride] and the committed length of every row).
//
// A row holds request r exactly when its first len(r) tokens are r's committed tokens; the row's
// tokens past len(r) are what the engine committed since. Rows move between steps (the engine
// condenses and reorders its batch), are reused by new requests, and a request may leave the batch
// (finished, aborted, preempted, or simply not scheduled) and come back later with all its tokens.
// So every step each row is matched by content, compared in full (memcmp), never by position alone:
//   1. the request that held the same row last step, if it still matches (the common case);
//   2. otherwise the longest tracked request that matches and no other row claimed this step
//      (a moved row, or a request back from preemption: "resumed");
//   3. otherwise a new request: its prompt is the row less the tokens sampled this step.
// A request no row holds is parked, and ended (its id reported once, its tokens kept until the
// next step) after park_steps steps without a row or when more than max_parked are parked.
// Two requests whose committed tokens are identical cannot be told apart by content; whichever is
// matched, the tokens a drafter sees for the row are exactly the row's committed tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace specdec::suffix {

enum class RowKind : int8_t { kContinued = 0, kNew = 1, kResumed = 2 };

struct RowEvent {
  int64_t id;             // tracked request id (stable across steps and rows)
  RowKind kind;
  int32_t prompt_end;     // kNew: the prompt is tokens[0, prompt_end); otherwise 0
  int32_t commit_begin;   // tokens[commit_begin, commit_end) were committed since last seen
  int32_t commit_end;
  int32_t drafted;        // tokens drafted for this request when last seen (0: none)
  int32_t accepted;       // how many of them the new tokens confirm (min(common prefix, new - 1))
};

struct TrackedRequest {
  std::vector<int32_t> tokens;  // committed tokens (prompt first)
  int32_t prompt_len = 0;
  int64_t last_step = 0;        // last step a row held it
  std::vector<int32_t> draft;   // chain drafted when last seen
};

class RowTracker {
 public:
  // Token ids must lie in [0, vocab_size). Throws std::invalid_argument for vocab_size < 1,
  // park_steps < 1 or max_parked < 0.
  RowTracker(int64_t vocab_size, int32_t park_steps, int32_t max_parked);

  // One engine step. tokens: row r at tokens + r * stride; n[r] committed tokens of row r
  // (1 <= n[r] <= stride); sampled[r] tokens sampled for row r this step (0 <= sampled[r] < n[r]).
  // Validates everything, the ids of every token it will commit included, before changing any state
  // (std::invalid_argument naming the row), so a refused step leaves the tracker as it was.
  void step(const int32_t* tokens, int64_t stride, const int32_t* n, const int32_t* sampled, int32_t rows);
  // Drafts returned for the rows of the last step (offsets[rows + 1] into flat), for acceptance.
  void record_drafts(const int32_t* offsets, const int32_t* flat, int32_t rows);

  const std::vector<RowEvent>& events() const { return events_; }  // one per row of the last step
  const std::vector<int64_t>& ended() const { return ended_ids_; }  // ended during the last step
  // Tokens of a tracked request, or of one ended during the last step. Throws for an unknown id.
  const TrackedRequest& request(int64_t id) const;
  size_t tracked() const { return reqs_.size(); }
  size_t parked() const;
  int64_t steps() const { return step_; }

 private:
  bool holds(const TrackedRequest& r, const int32_t* row, int32_t n) const;
  void check_ids(const int32_t* ids, int32_t count, int32_t row, int32_t offset) const;
  void end_parked();

  int64_t vocab_;
  int32_t park_steps_;
  int32_t max_parked_;
  int64_t step_ = 0;
  int64_t next_id_ = 0;
  std::unordered_map<int64_t, TrackedRequest> reqs_;
  std::vector<int64_t> row_owner_;  // request id per row of the last step
  std::vector<RowEvent> events_;
  std::vector<int64_t> ended_ids_;
  std::unordered_map<int64_t, TrackedRequest> ended_;
};

}  // namespace specdec::suffix
