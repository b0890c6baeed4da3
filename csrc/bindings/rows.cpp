// pybind11 bindings for engine-row drafting: RowTracker (request identity from batch rows) and
// SuffixRowBatch (tracking + suffix drafting of a whole engine step in one call).
//
// Arrays are numpy int32, read in place: tokens a C-contiguous [rows_max, stride] matrix (vLLM's
// token_ids_cpu), num_tokens [>= rows] and num_sampled [rows] vectors. Anything else is refused
// with a TypeError/ValueError naming the argument.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "suffix/row_batch.h"
#include "suffix/row_tracker.h"
#include "bindings/to_numpy.h"

namespace py = pybind11;
using specdec::bindings::to_numpy;
using specdec::suffix::DraftParams;
using specdec::suffix::RowBatchParams;
using specdec::suffix::RowTracker;
using specdec::suffix::SuffixAutomaton;
using specdec::suffix::SuffixRowBatch;
using specdec::suffix::TrackerParams;

namespace {

using Int32Array = py::array_t<int32_t, py::array::c_style>;

// A C-contiguous int32 array of `ndim` dimensions, refused (never converted) otherwise.
Int32Array checked(const py::object& obj, int ndim, const char* what) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(what) + ": expected a numpy int32 array, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<int32_t>())) {
    throw py::type_error(std::string(what) + ": expected dtype int32, got " + std::string(py::str(a.dtype())));
  }
  if (a.ndim() != ndim) {
    throw py::value_error(std::string(what) + ": expected " + std::to_string(ndim) + " dimensions, got " +
                          std::to_string(a.ndim()));
  }
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(what) + ": expected a C-contiguous array");
  return py::reinterpret_borrow<Int32Array>(a);
}

struct StepArgs {
  Int32Array tokens, n, sampled;
  int32_t rows;
  int64_t stride;
};

StepArgs step_args(const py::object& tokens, const py::object& num_tokens, const py::object& num_sampled) {
  StepArgs a{checked(tokens, 2, "token_ids"), checked(num_tokens, 1, "num_tokens"),
             checked(num_sampled, 1, "num_sampled"), 0, 0};
  a.rows = static_cast<int32_t>(a.sampled.shape(0));
  a.stride = static_cast<int64_t>(a.tokens.shape(1));
  if (a.n.shape(0) < a.rows || a.tokens.shape(0) < a.rows) {
    throw py::value_error("token_ids and num_tokens must have at least as many rows as num_sampled (" +
                          std::to_string(a.rows) + "), got " + std::to_string(a.tokens.shape(0)) + " and " +
                          std::to_string(a.n.shape(0)));
  }
  return a;
}

py::tuple events_of(const RowTracker& t) {
  const auto& ev = t.events();
  std::vector<int64_t> ids;
  std::vector<int8_t> kinds;
  std::vector<int32_t> prompt_end, begin, end, drafted, accepted;
  for (const auto& e : ev) {
    ids.push_back(e.id);
    kinds.push_back(static_cast<int8_t>(e.kind));
    prompt_end.push_back(e.prompt_end);
    begin.push_back(e.commit_begin);
    end.push_back(e.commit_end);
    drafted.push_back(e.drafted);
    accepted.push_back(e.accepted);
  }
  return py::make_tuple(to_numpy(ids), to_numpy(kinds), to_numpy(prompt_end), to_numpy(begin), to_numpy(end),
                        to_numpy(drafted), to_numpy(accepted));
}

TrackerParams tracker_params(int32_t park_steps, int32_t max_parked, int64_t max_parked_tokens, double park_seconds) {
  TrackerParams p;
  p.park_steps = park_steps;
  p.max_parked = max_parked;
  p.max_parked_tokens = max_parked_tokens;
  p.park_seconds = park_seconds;
  return p;
}

#define SPECDEC_TRACKER_ARGS                                                                                        \
  py::arg("park_steps") = 64, py::arg("max_parked") = 1024, py::arg("max_parked_tokens") = int64_t{1} << 22,      \
      py::arg("park_seconds") = 600.0

py::tuple request_of(const RowTracker& t, int64_t id) {
  const auto& r = t.request(id);
  return py::make_tuple(to_numpy(r.tokens), r.prompt_len);
}

}  // namespace

namespace specdec {

void bind_rows(py::module_& m) {
  py::class_<RowTracker>(m, "RowTracker",
                         "Request identity from engine batch rows (see csrc/suffix/row_tracker.h).")
      .def(py::init([](int64_t vocab_size, int32_t park_steps, int32_t max_parked, int64_t max_parked_tokens,
                       double park_seconds) {
             return new RowTracker(vocab_size, tracker_params(park_steps, max_parked, max_parked_tokens, park_seconds));
           }),
           py::arg("vocab_size"), py::kw_only(), SPECDEC_TRACKER_ARGS)
      .def(
          "step",
          [](RowTracker& t, const py::object& tokens, const py::object& num_tokens, const py::object& num_sampled,
             int32_t max_unseen, double now, bool strict) {
            StepArgs a = step_args(tokens, num_tokens, num_sampled);
            t.step(a.tokens.data(), a.stride, a.n.data(), a.sampled.data(), a.rows, max_unseen, now, strict);
          },
          py::arg("token_ids"), py::arg("num_tokens"), py::arg("num_sampled"), py::arg("max_unseen") = 0,
          py::arg("now") = 0.0, py::arg("strict") = true,
          "Match every row to a tracked request (rows = len(num_sampled)); strict=False refuses bad rows "
          "one by one (kind 3) instead of raising.")
      .def(
          "record_drafts",
          [](RowTracker& t, const py::object& offsets, const py::object& flat) {
            Int32Array o = checked(offsets, 1, "offsets"), f = checked(flat, 1, "drafts");
            const int32_t rows = static_cast<int32_t>(o.shape(0)) - 1;
            if (rows < 0 || o.data()[rows] > f.shape(0)) {
              throw py::value_error("record_drafts: offsets exceed the drafts");
            }
            t.record_drafts(o.data(), f.data(), rows);
          },
          py::arg("offsets"), py::arg("drafts"), "Drafts of the last step's rows (offsets[rows + 1] into drafts).")
      .def("events", &events_of,
           "(ids int64, kinds int8 (0 continued, 1 new, 2 resumed, 3 refused), prompt_end, commit_begin, commit_end, drafted, "
           "accepted) per row of the last step.")
      .def("ended", [](const RowTracker& t) { return t.ended(); }, "Request ids ended during the last step.")
      .def("request", &request_of, py::arg("id"),
           "(committed tokens int32, prompt_len) of a tracked or just-ended request.")
      .def_property_readonly("refusal", &RowTracker::refusal, "Why the last step's first refused row was refused.")
      .def_property_readonly("tracked", &RowTracker::tracked)
      .def_property_readonly("parked", &RowTracker::parked)
      .def_property_readonly("parked_tokens", &RowTracker::parked_tokens)
      .def_property_readonly("steps", &RowTracker::steps);

  py::class_<SuffixRowBatch>(m, "SuffixRowBatch",
                             "Tracking + suffix drafting of a whole engine step (see csrc/suffix/row_batch.h).")
      .def(py::init([](int64_t vocab_size, int32_t tree_budget, int32_t min_match_len, double min_prob,
                       int32_t max_depth, double depth_factor, double count_prior, double global_count_prior,
                       int32_t rematch_window, bool combine_longest, bool calibrate, bool learn,
                       double calibration_prior, double calibration_max_weight, int32_t park_steps, int32_t max_parked,
                       int64_t max_parked_tokens, double park_seconds) {
             RowBatchParams p;
             p.draft = DraftParams{tree_budget, min_match_len, min_prob, max_depth, depth_factor, count_prior};
             p.rematch_window = rematch_window;
             p.combine_longest = combine_longest;
             p.global_count_prior = global_count_prior;
             p.tracking = tracker_params(park_steps, max_parked, max_parked_tokens, park_seconds);
             p.calibrate = calibrate;
             p.learn = learn;
             p.calibration_prior = calibration_prior;
             p.calibration_max_weight = calibration_max_weight;
             return new SuffixRowBatch(vocab_size, p);
           }),
           py::arg("vocab_size"), py::kw_only(), py::arg("tree_budget"), py::arg("min_match_len"),
           py::arg("min_prob"), py::arg("max_depth"), py::arg("depth_factor"), py::arg("count_prior"),
           py::arg("global_count_prior"), py::arg("rematch_window"), py::arg("combine_longest"),
           py::arg("calibrate") = true, py::arg("learn") = true, py::arg("calibration_prior") = 4.0,
           py::arg("calibration_max_weight") = 4096.0, SPECDEC_TRACKER_ARGS)
      .def(
          "step",
          [](SuffixRowBatch& b, const py::object& tokens, const py::object& num_tokens, const py::object& num_sampled,
             int32_t k, const SuffixAutomaton* global, int64_t generation, float min_prob, int32_t max_unseen,
             double now, bool strict) {
            StepArgs a = step_args(tokens, num_tokens, num_sampled);
            // The GIL stays held: count reads restructure the automata (not thread-safe).
            b.step(a.tokens.data(), a.stride, a.n.data(), a.sampled.data(), a.rows, k, global, generation, min_prob,
                   max_unseen, now, strict);
            return py::make_tuple(to_numpy(b.offsets()), to_numpy(b.chains()), to_numpy(b.chain_probs()));
          },
          py::arg("token_ids"), py::arg("num_tokens"), py::arg("num_sampled"), py::arg("k"), py::arg("global_cache"),
          py::arg("generation"), py::arg("min_prob") = 0.0f, py::arg("max_unseen") = 0, py::arg("now") = 0.0,
          py::arg("strict") = true,
          "One step: returns (offsets int32[rows + 1], chain tokens int32, chain path probabilities float32).")
      .def("events", [](const SuffixRowBatch& b) { return events_of(b.tracker()); })
      .def("ended", [](const SuffixRowBatch& b) { return b.tracker().ended(); })
      .def("request", [](const SuffixRowBatch& b, int64_t id) { return request_of(b.tracker(), id); }, py::arg("id"))
      .def_property_readonly("tracked", [](const SuffixRowBatch& b) { return b.tracker().tracked(); })
      .def_property_readonly("parked_tokens", [](const SuffixRowBatch& b) { return b.tracker().parked_tokens(); })
      .def_property_readonly("refusal", [](const SuffixRowBatch& b) { return b.tracker().refusal(); })
      .def_property_readonly("calibration", &SuffixRowBatch::calibration, py::return_value_policy::reference_internal,
                             "The batch's MatchCalibration (live; updated by every step while learn is on).")
      .def("memory_bytes", &SuffixRowBatch::memory_bytes);

  m.def(
      "best_path",
      [](const std::vector<int32_t>& parents, const std::vector<float>& probs, int32_t k) {
        if (parents.size() != probs.size()) throw py::value_error("best_path: parents and probs differ in length");
        return specdec::suffix::best_path(parents, probs, k);
      },
      py::arg("parents"), py::arg("probs"), py::arg("k"),
      "Node indices of the best root-to-leaf path (max summed probability), at most k deep.");
}

}  // namespace specdec
