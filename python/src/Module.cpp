//===- Module.cpp - fa4._fa4: the Python extension over fa4's C++ API -----===//
//
// The thin native layer of the `fa4` package: compile a variant in process
// (fa4::compileVariant, with the compile cache), show its code and IR, and
// launch it on tensors handed over by DLPack (torch tensors, numpy arrays):
// CPU tensors on the emulator backend, CUDA tensors on the driver backend in
// the caller's stream. Everything Pythonic (argument defaults, torch, the
// custom op) lives in fa4/__init__.py; every failure here becomes an
// fa4.CompileError or fa4.LaunchError carrying fa4's message.
//
// This file alone is built with C++ exceptions and RTTI (nanobind needs
// both); the fa4 libraries below it have neither and never see an exception.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Target/Target.h"
#include "fa4/Driver/Compile.h"
#include "fa4/Driver/ToolSession.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

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
  double exp2EmulationFraction = 0.125;
  int64_t smCount = 0;
  runtime::Kernel kernel;
  bool fromCache = false;

  void options(PipelineOptions &options) const {
    options.target = target;
    options.rescaleThreshold = rescaleThreshold;
    options.exp2EmulationFraction = exp2EmulationFraction;
    options.smCount = smCount;
  }
};

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
  std::optional<std::string> failure;
  {
    nb::gil_scoped_release released;
    std::lock_guard<std::mutex> lock(compiling);
    llvm::Expected<runtime::Kernel> kernel =
        result.entry
            ? compileEntry(*result.entry, options, cache, &result.fromCache)
            : compileVariant(result.variant, options, cache, &result.fromCache);
    if (kernel)
      result.kernel = std::move(*kernel);
    else
      failure = llvm::toString(kernel.takeError());
  }
  if (failure)
    throw CompileFailure(*failure);
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
                 double exp2EmulationFraction, int64_t smCount) {
  PyKernel result;
  result.variant = variantOf(headDim, qHeads, kvHeads, mask, windowLeft,
                             windowRight, dtype, lse, scale, softcap);
  finish(result, target, cache, rescaleThreshold, exp2EmulationFraction, smCount);
  return result;
}

/// Runs the verifier on a variant's entry IR without compiling it: what
/// compile() would refuse first, refused the same way (for callers that
/// must answer without a kernel: torch's fake tensors, empty problems).
void verifyVariant(int64_t headDim, int64_t qHeads, int64_t kvHeads,
                   const std::string &mask, int64_t windowLeft,
                   int64_t windowRight, const std::string &dtype, bool lse,
                   std::optional<double> scale, double softcap) {
  Variant variant = variantOf(headDim, qHeads, kvHeads, mask, windowLeft,
                              windowRight, dtype, lse, scale, softcap);
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
  std::optional<std::string> failure;
  {
    nb::gil_scoped_release released;
    std::lock_guard<std::mutex> lock(compiling);
    llvm::Expected<std::string> ir =
        kernel.entry ? entryIr(*kernel.entry, options, stage)
                     : variantIr(kernel.variant, options, stage);
    if (ir)
      text = std::move(*ir);
    else
      failure = llvm::toString(ir.takeError());
  }
  if (failure)
    throw CompileFailure(*failure);
  return text;
}

using Array = nb::ndarray<>;

/// fa4's name of an array's element type ("fp16", "bf16", "f32"), or the
/// DLPack code for the error message.
std::string dtypeName(const nb::dlpack::dtype &type) {
  using Code = nb::dlpack::dtype_code;
  if (type.lanes == 1 && type.bits == 16 && type.code == uint8_t(Code::Float))
    return "fp16";
  if (type.lanes == 1 && type.bits == 16 && type.code == uint8_t(Code::Bfloat))
    return "bf16";
  if (type.lanes == 1 && type.bits == 32 && type.code == uint8_t(Code::Float))
    return "f32";
  return "a " + std::to_string(type.bits) + "-bit type of DLPack code " +
         std::to_string(type.code);
}

/// An extra's element type as MLIR names it (what the manifest's extras
/// say), or a description for the error message.
std::string extraDtypeName(const nb::dlpack::dtype &type) {
  using Code = nb::dlpack::dtype_code;
  if (type.lanes != 1)
    return "a vector type";
  if (type.code == uint8_t(Code::Float) && (type.bits == 16 || type.bits == 32 ||
                                             type.bits == 64))
    return "f" + std::to_string(type.bits);
  if (type.code == uint8_t(Code::Bfloat) && type.bits == 16)
    return "bf16";
  if (type.code == uint8_t(Code::Int) &&
      (type.bits == 8 || type.bits == 16 || type.bits == 32 || type.bits == 64))
    return "i" + std::to_string(type.bits);
  if (type.code == uint8_t(Code::Bool))
    return "i1";
  return "a " + std::to_string(type.bits) + "-bit type of DLPack code " +
         std::to_string(type.code);
}

runtime::Tensor tensorOf(const Array &array) {
  runtime::Tensor tensor;
  tensor.address = reinterpret_cast<uint64_t>(array.data());
  tensor.dtype = dtypeName(array.dtype());
  for (size_t i = 0; i < array.ndim(); ++i) {
    tensor.sizes.push_back(array.shape(i));
    tensor.strides.push_back(array.stride(i));
  }
  return tensor;
}

/// The extras as the runtime takes them (dtype as MLIR names it).
std::vector<runtime::Tensor> extrasOf(const std::vector<Array> &arrays) {
  std::vector<runtime::Tensor> extras;
  for (const Array &array : arrays) {
    extras.push_back(tensorOf(array));
    extras.back().dtype = extraDtypeName(array.dtype());
  }
  return extras;
}

int64_t elementBytes(const runtime::Tensor &tensor) {
  return tensor.dtype == "f32" ? 4 : 2;
}

/// The bytes from a tensor's base address to the end of its last element,
/// for strides checkTensors accepted (positive, or any on an axis of size 1,
/// which is never stepped along).
int64_t spanBytes(const runtime::Tensor &tensor) {
  int64_t last = 0;
  for (size_t i = 0; i < tensor.sizes.size(); ++i)
    if (tensor.sizes[i] > 1)
      last += (tensor.sizes[i] - 1) * tensor.strides[i];
  return (last + 1) * elementBytes(tensor);
}

/// Copies every element of `from` into `to` (same sizes, any strides with a
/// contiguous innermost axis; `toBase`/`fromBase` are host pointers of the
/// tensors' addresses).
void copyRows(const runtime::Tensor &from, const uint8_t *fromBase,
              const runtime::Tensor &to, uint8_t *toBase) {
  int64_t element = elementBytes(from);
  size_t rank = from.sizes.size();
  int64_t rowBytes = from.sizes[rank - 1] * element;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i)
    rows *= from.sizes[i];
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rest = row, fromAt = 0, toAt = 0;
    for (size_t i = rank - 1; i-- > 0;) {
      int64_t index = rest % from.sizes[i];
      rest /= from.sizes[i];
      fromAt += index * from.strides[i];
      toAt += index * to.strides[i];
    }
    std::memcpy(toBase + toAt * element, fromBase + fromAt * element, rowBytes);
  }
}

/// Checks that every array lives on `device` (a DLPack device type), all
/// on one device.
void checkDevice(const std::vector<std::pair<const char *, const Array *>> &arrays,
                 int device, const char *where) {
  for (auto [name, array] : arrays)
    if (array && (array->device_type() != device ||
                  array->device_id() != arrays.front().second->device_id()))
      throw LaunchFailure(std::string(name) + ": every tensor must be on the " +
                          where + ", on q's device");
}

/// Runs the kernel on the emulator: the launch is validated on the caller's
/// tensors (so that its messages speak of their strides, alignment and
/// aliasing), the elements are copied into tensors of an emulator device
/// laid out with the caller's strides (a kernel compiled for a static layout
/// takes no other, and the kernel reads through the tensor maps a GPU launch
/// would build), the launch goes through runtime::launch (the path the GPU
/// takes but the last call), and O's and the LSE's elements are copied back
/// (only those: whatever lies between them is not touched).
void launchEmulator(const PyKernel &kernel, const Array &q, const Array &k,
                    const Array &v, const Array &o, const std::optional<Array> &lse,
                    const std::vector<Array> &extraArrays, unsigned workers,
                    uint64_t seed, bool execute) {
  checkDevice({{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"lse", lse ? &*lse : nullptr}},
              nb::device::cpu::value, "CPU");
  for (const Array &extra : extraArrays)
    checkDevice({{"q", &q}, {"extra", &extra}}, nb::device::cpu::value, "CPU");
  runtime::Tensor host[5] = {tensorOf(q), tensorOf(k), tensorOf(v), tensorOf(o),
                             lse ? tensorOf(*lse) : runtime::Tensor()};
  const runtime::Tensor *hostLse = lse ? &host[4] : nullptr;
  int count = hostLse ? 5 : 4;
  llvm::Expected<runtime::Shapes> shapes = runtime::checkTensors(
      kernel.kernel.manifest, host[0], host[1], host[2], host[3], hostLse);
  if (!shapes)
    throw LaunchFailure(llvm::toString(shapes.takeError()));
  // The extras are read as they are: dense and row-major (checkExtras).
  std::vector<runtime::Tensor> hostExtras = extrasOf(extraArrays);
  if (llvm::Error refused = runtime::checkExtras(
          kernel.kernel.manifest, hostExtras, {&host[3], hostLse}, &*shapes))
    throw LaunchFailure(llvm::toString(std::move(refused)));
  std::optional<std::string> failure;
  {
    nb::gil_scoped_release released;
    emu::Device device;
    runtime::Tensor onDevice[5];
    for (int i = 0; i < count; ++i) {
      onDevice[i] = host[i];
      int64_t bytes = spanBytes(host[i]);
      onDevice[i].address = device.allocate(bytes);
      if (i < 3)
        copyRows(host[i], reinterpret_cast<const uint8_t *>(host[i].address),
                 onDevice[i], device.host(onDevice[i].address, bytes));
    }
    std::vector<runtime::Tensor> extras = hostExtras;
    for (runtime::Tensor &extra : extras) {
      int64_t bytes = runtime::extraElementBytes(extra.dtype);
      for (int64_t size : extra.sizes)
        bytes *= size;
      uint64_t address = device.allocate(std::max<int64_t>(bytes, 1));
      std::memcpy(device.host(address, bytes),
                  reinterpret_cast<const void *>(extra.address), bytes);
      extra.address = address;
    }
    if (workers == 0)
      workers = std::max(1u, std::thread::hardware_concurrency());
    std::unique_ptr<runtime::Backend> backend =
        runtime::createEmulatorBackend(device, workers, seed, execute);
    if (llvm::Error refused = runtime::launch(
            *backend, kernel.kernel, onDevice[0], onDevice[1], onDevice[2],
            onDevice[3], hostLse ? &onDevice[4] : nullptr, extras, nullptr))
      failure = llvm::toString(std::move(refused));
    for (int i = 3; !failure && i < count; ++i)
      copyRows(onDevice[i], device.host(onDevice[i].address, spanBytes(host[i])),
               host[i], reinterpret_cast<uint8_t *>(host[i].address));
  }
  if (failure)
    throw LaunchFailure(*failure);
}

/// The runtime's limits on a launch's batch and sequence lengths for a
/// variant's head counts and head dim, checked before a caller copies
/// tensors of those sizes, and by the torch op's fake implementation, which
/// has no kernel.
void checkShapes(int64_t headDim, int64_t qHeads, int64_t kvHeads, int64_t batch,
                 int64_t seqQ, int64_t seqK) {
  runtime::Manifest manifest;
  manifest.headDim = headDim;
  manifest.qHeads = qHeads;
  manifest.kvHeads = kvHeads;
  runtime::Shapes shapes;
  shapes.batch = batch;
  shapes.seqQ = seqQ;
  shapes.seqK = seqK;
  if (llvm::Error refused = runtime::checkShapes(manifest, shapes))
    throw LaunchFailure(llvm::toString(std::move(refused)));
}

/// Launches the kernel on the GPU through the driver, in `stream` (a
/// CUstream; 0 is the legacy default stream).
void launchCuda(const PyKernel &kernel, const Array &q, const Array &k,
                const Array &v, const Array &o, const std::optional<Array> &lse,
                const std::vector<Array> &extraArrays, uintptr_t stream) {
  checkDevice({{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"lse", lse ? &*lse : nullptr}},
              nb::device::cuda::value, "GPU");
  for (const Array &extra : extraArrays)
    checkDevice({{"q", &q}, {"extra", &extra}}, nb::device::cuda::value, "GPU");
  // One backend for the process: the driver is opened and initialised once.
  static std::unique_ptr<runtime::Backend> backend;
  static std::string backendError;
  static std::once_flag opened;
  std::call_once(opened, [] {
    llvm::Expected<std::unique_ptr<runtime::Backend>> cuda =
        runtime::createCudaBackend();
    if (cuda)
      backend = std::move(*cuda);
    else
      backendError = llvm::toString(cuda.takeError());
  });
  if (!backend)
    throw LaunchFailure(backendError);
  runtime::Tensor tl = lse ? tensorOf(*lse) : runtime::Tensor();
  if (llvm::Error refused = runtime::launch(
          *backend, kernel.kernel, tensorOf(q), tensorOf(k), tensorOf(v),
          tensorOf(o), lse ? &tl : nullptr, extrasOf(extraArrays),
          reinterpret_cast<void *>(stream)))
    throw LaunchFailure(llvm::toString(std::move(refused)));
}

} // namespace

NB_MODULE(_fa4, m) {
  m.doc() = "fa4's native layer: compile attention variants, launch them "
            "(use the fa4 package, not this module)";
  nb::object base = nb::module_::import_("builtins").attr("RuntimeError");
  nb::exception<CompileFailure>(m, "CompileError", base.ptr());
  nb::exception<LaunchFailure>(m, "LaunchError", base.ptr());

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

  m.def("compile", &compile, nb::arg("head_dim"), nb::arg("q_heads"),
        nb::arg("kv_heads"), nb::arg("mask"), nb::arg("window_left"),
        nb::arg("window_right"), nb::arg("dtype"), nb::arg("lse"),
        nb::arg("scale").none(), nb::arg("softcap"), nb::arg("target"),
        nb::arg("cache"), nb::arg("rescale_threshold"),
        nb::arg("exp2_emulation_fraction"), nb::arg("sm_count"));
  m.def("compile_ir", &compileIr, nb::arg("ir"), nb::arg("target"),
        nb::arg("cache"), nb::arg("rescale_threshold"),
        nb::arg("exp2_emulation_fraction"), nb::arg("sm_count"));
  m.def("check_variant", &verifyVariant, nb::arg("head_dim"),
        nb::arg("q_heads"), nb::arg("kv_heads"), nb::arg("mask"),
        nb::arg("window_left"), nb::arg("window_right"), nb::arg("dtype"),
        nb::arg("lse"), nb::arg("scale").none(), nb::arg("softcap"));
  m.def("check_shapes", &checkShapes, nb::arg("head_dim"), nb::arg("q_heads"),
        nb::arg("kv_heads"), nb::arg("batch"), nb::arg("seq_q"), nb::arg("seq_k"));
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
      chips.append(row);
    }
    return chips;
  });
  m.def("launch_emulator", &launchEmulator, nb::arg("kernel"), nb::arg("q"),
        nb::arg("k"), nb::arg("v"), nb::arg("o"), nb::arg("lse").none(),
        nb::arg("extras"), nb::arg("workers"), nb::arg("seed"),
        nb::arg("execute") = true);
  m.def("launch_cuda", &launchCuda, nb::arg("kernel"), nb::arg("q"), nb::arg("k"),
        nb::arg("v"), nb::arg("o"), nb::arg("lse").none(), nb::arg("extras"),
        nb::arg("stream"));
}
