#include "suffix/row_tracker.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace specdec::suffix {

RowTracker::RowTracker(int64_t vocab_size, const TrackerParams& params) : vocab_(vocab_size), params_(params) {
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    throw std::invalid_argument("RowTracker: vocab_size must be in [1, 2^31-1], got " + std::to_string(vocab_size));
  }
  if (params.park_steps < 1) {
    throw std::invalid_argument("RowTracker: park_steps must be >= 1, got " + std::to_string(params.park_steps));
  }
  if (params.max_parked < 0 || params.max_parked_tokens < 0) {
    throw std::invalid_argument("RowTracker: max_parked and max_parked_tokens must be >= 0, got " +
                                std::to_string(params.max_parked) + ", " + std::to_string(params.max_parked_tokens));
  }
  if (!(params.park_seconds > 0.0)) {
    throw std::invalid_argument("RowTracker: park_seconds must be > 0, got " + std::to_string(params.park_seconds));
  }
}

bool RowTracker::holds(const TrackedRequest& r, const int32_t* row, int32_t n, int64_t slack) const {
  const size_t m = r.tokens.size();
  if (m > static_cast<size_t>(n)) return false;
  // More new tokens than this step sampled plus what may have passed unseen: another request that
  // begins with all of r's tokens (a new turn), not r continued.
  if (static_cast<int64_t>(n) - static_cast<int64_t>(m) > slack) return false;
  if (m == 0) return true;
  // The last token first: a different request almost always differs there, so most misses cost one load.
  return row[m - 1] == r.tokens[m - 1] && std::memcmp(row, r.tokens.data(), m * sizeof(int32_t)) == 0;
}

std::string RowTracker::check_row(const int32_t* ids, int32_t count, int32_t row, int32_t offset) const {
  for (int32_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_) {
      return "row " + std::to_string(row) + " token " + std::to_string(offset + i) + " is " + std::to_string(ids[i]) +
             ", not an id in [0, " + std::to_string(vocab_) + ")";
    }
  }
  return {};
}

void RowTracker::step(const int32_t* tokens, int64_t stride, const int32_t* n, const int32_t* sampled, int32_t rows,
                      int32_t max_unseen, double now, bool strict) {
  if (rows < 0) throw std::invalid_argument("RowTracker.step: rows must be >= 0");
  if (max_unseen < 0) throw std::invalid_argument("RowTracker.step: max_unseen must be >= 0");
  // What row r may hold beyond a request's tokens: this step's samples, and what a request that held
  // a row at the last step may have committed in steps the drafter did not see.
  auto slack = [&](const TrackedRequest& req, int32_t r) {
    return static_cast<int64_t>(sampled[r]) + (req.last_step == step_ ? max_unseen : 0);
  };
  if (rows > 0 && stride < 1) throw std::invalid_argument("RowTracker.step: stride must be >= 1");
  // Phase 1, no state changed: which rows are valid, and the request each holds (-1: a new one).
  std::vector<std::string> bad(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    if (n[r] < 1 || n[r] > stride) {
      bad[r] = "row " + std::to_string(r) + " has " + std::to_string(n[r]) + " committed tokens, expected 1.." +
               std::to_string(stride);
    } else if (sampled[r] < 0 || sampled[r] >= n[r]) {
      bad[r] = "row " + std::to_string(r) + " sampled " + std::to_string(sampled[r]) + " tokens of its " +
               std::to_string(n[r]) + ", expected 0.." + std::to_string(n[r] - 1);
    }
  }
  std::vector<int64_t> owner(static_cast<size_t>(rows), -1);
  std::unordered_set<int64_t> claimed;
  std::vector<int32_t> unmatched;
  for (int32_t r = 0; r < rows; ++r) {
    if (!bad[r].empty()) continue;
    if (static_cast<size_t>(r) < row_owner_.size()) {
      auto it = reqs_.find(row_owner_[r]);
      if (it != reqs_.end() && !claimed.count(it->first) &&
          holds(it->second, tokens + r * stride, n[r], slack(it->second, r))) {
        owner[r] = it->first;
        claimed.insert(it->first);
        continue;
      }
    }
    unmatched.push_back(r);
  }
  for (int32_t r : unmatched) {
    const TrackedRequest* best = nullptr;
    for (const auto& [id, req] : reqs_) {
      if (claimed.count(id) || !holds(req, tokens + r * stride, n[r], slack(req, r))) continue;
      if (best == nullptr || req.tokens.size() > best->tokens.size() ||
          (req.tokens.size() == best->tokens.size() && req.last_step > best->last_step)) {
        best = &req;
        owner[r] = id;
      }
    }
    if (best != nullptr) claimed.insert(owner[r]);
  }
  for (int32_t r = 0; r < rows; ++r) {
    if (!bad[r].empty()) continue;
    const int32_t from = owner[r] < 0 ? 0 : static_cast<int32_t>(reqs_.at(owner[r]).tokens.size());
    bad[r] = check_row(tokens + r * stride + from, n[r] - from, r, from);
    if (!bad[r].empty()) owner[r] = -1;  // its request, if any, is parked
  }
  std::string refusal;
  for (int32_t r = 0; r < rows && refusal.empty(); ++r) refusal = bad[r];
  if (strict && !refusal.empty()) throw std::invalid_argument("RowTracker.step: " + refusal);
  // Phase 2: apply.
  ++step_;
  refusal_ = std::move(refusal);
  ended_.clear();
  ended_ids_.clear();
  events_.assign(static_cast<size_t>(rows), RowEvent{-1, RowKind::kContinued, 0, 0, 0, 0, 0});
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t* row = tokens + r * stride;
    if (!bad[r].empty()) {
      events_[r].kind = RowKind::kRefused;
      continue;
    }
    if (owner[r] < 0) {
      const int64_t id = next_id_++;
      TrackedRequest req;
      req.prompt_len = n[r] - sampled[r];
      req.tokens.assign(row, row + n[r]);
      req.last_step = step_;
      req.last_seen = now;
      events_[r] = RowEvent{id, RowKind::kNew, req.prompt_len, req.prompt_len, n[r], 0, 0};
      reqs_.emplace(id, std::move(req));
      continue;
    }
    TrackedRequest& req = reqs_.at(owner[r]);
    const int32_t m = static_cast<int32_t>(req.tokens.size());
    const RowKind kind = req.last_step == step_ - 1 ? RowKind::kContinued : RowKind::kResumed;
    RowEvent& e = events_[r];
    // A resumed request's draft was discarded by the engine (preemption), never verified.
    const int32_t drafted = kind == RowKind::kContinued ? static_cast<int32_t>(req.draft.size()) : 0;
    e = RowEvent{owner[r], kind, 0, m, n[r], drafted, 0};
    const int32_t fresh = n[r] - m;
    int32_t common = 0;
    while (common < fresh && common < e.drafted && row[m + common] == req.draft[common]) ++common;
    e.accepted = std::max(0, std::min(common, fresh - 1));
    req.tokens.insert(req.tokens.end(), row + m, row + n[r]);
    req.draft.clear();
    req.last_step = step_;
    req.last_seen = now;
  }
  row_owner_.resize(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) row_owner_[r] = events_[r].id;
  end_parked(now);
}

void RowTracker::end_parked(double now) {
  std::vector<std::pair<int64_t, int64_t>> parked;  // (last_step, id)
  int64_t tokens = 0;
  for (const auto& [id, req] : reqs_) {
    if (req.last_step < step_) {
      parked.emplace_back(req.last_step, id);
      tokens += static_cast<int64_t>(req.tokens.size());
    }
  }
  std::sort(parked.begin(), parked.end());
  size_t keep = parked.size();
  for (size_t i = 0; i < parked.size(); ++i) {
    const TrackedRequest& req = reqs_.at(parked[i].second);
    const bool stale = step_ - parked[i].first >= params_.park_steps || now - req.last_seen >= params_.park_seconds;
    const bool over = keep > static_cast<size_t>(params_.max_parked) || tokens > params_.max_parked_tokens;
    // Sorted by last step: the rest are younger by steps, but an idle gap may have aged any of them.
    if (!stale && !over) continue;
    tokens -= static_cast<int64_t>(req.tokens.size());
    auto node = reqs_.extract(parked[i].second);
    ended_ids_.push_back(parked[i].second);
    ended_.insert(std::move(node));
    --keep;
  }
}

size_t RowTracker::parked() const {
  size_t k = 0;
  for (const auto& kv : reqs_) k += kv.second.last_step < step_ ? 1 : 0;
  return k;
}

int64_t RowTracker::parked_tokens() const {
  int64_t k = 0;
  for (const auto& kv : reqs_) k += kv.second.last_step < step_ ? static_cast<int64_t>(kv.second.tokens.size()) : 0;
  return k;
}

void RowTracker::record_drafts(const int32_t* offsets, const int32_t* flat, int32_t rows) {
  if (rows != static_cast<int32_t>(events_.size())) {
    throw std::invalid_argument("RowTracker.record_drafts: " + std::to_string(rows) + " rows, but the last step had " +
                                std::to_string(events_.size()));
  }
  if (rows > 0 && offsets[0] != 0) throw std::invalid_argument("RowTracker.record_drafts: offsets must start at 0");
  for (int32_t r = 0; r < rows; ++r) {
    if (offsets[r + 1] < offsets[r]) throw std::invalid_argument("RowTracker.record_drafts: offsets must not decrease");
    if (events_[r].kind == RowKind::kRefused && offsets[r + 1] > offsets[r]) {
      throw std::invalid_argument("RowTracker.record_drafts: row " + std::to_string(r) +
                                  " was refused and cannot have a draft");
    }
  }
  for (int32_t r = 0; r < rows; ++r) {
    if (events_[r].kind == RowKind::kRefused) continue;
    auto it = reqs_.find(events_[r].id);
    if (it == reqs_.end()) throw std::logic_error("RowTracker.record_drafts: a row's request is not tracked");
    it->second.draft.assign(flat + offsets[r], flat + offsets[r + 1]);
  }
}

const TrackedRequest& RowTracker::request(int64_t id) const {
  auto it = reqs_.find(id);
  if (it != reqs_.end()) return it->second;
  auto ended = ended_.find(id);
  if (ended != ended_.end()) return ended->second;
  throw std::invalid_argument("RowTracker: unknown request id " + std::to_string(id));
}

}  // namespace specdec::suffix
