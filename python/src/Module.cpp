//===- Module.cpp - fa4._fa4: the Python extension over fa4's C++ API -----===//
//
// The compiler half of the `fa4` package: compile a variant in process
// (fa4::compileVariant, with the compile cache), show its code and IR, and
// check a variant or a launch's sizes without compiling. Launches are not
// here: a kernel runs through the C API (libfa4rt.so, bound by fa4/_capi.py),
// the one binding of the runtime, which the GPU machine (where this
// extension, built against LLVM, cannot load) uses too. Everything Pythonic
// (argument defaults, torch, the custom op) lives in fa4/__init__.py; every
// failure here becomes an fa4.CompileError or fa4.LaunchError carrying fa4's
// message.
//
// This file alone is built with C++ exceptions and RTTI (nanobind needs
// both); the fa4 libraries below it have neither and never see an exception.
//
//===----------------------------------------------------------------------===//

#include "fa4/Runtime/Runtime.h"
#include "fa4/Target/Target.h"
#include "fa4/Driver/Compile.h"
#include "fa4/Driver/ToolSession.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>
#include <stdexcept>

namespace nb = nanobind;
using namespace mlir::fa4;

namespace {

struct CompileFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct LaunchFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One compilation at a time (compile, ir): LLVM's NVPTX target set-up and
/// the pipeline's command-line-backed options are process-wide.
std::mutex compiling;

/// A compiled kernel with the variant (or the entry IR) and options it came
/// from (for ir()).
struct PyKernel {
  Variant variant;
  std::optional<std::string> entry;
  std::string target;
  double rescaleThreshold = 8.0;
  double exp2EmulationFraction = target::kTargetExp2EmulationFraction;
  int64_t smCount = 0;
  /// Blackwell's CTA pairs (docs/TwoCta.md).
  Toggle twoCta = Toggle::Auto;
  runtime::Kernel kernel;
  bool fromCache = false;

  void options(PipelineOptions &options) const {
    options.target = target;
    options.rescaleThreshold = rescaleThreshold;
    options.exp2EmulationFraction = exp2EmulationFraction;
    options.smCount = smCount;
    options.twoCta = twoCta;
  }
};

/// `compile()` (an llvm::Expected of a kernel, or of IR text) run without
/// the GIL, one compilation at a time, its value moved into `into`; its
/// error raised as CompileFailure.
template <typename K, typename Compile>
void compileWithoutGil(K &into, Compile compile) {
  std::optional<std::string> failure;
  {
    nb::gil_scoped_release released;
    std::lock_guard<std::mutex> lock(compiling);
    llvm::Expected<K> kernel = compile();
    if (kernel)
      into = std::move(*kernel);
    else
      failure = llvm::toString(kernel.takeError());
  }
  if (failure)
    throw CompileFailure(*failure);
}

/// Sets the options of `result` (its variant or entry IR given) and compiles
/// it, without the GIL, one compilation at a time.
void finish(PyKernel &result, const std::string &target, bool cache,
            double rescaleThreshold, double exp2EmulationFraction,
            int64_t smCount) {
  result.target = target;
  result.rescaleThreshold = rescaleThreshold;
  result.exp2EmulationFraction = exp2EmulationFraction;
  result.smCount = smCount;
  PipelineOptions options;
  result.options(options);
  compileWithoutGil(result.kernel, [&] {
    return result.entry
               ? compileEntry(*result.entry, options, cache, &result.fromCache)
               : compileVariant(result.variant, options, cache,
                                &result.fromCache);
  });
}

Variant variantOf(int64_t headDim, int64_t qHeads, int64_t kvHeads,
                  const std::string &mask, int64_t windowLeft,
                  int64_t windowRight, const std::string &dtype, bool lse,
                  std::optional<double> scale, double softcap) {
  std::optional<MaskKind> kind = symbolizeMaskKind(mask);
  if (!kind)
    throw CompileFailure("mask must be none, causal or window, got '" + mask + "'");
  Variant variant;
  variant.headDim = headDim;
  variant.qHeads = qHeads;
  variant.kvHeads = kvHeads;
  variant.mask = *kind;
  variant.windowLeft = windowLeft;
  variant.windowRight = windowRight;
  variant.dtype = dtype;
  variant.lse = lse;
  variant.scale = scale;
  variant.softcap = softcap;
  return variant;
}

PyKernel compile(int64_t headDim, int64_t qHeads, int64_t kvHeads,
                 const std::string &mask, int64_t windowLeft,
                 int64_t windowRight, const std::string &dtype, bool lse,
                 std::optional<double> scale, double softcap,
                 const std::string &target, bool cache, double rescaleThreshold,
                 double exp2EmulationFraction, int64_t smCount, bool seqUsedK,
                 int64_t pageSize, int64_t numSplits, bool varlen,
                 int64_t valueHeadDim, const std::string &twoCta) {
  PyKernel result;
  if (twoCta == "on")
    result.twoCta = Toggle::On;
  else if (twoCta == "off")
    result.twoCta = Toggle::Off;
  else if (twoCta != "auto")
    throw CompileFailure("two_cta must be auto, on or off, got '" + twoCta + "'");
  result.variant = variantOf(headDim, qHeads, kvHeads, mask, windowLeft,
                             windowRight, dtype, lse, scale, softcap);
  result.variant.valueHeadDim = valueHeadDim;
  result.variant.seqUsedK = seqUsedK;
  result.variant.pageSize = pageSize;
  result.variant.numSplits = numSplits;
  result.variant.varlen = varlen;
  finish(result, target, cache, rescaleThreshold, exp2EmulationFraction, smCount);
  return result;
}

/// The backward of a variant compiled (fa4::compileBackward): its three
/// kernels in one cubin and PTX, and their manifest of kind "backward".
struct PyBackward {
  Variant variant;
  runtime::BackwardKernel kernel;
  bool fromCache = false;
};

/// The backward kernels `compile` (a call of fa4::compileBackward or
/// compileBackwardEntry, given the options and where to say whether the
/// cache held them) compiles with the GIL released, one compile at a time;
/// its error raised as CompileFailure.
template <typename Compile>
void compileBackwardInto(PyBackward &result, const std::string &target,
                         int64_t smCount, Compile compile) {
  PipelineOptions options;
  options.target = target;
  options.smCount = smCount;
  compileWithoutGil(result.kernel,
                    [&] { return compile(options, &result.fromCache); });
}

PyBackward compileBackwardVariant(int64_t headDim, int64_t qHeads,
                                  int64_t kvHeads, const std::string &mask,
                                  int64_t windowLeft, int64_t windowRight,
                                  const std::string &dtype,
                                  std::optional<double> scale, double softcap,
                                  const std::string &target, bool cache,
                                  int64_t smCount, bool deterministic) {
  PyBackward result;
  result.variant = variantOf(headDim, qHeads, kvHeads, mask, windowLeft,
                             windowRight, dtype, /*lse=*/false, scale, softcap);
  result.variant.backward = true;
  result.variant.deterministic = deterministic;
  compileBackwardInto(result, target, smCount,
                      [&](const PipelineOptions &options, bool *fromCache) {
                        return compileBackward(result.variant, options, cache,
                                               fromCache);
                      });
  return result;
}

/// The backward of entry IR compiled (fa4::compileBackwardEntry): a
/// backward entry, or the backward a forward entry's attention derives.
PyBackward compileBackwardIr(const std::string &entry,
                             const std::string &target, bool cache,
                             int64_t smCount, bool deterministic) {
  PyBackward result;
  compileBackwardInto(result, target, smCount,
                      [&](const PipelineOptions &options, bool *fromCache) {
                        return compileBackwardEntry(entry, deterministic,
                                                    options, cache, fromCache);
                      });
  return result;
}

/// fa4::derivedEntryIr: a forward entry's backward entry, or (`withLse`)
/// the forward made to write its LSE, as text.
std::string deriveIr(const std::string &entry, bool deterministic,
                     bool withLse) {
  std::string text;
  compileWithoutGil(
      text, [&] { return derivedEntryIr(entry, deterministic, withLse); });
  return text;
}

/// Runs the verifier on a variant's entry IR without compiling it: what
/// compile() would refuse first, refused the same way (for callers that
/// must answer without a kernel: torch's fake tensors, empty problems).
void verifyVariant(int64_t headDim, int64_t qHeads, int64_t kvHeads,
                   const std::string &mask, int64_t windowLeft,
                   int64_t windowRight, const std::string &dtype, bool lse,
                   std::optional<double> scale, double softcap,
                   int64_t valueHeadDim) {
  Variant variant = variantOf(headDim, qHeads, kvHeads, mask, windowLeft,
                              windowRight, dtype, lse, scale, softcap);
  variant.valueHeadDim = valueHeadDim;
  if (llvm::Error refused = mlir::fa4::checkVariant(variant))
    throw CompileFailure(llvm::toString(std::move(refused)));
  std::string diagnostics;
  {
    nb::gil_scoped_release released;
    ToolSession session;
    mlir::ScopedDiagnosticHandler collect(
        &session.getContext(), [&](mlir::Diagnostic &diagnostic) {
          diagnostics += (diagnostics.empty() ? "error: " : "\nerror: ") + diagnostic.str();
          return mlir::success();
        });
    if (buildVariantModule(session.getContext(), variant))
      return;
  }
  throw CompileFailure("the variant does not verify:\n" + diagnostics);
}

PyKernel compileIr(const std::string &entry, const std::string &target,
                   bool cache, double rescaleThreshold,
                   double exp2EmulationFraction, int64_t smCount) {
  PyKernel result;
  result.entry = entry;
  finish(result, target, cache, rescaleThreshold, exp2EmulationFraction, smCount);
  return result;
}

std::string ir(const PyKernel &kernel, const std::string &stage) {
  PipelineOptions options;
  kernel.options(options);
  std::string text;
  compileWithoutGil(text, [&] {
    return kernel.entry ? entryIr(*kernel.entry, options, stage)
                        : variantIr(kernel.variant, options, stage);
  });
  return text;
}

/// The runtime's limits on a launch's batch and sequence lengths for a
/// variant's head counts and head dim, checked before a caller copies
/// tensors of those sizes, and by the torch op's fake implementation, which
/// has no kernel.
void checkShapes(int64_t headDim, int64_t qHeads, int64_t kvHeads, int64_t batch,
                 int64_t seqQ, int64_t seqK, int64_t valueHeadDim) {
  runtime::Manifest manifest;
  manifest.headDim = headDim;
  manifest.valueHeadDim = valueHeadDim;
  manifest.qHeads = qHeads;
  manifest.kvHeads = kvHeads;
  runtime::Shapes shapes;
  shapes.batch = batch;
  shapes.seqQ = seqQ;
  shapes.seqK = seqK;
  if (llvm::Error refused = runtime::checkShapes(manifest, shapes))
    throw LaunchFailure(llvm::toString(std::move(refused)));
}

} // namespace

NB_MODULE(_fa4, m) {
  m.doc() = "fa4's native layer: compile attention variants (use the fa4 "
            "package, not this module; launches go through fa4._capi)";
  nb::object base = nb::module_::import_("builtins").attr("RuntimeError");
  nb::exception<CompileFailure>(m, "CompileError", base.ptr());
  // A launch's limits (check_shapes) fail as the launches themselves do,
  // with the C API binding's LaunchError: there is one fa4.LaunchError.
  nb::object launchError = nb::module_::import_("fa4._capi").attr("LaunchError");
  m.attr("LaunchError") = launchError;
  nb::register_exception_translator(
      [](const std::exception_ptr &thrown, void *type) {
        try {
          std::rethrow_exception(thrown);
        } catch (const LaunchFailure &failure) {
          PyErr_SetString(static_cast<PyObject *>(type), failure.what());
        }
      },
      launchError.release().ptr());

  nb::class_<PyKernel>(m, "Kernel")
      .def_prop_ro("cubin",
                   [](const PyKernel &k) {
                     return nb::bytes(reinterpret_cast<const char *>(k.kernel.cubin.data()),
                                      k.kernel.cubin.size());
                   })
      .def_prop_ro("ptx", [](const PyKernel &k) { return k.kernel.ptx; })
      .def_prop_ro("manifest_json", [](const PyKernel &k) { return k.kernel.manifestJson; })
      .def_prop_ro("from_cache", [](const PyKernel &k) { return k.fromCache; })
      .def("ir", &ir, nb::arg("stage"));

  nb::class_<PyBackward>(m, "BackwardKernel")
      .def_prop_ro("cubin",
                   [](const PyBackward &k) {
                     return nb::bytes(reinterpret_cast<const char *>(k.kernel.cubin.data()),
                                      k.kernel.cubin.size());
                   })
      .def_prop_ro("ptx", [](const PyBackward &k) { return k.kernel.ptx; })
      .def_prop_ro("manifest_json",
                   [](const PyBackward &k) { return k.kernel.manifestJson; })
      .def_prop_ro("from_cache", [](const PyBackward &k) { return k.fromCache; });

  m.def("compile", &compile, nb::arg("head_dim"), nb::arg("q_heads"),
        nb::arg("kv_heads"), nb::arg("mask"), nb::arg("window_left"),
        nb::arg("window_right"), nb::arg("dtype"), nb::arg("lse"),
        nb::arg("scale").none(), nb::arg("softcap"), nb::arg("target"),
        nb::arg("cache"), nb::arg("rescale_threshold"),
        nb::arg("exp2_emulation_fraction"), nb::arg("sm_count"),
        nb::arg("seqused_k") = false, nb::arg("page_size") = 0,
        nb::arg("num_splits") = 1, nb::arg("varlen") = false,
        nb::arg("v_head_dim") = 0, nb::arg("two_cta") = "auto");
  m.def("compile_backward", &compileBackwardVariant, nb::arg("head_dim"),
        nb::arg("q_heads"), nb::arg("kv_heads"), nb::arg("mask"),
        nb::arg("window_left"), nb::arg("window_right"), nb::arg("dtype"),
        nb::arg("scale").none(), nb::arg("softcap"), nb::arg("target"),
        nb::arg("cache"), nb::arg("sm_count"), nb::arg("deterministic"));
  m.def("compile_backward_ir", &compileBackwardIr, nb::arg("ir"),
        nb::arg("target"), nb::arg("cache"), nb::arg("sm_count"),
        nb::arg("deterministic"));
  m.def("derive_ir", &deriveIr, nb::arg("ir"), nb::arg("deterministic"),
        nb::arg("with_lse"));
  m.def("compile_ir", &compileIr, nb::arg("ir"), nb::arg("target"),
        nb::arg("cache"), nb::arg("rescale_threshold"),
        nb::arg("exp2_emulation_fraction"), nb::arg("sm_count"));
  m.def("check_variant", &verifyVariant, nb::arg("head_dim"),
        nb::arg("q_heads"), nb::arg("kv_heads"), nb::arg("mask"),
        nb::arg("window_left"), nb::arg("window_right"), nb::arg("dtype"),
        nb::arg("lse"), nb::arg("scale").none(), nb::arg("softcap"),
        nb::arg("v_head_dim") = 0);
  m.def("check_shapes", &checkShapes, nb::arg("head_dim"), nb::arg("q_heads"),
        nb::arg("kv_heads"), nb::arg("batch"), nb::arg("seq_q"), nb::arg("seq_k"),
        nb::arg("v_head_dim") = 0);
  m.def("ir_stages", &variantIrStages);
  // The chip table (fa4/Target/Target.h), the first the default: the
  // Python layer names no chip itself.
  m.def("chips", [] {
    nb::list chips;
    for (const target::ChipInfo &chip : target::chips()) {
      nb::dict row;
      row["name"] = chip.name.str();
      row["family"] = chip.familyName.str();
      row["sm_count"] = chip.smCount;
      row["compute_capability"] = nb::make_tuple(chip.computeMajor, chip.computeMinor);
      row["emulated"] = chip.emulated;
      // Whether the backward compiles to kernels for the chip; how far its
      // schedule goes otherwise ("tile" or "schedule", which fa4-sim runs).
      using target::BackwardLevel;
      row["backward"] = chip.backward == BackwardLevel::Kernels;
      row["backward_level"] =
          chip.backward == BackwardLevel::Kernels    ? "kernels"
          : chip.backward == BackwardLevel::Schedule ? "schedule"
                                                     : "tile";
      chips.append(row);
    }
    return chips;
  });
}
