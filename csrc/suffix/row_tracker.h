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
// A match must also be a continuation of the same generation: the row may hold at most
// sampled[r] tokens the request did not have, plus max_unseen if the request held a row at the last
// step (max_unseen: what the engine may have committed unseen, in steps whose drafter call it
// skipped; a request out of the batch commits nothing). A row holding a
// tracked request's tokens and more (a new turn of a conversation: the old prompt, its response and
// a new user turn) is a new request, so a request's tokens past its prompt are always tokens the
// engine generated, and whatever indexes "responses" never indexes another turn's prompt.
// A request no row holds is parked, and ended (its id reported once, its tokens kept until the
// next step) when it has been parked for park_steps steps or park_seconds seconds, or when the
// parked requests exceed max_parked requests or max_parked_tokens tokens (oldest first).
// A resumed request's last draft counts as not verified (drafted = 0): the engine discards drafts
// at preemption (vLLM clears a preempted request's spec tokens).
// A row that fails validation (lengths, token ids) is refused: with strict, the whole step throws
// and nothing changes; otherwise the row gets kind kRefused (no id, no draft; its old request, if
// any, is parked) and the other rows proceed, so one bad row cannot stop an engine.
// Two requests whose committed tokens are identical cannot be told apart by content; whichever is
// matched, the tokens a drafter sees for the row are exactly the row's committed tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace specdec::suffix {

enum class RowKind : int8_t { kContinued = 0, kNew = 1, kResumed = 2, kRefused = 3 };

struct TrackerParams {
  int32_t park_steps = 64;                        // steps a request may be out of every row
  int32_t max_parked = 1024;                      // parked requests kept at most
  int64_t max_parked_tokens = int64_t{1} << 22;   // tokens held by parked requests at most
  double park_seconds = 600.0;                    // seconds a request may be out of every row
};

struct RowEvent {
  int64_t id;             // tracked request id (stable across steps and rows); -1 for kRefused
  RowKind kind;
  int32_t prompt_end;     // kNew: the prompt is tokens[0, prompt_end); otherwise 0
  int32_t commit_begin;   // tokens[commit_begin, commit_end) were committed since last seen
  int32_t commit_end;
  int32_t drafted;        // tokens drafted for this request at the last step (0: none, or kResumed)
  int32_t accepted;       // how many of them the new tokens confirm (min(common prefix, new - 1))
};

struct TrackedRequest {
  std::vector<int32_t> tokens;  // committed tokens (prompt first)
  int32_t prompt_len = 0;
  int64_t last_step = 0;        // last step a row held it
  double last_seen = 0.0;       // the caller's clock at that step
  std::vector<int32_t> draft;   // chain drafted when last seen
};

class RowTracker {
 public:
  // Token ids must lie in [0, vocab_size). Throws std::invalid_argument for vocab_size < 1 or
  // params out of range (park_steps >= 1, max_parked >= 0, max_parked_tokens >= 0,
  // park_seconds > 0).
  RowTracker(int64_t vocab_size, const TrackerParams& params);

  // One engine step at time `now` (seconds, any monotonic clock). tokens: row r at tokens + r * stride;
  // n[r] committed tokens of row r (1 <= n[r] <= stride); sampled[r] tokens sampled for row r this
  // step (0 <= sampled[r] < n[r]); max_unseen >= 0 (see above). Validates every row, the ids of
  // every token it will commit included, before changing any state. strict: a bad row throws std::invalid_argument naming it
  // and the tracker is left as it was; otherwise the row is refused (kRefused, see refusal()).
  void step(const int32_t* tokens, int64_t stride, const int32_t* n, const int32_t* sampled, int32_t rows,
            int32_t max_unseen, double now, bool strict);
  // Drafts returned for the rows of the last step (offsets[rows + 1] into flat), for acceptance.
  void record_drafts(const int32_t* offsets, const int32_t* flat, int32_t rows);

  const std::vector<RowEvent>& events() const { return events_; }  // one per row of the last step
  const std::vector<int64_t>& ended() const { return ended_ids_; }  // ended during the last step
  const std::string& refusal() const { return refusal_; }  // why the last step's first refused row was refused
  // Tokens of a tracked request, or of one ended during the last step. Throws for an unknown id.
  const TrackedRequest& request(int64_t id) const;
  size_t tracked() const { return reqs_.size(); }
  size_t parked() const;
  int64_t parked_tokens() const;
  int64_t steps() const { return step_; }

 private:
  bool holds(const TrackedRequest& r, const int32_t* row, int32_t n, int64_t slack) const;
  std::string check_row(const int32_t* ids, int32_t count, int32_t row, int32_t offset) const;
  void end_parked(double now);

  int64_t vocab_;
  TrackerParams params_;
  int64_t step_ = 0;
  int64_t next_id_ = 0;
  std::unordered_map<int64_t, TrackedRequest> reqs_;
  std::vector<int64_t> row_owner_;  // request id per row of the last step
  std::vector<RowEvent> events_;
  std::vector<int64_t> ended_ids_;
  std::unordered_map<int64_t, TrackedRequest> ended_;
  std::string refusal_;
};

}  // namespace specdec::suffix
