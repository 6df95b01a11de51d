//===- Runtime.h - fa4rt: load a kernel, launch it on a backend -*- C++ -*-===//
//
// The runtime users call: a Kernel is a cubin, its PTX and its launch
// manifest (what fa4c writes); a Backend runs it. Two backends share every
// step but the last: the CUDA driver (loaded at run time with dlopen, so
// fa4rt builds and its tests run on machines without a driver) and fa4-emu
// (the CPU emulator, on which every runtime test runs here). launch()
// validates the tensors against the kernel, builds the tensor maps and
// parameters from the manifest (Launch.h), sizes the persistent grid and
// hands the plan to the backend.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_RUNTIME_H
#define FA4_RUNTIME_RUNTIME_H

#include "fa4/Runtime/Backward.h"
#include "fa4/Runtime/Launch.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir::fa4::emu {
class Device;
} // namespace mlir::fa4::emu

namespace mlir::fa4::runtime {

/// SHA-256 of the PTX and the cubin, each preceded by its length: equal
/// for equal code and (short of a SHA-256 collision) only for it.
std::string codeDigest(const std::string &ptx,
                       const std::vector<uint8_t> &cubin);

/// A kernel's codeDigest and the code it was computed from: it names that
/// code only while the PTX and the cubin are the same buffers of the same
/// sizes. A copied kernel's buffers are new (its digest is computed again,
/// at each launch), and so are reassigned ones; a move keeps them.
struct CodeDigest {
  std::string value;
  const char *ptx = nullptr;
  size_t ptxBytes = 0;
  const uint8_t *cubin = nullptr;
  size_t cubinBytes = 0;

  /// The digest of this code, remembering where it lies.
  static CodeDigest of(const std::string &ptx,
                       const std::vector<uint8_t> &cubin);
  /// The digest when it names this code (the same buffers and sizes), else
  /// codeDigest(ptx, cubin).
  std::string forCode(const std::string &ptx,
                      const std::vector<uint8_t> &cubin) const;
};

/// One kernel of a binary as a backend runs it: its entry point, target and
/// dynamic shared memory, and the binary's code by reference (the
/// backward's three kernels share one), named by its digest.
struct KernelCode {
  const std::string &entry;
  const std::string &target;
  uint32_t dynamicSmemBytes;
  const std::string &ptx;
  const std::vector<uint8_t> &cubin;
  std::string digest;
};

/// A compiled kernel: the manifest and the code it names.
struct Kernel {
  Manifest manifest;
  /// The manifest as written (JSON), for callers that show it.
  std::string manifestJson;
  /// The PTX (what fa4-emu runs) and the cubin (what the GPU loads); either
  /// may be empty when its file is missing.
  std::string ptx;
  std::vector<uint8_t> cubin;
  /// The code's digest, set by load() and create(): its name in the
  /// backends' caches. A kernel put together field by field, copied, or
  /// whose code was reassigned has none that names its code, and launch()
  /// computes it each time. (Bytes edited in place are not noticed, and
  /// neither is code of the same size assigned into the same vector, which
  /// reuses its buffer: edit a copy.)
  CodeDigest digest;

  /// The kernel as a backend runs it (its digest computed when not set).
  KernelCode code() const;

  /// Reads `<cubin>.json` and the cubin and PTX it names, beside it: the
  /// manifest a regular file of at most kMaxManifestBytes, the cubin and the
  /// PTX regular files of at most kMaxKernelFileBytes (InputLimits.h), then
  /// check() of what was read. Every error names the manifest's path.
  static llvm::Expected<Kernel> load(const std::string &manifestPath);

  /// A kernel handed over in memory, as a compiler in the same process has
  /// it: the manifest's JSON (at most kMaxManifestBytes), the PTX and the
  /// cubin (at most kMaxKernelFileBytes each; either may be empty, not
  /// both), then check(). The file names the manifest gives are not read.
  static llvm::Expected<Kernel> create(std::string manifestJson,
                                       std::string ptx,
                                       std::vector<uint8_t> cubin);

  /// The manifest's interface against fa4's (checkInterface), when there
  /// is PTX against the PTX's entry point (checkPtxEntry), and against the
  /// contract the PTX and the cubin declare (checkContract, Contract.h).
  llvm::Error check() const;
};

/// A tensor in a backend's memory: its base address, element type ("fp16",
/// "bf16", "f32"), sizes and strides in elements, outermost first.
struct Tensor {
  uint64_t address = 0;
  std::string dtype;
  std::vector<int64_t> sizes, strides;
};

/// Where a kernel runs.
class Backend {
public:
  virtual ~Backend();
  virtual const char *name() const = 0;
  /// Whether the backend runs the kernel's PTX (fa4-emu) or its cubin (the
  /// GPU): launch() checks that code's contract against the manifest.
  virtual bool runsPtx() const = 0;
  /// Encodes one tensor map into the 128 bytes the kernel takes by value.
  virtual llvm::Error encodeTensorMap(const TensorMapSpec &spec,
                                      uint8_t out[128]) = 0;
  /// Runs the plan; `stream` is the backend's (a CUstream for CUDA, unused
  /// by the emulator).
  virtual llvm::Error run(const KernelCode &code, const LaunchPlan &plan,
                          void *stream) = 0;
};

/// Checks q, k, v, o (and lse when the kernel writes one) against the
/// kernel: q/o [batch, seq_q, q_heads, head_dim], k/v [batch, seq_k,
/// kv_heads, head_dim] in the kernel's dtype with any strides a tensor map
/// expresses (head_dim contiguous, the other strides positive multiples of
/// 16 bytes; o's elements distinct), lse [batch, q_heads, seq_q] f32 dense;
/// a dimension of size 1 may have any stride; base addresses 16-byte
/// aligned. The first broken rule is named with its tensor. What comes back
/// is the launch's sizes, read from the tensors.
llvm::Expected<Shapes> checkTensors(const Manifest &manifest, const Tensor &q,
                                    const Tensor &k, const Tensor &v,
                                    const Tensor &o, const Tensor *lse);

/// What each of a kernel's extras is, for messages ("extra0: the seqused_k
/// table, extra1: the split-KV workspace").
std::string describeExtras(const Manifest &manifest);

/// Checks the extras a kernel reads (the manifest's `extras`, in order: the
/// mods' tables, seqused_k, the block table, the split-KV workspace): dtype,
/// rank, the static sizes, dense row-major, under 2^31 elements (but the
/// workspace), aligned, and sharing no memory with the `written` tensors;
/// with `shapes`, the tables' and the workspace's sizes against the
/// problem's.
llvm::Error checkExtras(const Manifest &manifest,
                        const std::vector<Tensor> &extras,
                        const std::vector<const Tensor *> &written,
                        const Shapes *shapes = nullptr);

/// checkTensors, then plan and run on `backend`.
llvm::Error launch(Backend &backend, const Kernel &kernel, const Tensor &q,
                   const Tensor &k, const Tensor &v, const Tensor &o,
                   const Tensor *lse, void *stream);
/// The same for a kernel with extras (checkExtras).
llvm::Error launch(Backend &backend, const Kernel &kernel, const Tensor &q,
                   const Tensor &k, const Tensor &v, const Tensor &o,
                   const Tensor *lse, const std::vector<Tensor> &extras,
                   void *stream);

/// The backward's three kernels (fa4c --backward, sm_90a): the manifest
/// of kind "backward" (Backward.h) and the code it names.
struct BackwardKernel {
  BackwardManifest manifest;
  std::string manifestJson;
  std::string ptx;
  std::vector<uint8_t> cubin;
  /// The code's digest, as Kernel's.
  CodeDigest digest;
  /// Reads the manifest and the cubin and PTX beside it (the limits of
  /// Kernel::load); the PTX's kernels, when it is there, must take the
  /// backward's parameters.
  static llvm::Expected<BackwardKernel> load(const std::string &manifestPath);
  /// The kernels handed over in memory (a compiler in this process: the
  /// Python package's), with Kernel::create's limits, then check().
  static llvm::Expected<BackwardKernel> create(std::string manifestJson,
                                               std::string ptx,
                                               std::vector<uint8_t> cubin);
  /// The code against the manifest: the contract the PTX and the cubin
  /// declare (Contract.h), and each of the PTX's kernels taking the
  /// backward's parameters.
  llvm::Error check() const;
};

/// The backward's tensors: q, k, v, o, dout and lse as the forward gave and
/// took them; dq, dk, dv written; delta ([batch, q_heads, seq_q] f32) and
/// dq_accum (q's sizes, f32) dense scratch the kernels fill.
struct BackwardTensors {
  Tensor q, k, v, o, dout, lse, dq, dk, dv, delta, dqAccum;
  /// The memrefs the kernels' regions read, in the manifest's order
  /// (checkExtras' rules).
  std::vector<Tensor> extras;
};

/// Checks the tensors against the kernel (sizes and dtypes, q/k's shapes
/// agreeing with every other's; lse, delta and dq_accum dense; what the
/// kernels write sharing no memory with anything else), then plans and runs
/// the three kernels on `backend`, in order, on `stream`.
llvm::Error launchBackward(Backend &backend, const BackwardKernel &kernel,
                           const BackwardTensors &tensors, void *stream);

/// fa4-emu as a backend: tensors live in `device`; each launch runs the
/// kernel's PTX there with `workers` host threads and fails on any error,
/// hazard, barrier misuse or deadlock the emulator reports. With `execute`
/// false a launch stops where the kernel would start: every check and the
/// plan (tensor maps, parameters) are made and the kernel is not run (the
/// Python argument fuzzer's fast mode; the outputs are left as they were).
std::unique_ptr<Backend> createEmulatorBackend(emu::Device &device,
                                               unsigned workers = 0,
                                               uint64_t seed = 1,
                                               bool execute = true);

/// The CUDA driver as a backend, in the calling thread's current context
/// (the device's primary context when there is none); an error saying why
/// when libcuda.so.1 cannot be loaded or initialised. A kernel for another
/// architecture than the device's is refused by name ("needs sm_100a, the
/// device is sm_90").
llvm::Expected<std::unique_ptr<Backend>> createCudaBackend();

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_RUNTIME_H
