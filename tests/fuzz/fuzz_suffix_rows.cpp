// libFuzzer target (built with -fsanitize=fuzzer,address,undefined by scripts/fuzz_suffix.sh) for the
// code under vLLM's drafter: SuffixRowBatch / RowTracker over a mutating engine batch, and the suffix
// automaton's extend / add_document / longest_match / repeat_match / count under it.
//
// Every check is against a brute force on the plain token lists:
//  * the automaton: longest_match(ctx) is the longest suffix of ctx occurring in the indexed text
//    (documents never joined), repeat_match is the longest suffix of the text occurring earlier,
//    count(state) is that string's number of occurrences, before and after the counts move from
//    the plain array to the link-cut forest (walk limits 0-9);
//  * the rows: after every step, the tokens the tracker holds for each row's request are exactly
//    the row's committed tokens, a chain has at most k tokens, all in the vocabulary.
// Input bytes are read as a little program: opcode, then operands (all values taken modulo a range).
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include "suffix/row_batch.h"
#include "suffix/suffix_automaton.h"

using specdec::suffix::Match;
using specdec::suffix::MatchCalibration;
using specdec::suffix::RowBatchParams;
using specdec::suffix::SuffixAutomaton;
using specdec::suffix::SuffixRowBatch;

namespace {

constexpr int kVocab = 4;
constexpr int kRows = 4;
constexpr int kWidth = 96;

struct Reader {
  const uint8_t* p;
  size_t n;
  bool more() const { return n > 0; }
  int next(int mod) {
    if (n == 0) return 0;
    --n;
    return *p++ % mod;
  }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::abort();
}

// Occurrences of pat in text, where text is a list of documents (the last one still open).
int64_t occurrences(const std::vector<std::vector<int32_t>>& docs, const std::vector<int32_t>& pat) {
  int64_t c = 0;
  for (const auto& d : docs) {
    if (pat.size() > d.size()) continue;
    for (size_t i = 0; i + pat.size() <= d.size(); ++i) {
      bool ok = true;
      for (size_t j = 0; j < pat.size() && ok; ++j) ok = d[i + j] == pat[j];
      c += ok;
    }
  }
  return c;
}

void check_automaton(Reader& in) {
  SuffixAutomaton sam(kVocab, in.next(10));  // walk limits 0-9: counts move to the forest at any point
  std::vector<std::vector<int32_t>> docs(1);  // docs.back() is the open text extend() appends to
  for (int op = 0; op < 24 && in.more(); ++op) {
    const int kind = in.next(4);
    std::vector<int32_t> toks(1 + in.next(6));
    for (auto& t : toks) t = in.next(kVocab);
    if (kind == 0 || kind == 1) {
      sam.extend(toks.data(), toks.size());
      docs.back().insert(docs.back().end(), toks.begin(), toks.end());
    } else if (kind == 2) {
      sam.add_document(toks.data(), toks.size());  // closes the open text with these tokens
      docs.back().insert(docs.back().end(), toks.begin(), toks.end());
      docs.emplace_back();
    } else {
      const Match m = sam.longest_match(toks.data(), toks.size());
      size_t best = 0;
      for (size_t len = 1; len <= toks.size(); ++len) {
        std::vector<int32_t> suf(toks.end() - len, toks.end());
        if (occurrences(docs, suf) > 0) best = len;
      }
      if (static_cast<size_t>(m.length) != best) fail("longest_match length differs from brute force");
      if (best > 0) {
        std::vector<int32_t> suf(toks.end() - best, toks.end());
        if (sam.count(m.state) != occurrences(docs, suf)) fail("count differs from brute-force occurrences");
      }
    }
    if (!docs.back().empty()) {
      const auto& text = docs.back();
      const Match r = sam.repeat_match();
      // repeat_match is over the whole indexed text; with closed documents before it, compare only
      // when the open text is the whole text (one document, nothing added before).
      if (docs.size() == 1) {
        size_t best = 0;
        for (size_t len = 1; len < text.size(); ++len) {
          std::vector<int32_t> suf(text.end() - len, text.end());
          std::vector<int32_t> earlier(text.begin(), text.end() - 1);
          if (occurrences({earlier}, suf) > 0) best = len;
        }
        if (static_cast<size_t>(r.length) != best) fail("repeat_match differs from brute force");
      }
    }
  }
  sam.check_integrity();
}

struct Req {
  std::vector<int32_t> tokens;
};

void check_rows(Reader& in) {
  RowBatchParams params;
  params.draft.budget = 1 + in.next(8);
  params.draft.max_depth = 1 + in.next(4);
  params.draft.min_prob = 0.0;
  params.tracking.park_steps = 1 + in.next(3);
  params.tracking.max_parked = in.next(4);
  params.tracking.max_parked_tokens = in.next(64);
  params.tracking.park_seconds = 1.0 + in.next(8);
  params.calibrate = in.next(2);
  params.learn = in.next(2);
  SuffixRowBatch batch(kVocab, params);
  SuffixAutomaton global(kVocab, in.next(10));
  for (int d = in.next(3); d > 0; --d) {
    std::vector<int32_t> doc(1 + in.next(8));
    for (auto& t : doc) t = in.next(kVocab);
    global.add_document(doc.data(), doc.size());
  }
  std::vector<int32_t> tokens(kRows * kWidth, 0);
  std::vector<Req> rows;
  std::vector<Req> away;  // preempted: may come back with all their tokens
  const int k = 1 + in.next(4);
  uint32_t garbage = 1;  // not drawn from the input, so the input drives the program, not the filler
  for (int step = 0; step < 40 && in.more(); ++step) {
    std::vector<int32_t> sampled;
    const int op = in.next(5);
    if (op == 0 && rows.size() < kRows) {  // a new request, or one coming back
      Req r;
      if (!away.empty() && in.next(2)) {
        r = away.back();
        away.pop_back();
      } else {
        r.tokens.resize(1 + in.next(12));
        for (auto& t : r.tokens) t = in.next(kVocab);
      }
      rows.push_back(r);
    } else if (op == 1 && !rows.empty()) {  // leave (finish or preempt) and condense
      const size_t i = in.next(static_cast<int>(rows.size()));
      if (in.next(2)) away.push_back(rows[i]);
      rows[i] = rows.back();
      rows.pop_back();
    } else if (op == 2 && rows.size() >= 2) {
      const size_t a = in.next(static_cast<int>(rows.size())), b = in.next(static_cast<int>(rows.size()));
      std::swap(rows[a], rows[b]);
    }
    for (auto& r : rows) {  // every row commits 0..3 tokens this step (0: a partial prefill)
      int m = in.next(4);
      if (r.tokens.size() + m + 1 > static_cast<size_t>(kWidth)) m = 0;
      for (int j = 0; j < m; ++j) r.tokens.push_back(in.next(kVocab));
      sampled.push_back(m);
    }
    std::vector<int32_t> n;
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t j = 0; j < static_cast<size_t>(kWidth); ++j) {  // past the committed tokens: stale garbage
        garbage = garbage * 1103515245u + 12345u;
        const int32_t filler = static_cast<int32_t>(garbage >> 16) % kVocab;
        tokens[i * kWidth + j] = j < rows[i].tokens.size() ? rows[i].tokens[j] : filler;
      }
      n.push_back(static_cast<int32_t>(rows[i].tokens.size()));
      if (sampled[i] >= n[i]) sampled[i] = n[i] - 1;
    }
    const float floor = 0.25f * static_cast<float>(in.next(4));  // the cost gate's bar: 0, .25, .5, .75
    batch.step(tokens.data(), kWidth, n.data(), sampled.data(), static_cast<int32_t>(rows.size()), k,
               in.next(2) ? &global : nullptr, 0, floor, /*max_unseen=*/in.next(4),
               /*now=*/static_cast<double>(step), /*strict=*/true);
    const auto& events = batch.tracker().events();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (batch.tracker().request(events[i].id).tokens != rows[i].tokens) fail("tracked tokens differ from the row");
      const int32_t len = batch.offsets()[i + 1] - batch.offsets()[i];
      if (len > k || len < 0) fail("chain longer than k");
    }
    for (int32_t t : batch.chains()) {
      if (t < 0 || t >= kVocab) fail("chain token outside the vocabulary");
    }
    for (float p : batch.chain_probs()) {
      if (!(p >= floor && p <= 1.0f)) fail("chain token below the floor or probability outside [0, 1]");
    }
    const auto& cal = batch.calibration();
    for (int c = 0; c < MatchCalibration::kCells; ++c) {
      if (!(cal.accepted()[c] >= 0.0 && cal.predicted()[c] >= 0.0) || cal.ratio(c) <= 0.0) {
        fail("calibration sums negative or ratio not positive");
      }
      if (!params.learn && cal.tested()[c] != 0) fail("a frozen calibration learnt");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Reader in{data + 1, size - 1};
  if (data[0] % 2 == 0) {
    check_automaton(in);
  } else {
    check_rows(in);
  }
  return 0;
}
