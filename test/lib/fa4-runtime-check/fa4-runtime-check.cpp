//===- fa4-runtime-check.cpp - fa4rt end to end on the emulator -----------===//
//
// fa4-runtime-check KERNEL.cubin.json --batch B --seq-q SQ --seq-k SK
//   loads the kernel (runtime::Kernel::load), uploads seeded inputs into an
//   emulator device, launches through runtime::launch on the emulator
//   backend and prints the errors against the float64 reference;
// fa4-runtime-check KERNEL.cubin.json ... --layout bhsd
//   the same with q, k, v and o stored [batch, heads, seq, head_dim] (the
//   tensor maps take the strides);
// fa4-runtime-check KERNEL.cubin.json --break RULE
//   launches with one tensor that breaks RULE and prints the error;
// fa4-runtime-check --cuda
//   creates the CUDA backend and prints what it says;
// fa4-runtime-check --compile [--cache] --batch B --seq-q SQ --seq-k SK
//   compiles hd 64, 4 q heads, 2 kv heads, causal, LSE in process
//   (fa4::compileVariant) and launches that kernel as above;
// fa4-runtime-check --compile --entry FILE ...
//   compiles the entry IR in FILE in process (fa4::compileEntry, what
//   fa4.compile_ir calls) instead;
// fa4-runtime-check KERNEL.cubin.json --rewrite-manifest
//   parses the manifest (runtime::parseManifest) and prints it again
//   (runtime::writeManifest): the text fa4c wrote, when the two agree.
//
//===----------------------------------------------------------------------===//

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Runtime.h"
#include "fa4/Sim/Reference.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Driver/Compile.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"

#include <chrono>
#include "llvm/Support/raw_ostream.h"

using namespace mlir::fa4;
using namespace llvm;

static cl::opt<std::string> manifestPath(cl::Positional, cl::init(""));
static cl::opt<int64_t> batch("batch", cl::init(1));
static cl::opt<int64_t> seqQ("seq-q", cl::init(128));
static cl::opt<int64_t> seqK("seq-k", cl::init(128));
static cl::opt<std::string> breakRule("break", cl::init(""));
static cl::opt<bool> cuda("cuda", cl::init(false));
static cl::opt<bool> compile("compile", cl::init(false));
static cl::opt<bool> useCache("cache", cl::init(false));
static cl::opt<std::string> entryPath("entry", cl::init(""));
static cl::opt<bool> rewriteManifest("rewrite-manifest", cl::init(false));
static cl::opt<std::string> layout("layout", cl::init("bshd"),
                                   cl::desc("Storage of q, k, v and o: bshd (dense "
                                            "[batch, seq, heads, head_dim]) or bhsd "
                                            "([batch, heads, seq, head_dim] storage)"));

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "fa4rt check\n");
  auto fail = [](llvm::Error error) {
    errs() << "error: " << toString(std::move(error)) << "\n";
    return 2;
  };
  if (cuda) {
    llvm::Expected<std::unique_ptr<runtime::Backend>> backend =
        runtime::createCudaBackend();
    outs() << (backend ? std::string("cuda backend: ") + (*backend)->name()
                       : "cuda backend unavailable: " +
                             toString(backend.takeError()))
           << "\n";
    return 0;
  }
  if (rewriteManifest) {
    llvm::Expected<std::string> text =
        readRegularFile(manifestPath, kMaxManifestBytes);
    if (!text)
      return fail(text.takeError());
    llvm::Expected<runtime::Manifest> manifest = runtime::parseManifest(*text);
    if (!manifest)
      return fail(manifest.takeError());
    outs() << runtime::writeManifest(*manifest);
    return 0;
  }
  runtime::Kernel kernel;
  if (compile) {
    Variant variant;
    variant.headDim = 64;
    variant.qHeads = 4;
    variant.kvHeads = 2;
    variant.mask = MaskKind::causal;
    variant.lse = true;
    PipelineOptions options;
    auto started = std::chrono::steady_clock::now();
    std::string entry;
    if (!entryPath.empty()) {
      llvm::Expected<std::string> text =
          readRegularFile(entryPath, kMaxKernelFileBytes);
      if (!text)
        return fail(text.takeError());
      entry = std::move(*text);
    }
    llvm::Expected<runtime::Kernel> compiled =
        entryPath.empty() ? compileVariant(variant, options, useCache)
                          : compileEntry(entry, options, useCache);
    if (!compiled)
      return fail(compiled.takeError());
    kernel = std::move(*compiled);
    std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - started;
    outs() << "compiled in process: " << kernel.cubin.size() << " bytes of cubin, "
           << kernel.manifest.tensorMaps.size() << " tensor maps, "
           << format("%.3f", seconds.count()) << " s\n";
  } else {
    llvm::Expected<runtime::Kernel> loaded =
        runtime::Kernel::load(manifestPath);
    if (!loaded)
      return fail(loaded.takeError());
    kernel = std::move(*loaded);
  }
  const runtime::Manifest &m = kernel.manifest;
  // The float64 reference here is the manifest's attention; a region the
  // kernel inlines is known only from its entry IR (fa4-emu --entry).
  if ((m.scoreMod || m.maskMod) && breakRule.empty()) {
    errs() << "error: the kernel inlines a "
           << (m.scoreMod ? "score_mod" : "mask_mod")
           << " region, which this check's reference cannot evaluate; run it "
              "with fa4-emu --entry <the entry IR>\n";
    return 2;
  }
  bool bf16 = m.dtype == "bf16";
  sim::Problem problem = sim::problemOf(m, batch, seqQ, seqK);
  std::vector<float> q, k, v;
  sim::fillInputs(problem, bf16, 7, sim::InputDistribution::Normal, q, k, v);

  if (layout != "bshd" && layout != "bhsd") {
    errs() << "error: --layout must be bshd or bhsd\n";
    return 2;
  }
  emu::Device device;
  auto tensor = [&](const std::vector<int64_t> &sizes, const std::string &dtype) {
    runtime::Tensor t;
    t.dtype = dtype;
    t.sizes = sizes;
    t.strides.assign(sizes.size(), 1);
    for (size_t i = sizes.size() - 1; i > 0; --i)
      t.strides[i - 1] = t.strides[i] * sizes[i];
    if (layout == "bhsd" && sizes.size() == 4) {
      // [batch, heads, seq, head_dim] storage, seen as [b, s, h, d].
      t.strides[2] = sizes[1] * sizes[3];
      t.strides[1] = sizes[3];
    }
    int64_t elements = t.strides[0] * sizes[0];
    t.address = device.allocate(elements * (dtype == "f32" ? 4 : 2));
    return t;
  };
  // Where element i of a dense [b, s, h, d] array lies in `t`.
  auto offset = [](const runtime::Tensor &t, size_t i) {
    int64_t at = 0;
    for (size_t d = t.sizes.size(); d-- > 0;) {
      at += int64_t(i % t.sizes[d]) * t.strides[d];
      i /= t.sizes[d];
    }
    return at;
  };
  auto upload = [&](runtime::Tensor &t, const std::vector<float> &values) {
    uint16_t *bits = reinterpret_cast<uint16_t *>(
        device.host(t.address, uint64_t(t.strides[0] * t.sizes[0]) * 2));
    for (size_t i = 0; i < values.size(); ++i)
      bits[offset(t, i)] = bf16 ? floatToBFloat16Bits(values[i]) : floatToHalfBits(values[i]);
  };
  runtime::Tensor tq = tensor({batch, seqQ, m.qHeads, m.headDim}, m.dtype);
  runtime::Tensor tk = tensor({batch, seqK, m.kvHeads, m.headDim}, m.dtype);
  runtime::Tensor tv = tensor({batch, seqK, m.kvHeads, m.headDim}, m.dtype);
  runtime::Tensor to = tensor({batch, seqQ, m.qHeads, m.headDim}, m.dtype);
  runtime::Tensor tl = tensor({batch, m.qHeads, seqQ}, "f32");
  upload(tq, q);
  upload(tk, k);
  upload(tv, v);
  const runtime::Tensor *lse = m.lse ? &tl : nullptr;

  // A broken rule: the launch must refuse it with a message naming it.
  if (!breakRule.empty()) {
    // k breaks the rule (v for "seq": k and v then disagree on seq_k; o
    // for "overlap"; the LSE for "lse-strides").
    runtime::Tensor bad = breakRule == "seq" ? tv : breakRule == "overlap" ? to : tk;
    runtime::Tensor badLseTensor = tl;
    if (breakRule == "dtype")
      bad.dtype = bf16 ? "fp16" : "bf16";
    else if (breakRule == "heads")
      bad.sizes[2] += 1;
    else if (breakRule == "strides")
      bad.strides[3] = 2; // head_dim not contiguous
    else if (breakRule == "stride-bytes")
      bad.strides[1] += 4; // 8 bytes more per row: not a multiple of 16
    else if (breakRule == "overlap")
      bad.strides[1] = bad.strides[2]; // rows and heads on the same elements
    else if (breakRule == "lse-strides")
      std::swap(badLseTensor.strides[1], badLseTensor.strides[2]);
    else if (breakRule == "align")
      bad.address += 8;
    else if (breakRule == "seq")
      bad.sizes[1] += 1;
    const runtime::Tensor *badLse = breakRule == "missing-lse" ? nullptr
                                    : breakRule == "lse-strides" ? &badLseTensor
                                                                 : lse;
    bool onK = breakRule != "seq" && breakRule != "missing-lse" &&
               breakRule != "overlap" && breakRule != "lse-strides";
    const runtime::Tensor &key = onK ? bad : tk;
    const runtime::Tensor &value = breakRule == "seq" ? bad : tv;
    const runtime::Tensor &output = breakRule == "overlap" ? bad : to;
    std::unique_ptr<runtime::Backend> backend = runtime::createEmulatorBackend(device);
    llvm::Error refused = runtime::launch(*backend, kernel, tq, key, value,
                                          output, badLse, nullptr);
    if (!refused) {
      outs() << "launched\n";
      return 1;
    }
    outs() << "refused: " << toString(std::move(refused)) << "\n";
    return 0;
  }

  std::unique_ptr<runtime::Backend> backend = runtime::createEmulatorBackend(device, 2);
  if (llvm::Error refused =
          runtime::launch(*backend, kernel, tq, tk, tv, to, lse, nullptr)) {
    errs() << "error: " << toString(std::move(refused)) << "\n";
    return 1;
  }
  sim::Reference reference;
  sim::computeReference(problem, bf16, q, k, v, reference);
  std::vector<float> out(reference.out.size()), gotLse;
  const uint16_t *bits =
      reinterpret_cast<const uint16_t *>(device.host(to.address, out.size() * 2));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = bf16 ? bfloat16BitsToFloat(bits[offset(to, i)]) : halfBitsToFloat(bits[offset(to, i)]);
  if (lse) {
    const float *values = reinterpret_cast<const float *>(
        device.host(tl.address, reference.lse.size() * 4));
    gotLse.assign(values, values + reference.lse.size());
  }
  sim::Errors errors;
  bool ok = sim::compareWithReference(reference, out, lse ? &gotLse : nullptr,
                                      1e-2, 1e-2, errors);
  outs() << "backend " << backend->name() << " max_abs_err " << errors.maxAbsErr
         << " lse_max_abs_err " << errors.lseMaxAbsErr << " ok " << (ok ? "true" : "false")
         << "\n";
  return ok ? 0 : 1;
}
