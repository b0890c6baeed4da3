// pybind11 bindings of the suffix automaton (csrc/suffix/): classes SuffixAutomaton and
// MatchCalibration, build_suffix_draft(), and (through bind_rows) the engine-row classes.
//
// Token arrays are read in place (zero-copy) from any 1-D C-contiguous int32 buffer: numpy arrays
// directly, CPU torch tensors through Tensor.numpy() (a view). Anything else is refused with a
// TypeError/ValueError that says what was expected, never silently converted.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/to_numpy.h"
#include "suffix/draft_tree.h"
#include "suffix/suffix_automaton.h"

namespace py = pybind11;
using specdec::bindings::to_numpy;
using specdec::suffix::Draft;
using specdec::suffix::DraftParams;
using specdec::suffix::DraftSource;
using specdec::suffix::DraftCache;
using specdec::suffix::Match;
using specdec::suffix::MatchCalibration;
using specdec::suffix::SuffixAutomaton;

namespace {

// A read-only view of a 1-D int32 buffer; holds the Python buffer (and so the memory) alive.
struct Int32View {
  py::buffer_info info;
  const int32_t* data() const { return static_cast<const int32_t*>(info.ptr); }
  size_t size() const { return static_cast<size_t>(info.size); }
};

std::string type_name(const py::handle& obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

Int32View as_int32(py::object obj, const char* what) {
  if (!py::isinstance<py::buffer>(obj) && py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "numpy")) {
    const std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu") {
      throw py::type_error(std::string(what) + ": expected a CPU int32 tensor, got a tensor on device '" + device + "'");
    }
    obj = obj.attr("numpy")();
  }
  if (!py::isinstance<py::buffer>(obj)) {
    throw py::type_error(std::string(what) + ": expected a 1-D contiguous int32 numpy array or CPU torch tensor, got " +
                         type_name(obj));
  }
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  std::string fmt = info.format;
  if (!fmt.empty() && (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')) fmt = fmt.substr(1);
  if (info.itemsize != 4 || !(fmt == "i" || (fmt == "l" && sizeof(long) == 4))) {
    throw py::type_error(std::string(what) + ": expected dtype int32, got buffer format '" + info.format +
                         "' with itemsize " + std::to_string(info.itemsize) + " (convert with .astype(np.int32) / .to(torch.int32))");
  }
  if (info.ndim != 1) {
    throw py::value_error(std::string(what) + ": expected a 1-D array, got " + std::to_string(info.ndim) + " dimensions");
  }
  if (info.size > 1 && info.strides[0] != 4) {
    throw py::value_error(std::string(what) + ": expected a contiguous array (stride 4 bytes), got stride " +
                          std::to_string(info.strides[0]) + " (use np.ascontiguousarray / .contiguous())");
  }
  return Int32View{std::move(info)};
}

py::tuple transitions(const SuffixAutomaton& sam, int32_t state) {
  sam.check_state(state);
  std::vector<std::pair<int32_t, int32_t>> edges;
  sam.for_each_transition(state, [&](int32_t tok, int32_t dst) {
    if (tok != SuffixAutomaton::kSeparator) edges.emplace_back(tok, dst);
  });
  std::sort(edges.begin(), edges.end());
  std::vector<int32_t> toks, dsts, counts;
  for (const auto& e : edges) {
    toks.push_back(e.first);
    dsts.push_back(e.second);
    counts.push_back(sam.count(e.second));
  }
  return py::make_tuple(to_numpy(toks), to_numpy(dsts), to_numpy(counts));
}

DraftCache cache_of(const std::string& name) {
  if (name == "request") return DraftCache::kRequest;
  if (name == "global") return DraftCache::kGlobal;
  if (name == "pooled") return DraftCache::kPooled;
  throw py::value_error("cache must be 'request', 'global' or 'pooled', got '" + name + "'");
}

// A 1-D C-contiguous numpy array of exactly dtype T and length n (n < 0: any length), never converted.
template <class T>
py::array_t<T, py::array::c_style> strict(const py::object& obj, const char* what, py::ssize_t n = -1) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(what) + ": expected a numpy array, got " + type_name(obj));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>())) {
    throw py::type_error(std::string(what) + ": expected dtype " + std::string(py::str(py::dtype::of<T>())) + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (a.ndim() != 1 || !(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) + ": expected a 1-D contiguous array");
  }
  if (n >= 0 && a.shape(0) != n) {
    throw py::value_error(std::string(what) + ": expected " + std::to_string(n) + " entries, got " +
                          std::to_string(a.shape(0)));
  }
  return py::reinterpret_borrow<py::array_t<T, py::array::c_style>>(a);
}

template <class T, size_t N>
py::array_t<T> array_of(const std::array<T, N>& v) {
  return to_numpy(std::vector<T>(v.begin(), v.end()));
}

void bind_calibration(py::module_& m) {
  py::class_<MatchCalibration>(m, "MatchCalibration",
                               "Online per-cell calibration of suffix-draft conditionals (csrc/suffix/match_calibration.h).")
      .def(py::init<double, double>(), py::arg("prior_weight") = 4.0, py::arg("max_weight") = 4096.0)
      .def_static(
          "cell", [](const std::string& cache, int32_t ctx_len, int32_t count, int32_t total) {
            if (ctx_len < 1 || count < 1 || count > total) {
              throw py::value_error("cell: need ctx_len >= 1 and 1 <= count <= total");
            }
            return MatchCalibration::cell(cache_of(cache), ctx_len, count, total);
          },
          py::arg("cache"), py::arg("ctx_len"), py::arg("count"), py::arg("total"))
      .def(
          "observe",
          [](MatchCalibration& c, const py::object& tokens, const py::object& parents, const py::object& cells,
             const py::object& raws, const py::object& committed) {
            auto t = strict<int64_t>(tokens, "tokens");
            const py::ssize_t n = t.shape(0);
            auto p = strict<int32_t>(parents, "parents", n);
            auto cl = strict<int32_t>(cells, "cells", n);
            auto r = strict<float>(raws, "raws", n);
            Int32View k = as_int32(committed, "committed");
            std::vector<int32_t> t32(t.data(), t.data() + n);
            c.observe(t32.data(), p.data(), cl.data(), r.data(), static_cast<size_t>(n), k.data(), k.size());
          },
          py::arg("tokens"), py::arg("parents"), py::arg("cells"), py::arg("raws"), py::arg("committed"),
          "Score a draft tree (tokens int64, parents/cells int32, raws float32) against the tokens committed after it.")
      .def("ratios", [](const MatchCalibration& c) {
            std::vector<double> r(MatchCalibration::kCells);
            for (int32_t i = 0; i < MatchCalibration::kCells; ++i) r[i] = c.ratio(i);
            return to_numpy(r);
          }, "ratio per cell: (accepted + prior) / (predicted + prior).")
      .def_property_readonly("predicted", [](const MatchCalibration& c) { return array_of(c.predicted()); })
      .def_property_readonly("accepted", [](const MatchCalibration& c) { return array_of(c.accepted()); })
      .def_property_readonly("tested", [](const MatchCalibration& c) { return array_of(c.tested()); })
      .def_property_readonly("prior_weight", &MatchCalibration::prior_weight)
      .def_property_readonly("max_weight", &MatchCalibration::max_weight)
      .def_readonly_static("num_cells", &MatchCalibration::kCells)
      .def_readonly_static("length_buckets", &MatchCalibration::kLengthBuckets)
      .def_readonly_static("evidence_buckets", &MatchCalibration::kEvidenceBuckets)
      .def_readonly_static("share_buckets", &MatchCalibration::kShareBuckets);
}

}  // namespace

namespace specdec {

void bind_rows(py::module_& m);  // csrc/bindings/rows.cpp

void bind_suffix(py::module_& m) {
  bind_calibration(m);
  bind_rows(m);
  py::class_<SuffixAutomaton>(m, "SuffixAutomaton",
                              "Online suffix automaton over int32 token ids with exact occurrence counts.\n\n"
                              "Token arrays: 1-D contiguous int32 numpy arrays or CPU torch tensors (read in place).\n"
                              "States are ints (0 = root). A match is (length, state).")
      .def(py::init<int64_t, int32_t>(), py::arg("vocab_size"), py::arg("walk_limit") = SuffixAutomaton::kWalkLimit,
           "ids must lie in [0, vocab_size); counts move to a link-cut forest after the first suffix-link path "
           "longer than walk_limit states (0: from the start)")
      .def(
          "extend", [](SuffixAutomaton& s, py::object tokens) {
            Int32View v = as_int32(tokens, "tokens");
            s.extend(v.data(), v.size());
          },
          py::arg("tokens"), "Append tokens (amortised O(1) each; counts stay exact).")
      .def(
          "add_document", [](SuffixAutomaton& s, py::object tokens) {
            Int32View v = as_int32(tokens, "document");
            s.add_document(v.data(), v.size());
          },
          py::arg("tokens"), "Append a whole document and a separator: no match spans two documents.")
      .def(
          "longest_match", [](const SuffixAutomaton& s, py::object ctx) {
            Int32View v = as_int32(ctx, "context");
            const Match mt = s.longest_match(v.data(), v.size());
            return py::make_tuple(mt.length, mt.state);
          },
          py::arg("context"), "(length, state) of the longest suffix of context that occurs in the text.")
      .def(
          "advance", [](const SuffixAutomaton& s, int32_t length, int32_t state, py::object tokens) {
            Int32View v = as_int32(tokens, "tokens");
            const Match mt = s.advance(Match{length, state}, v.data(), v.size());
            return py::make_tuple(mt.length, mt.state);
          },
          py::arg("length"), py::arg("state"), py::arg("tokens"),
          "Continue a (length, state) match over more context tokens; valid across later extends.")
      .def(
          "repeat_match", [](const SuffixAutomaton& s) {
            const Match mt = s.repeat_match();
            return py::make_tuple(mt.length, mt.state);
          },
          "(length, state) of the longest suffix of the text that also occurs earlier in it.")
      .def("count", &SuffixAutomaton::count, py::arg("state"), "Occurrences (end positions) of the state's strings.")
      .def("transition", &SuffixAutomaton::transition, py::arg("state"), py::arg("token"), "Target state or -1.")
      .def("transitions", &transitions, py::arg("state"),
           "(tokens, targets, counts) int32 arrays of the state's transitions, sorted by token, separators excluded.")
      .def("state_len", [](const SuffixAutomaton& s, int32_t st) { s.check_state(st); return s.state_len(st); }, py::arg("state"))
      .def("state_link", [](const SuffixAutomaton& s, int32_t st) { s.check_state(st); return s.state_link(st); }, py::arg("state"))
      .def("memory_bytes", &SuffixAutomaton::memory_bytes, "Bytes held (capacities included).")
      .def("check_integrity", &SuffixAutomaton::check_integrity, "Verify invariants and counts; raises RuntimeError.")
      .def_property_readonly("vocab_size", &SuffixAutomaton::vocab_size)
      .def_property_readonly("counts_linked", &SuffixAutomaton::counts_linked,
                             "Whether the counts moved to the link-cut forest (repetitive text met).")
      .def_property_readonly("num_states", &SuffixAutomaton::num_states)
      .def_property_readonly("num_transitions", &SuffixAutomaton::num_transitions)
      .def_property_readonly("num_tokens", &SuffixAutomaton::num_tokens, "Tokens indexed, separators included.")
      .def("__len__", &SuffixAutomaton::num_tokens);

  m.def(
      "build_suffix_draft",
      [](const std::vector<py::tuple>& sources, int32_t budget, int32_t min_match_len, double min_prob,
         int32_t max_depth, double depth_factor, double count_prior, const MatchCalibration* calibration,
         const std::string& cache, bool features) -> py::tuple {
        std::vector<DraftSource> srcs;
        for (const py::tuple& t : sources) {
          if (t.size() != 3) throw py::value_error("build_suffix_draft: each source must be (automaton, length, state)");
          srcs.push_back(DraftSource{t[0].cast<const SuffixAutomaton*>(), Match{t[1].cast<int32_t>(), t[2].cast<int32_t>()}});
        }
        DraftParams p{budget, min_match_len, min_prob, max_depth, depth_factor, count_prior};
        p.calibration = calibration;
        p.cache = cache_of(cache);
        const Draft d = specdec::suffix::build_draft(srcs, p);
        // Tokens as int64: DraftTree holds LongTensor tokens, so torch.from_numpy needs no cast.
        py::array_t<int64_t> tokens = to_numpy(std::vector<int64_t>(d.tokens.begin(), d.tokens.end()));
        if (!features) return py::make_tuple(tokens, to_numpy(d.parents), to_numpy(d.probs));
        return py::make_tuple(tokens, to_numpy(d.parents), to_numpy(d.probs), to_numpy(d.cells), to_numpy(d.raws),
                              to_numpy(d.ctx_lens));
      },
      py::arg("sources"), py::arg("budget"), py::arg("min_match_len") = 1, py::arg("min_prob") = 0.05,
      py::arg("max_depth") = 32, py::arg("depth_factor") = 4.0, py::arg("count_prior") = 0.0,
      py::arg("calibration") = nullptr, py::arg("cache") = "request", py::arg("features") = false,
      "Best-first draft tree over [(automaton, match_length, match_state), ...].\n"
      "Returns (tokens int64[n], parents int32[n], probs float32[n]); probs[i] estimates P(node i accepted).\n"
      "With a MatchCalibration the conditionals are calibrated per cell (cache names the cell's cache);\n"
      "features=True adds (cells int32[n], raws float32[n], ctx_lens int32[n]).");
}

}  // namespace specdec
