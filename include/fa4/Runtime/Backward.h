//===- Backward.h - the backward's manifest and launches ---------*- C++ -*-===//
//
// fa4c --backward (sm_90a) writes three kernels into one cubin and PTX:
// `<name>_prepare` (delta = rowsum(O ∘ dO), the dQ accumulator cleared),
// `<name>` (the warp-specialized main kernel: dK and dV, dQ's parts added
// to the accumulator) and `<name>_finish` (dQ = accumulator · scale), run in
// that order on one stream. Their manifest (kind "backward") says the
// variant and each kernel's CTA and shared memory; the parameters follow
// fixed conventions (docs/Backward.md, "Launching the backward"), which
// planBackwardLaunch lays out. The CUDA driver and fa4-emu run the plans
// as they run the forward's.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_BACKWARD_H
#define FA4_RUNTIME_BACKWARD_H

#include "fa4/Runtime/Launch.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::fa4::runtime {

struct BackwardManifest {
  std::string cubin, ptx, target;
  /// The variant (Manifest's names and meanings).
  std::string mask = "none";
  int64_t windowLeft = -1, windowRight = -1;
  double scale = 1.0, softcap = 0.0;
  int64_t headDim = 0, qHeads = 0, kvHeads = 0;
  std::string dtype;
  bool deterministic = false;
  /// Whether the main kernel inlines a score_mod (its derivative too) or a
  /// mask_mod region: fa4-emu then needs the entry IR to build its
  /// reference. Written only when true.
  bool scoreMod = false, maskMod = false;
  /// The memrefs those regions read (Manifest's "extras"): the main kernel
  /// takes each one's address and dynamic sizes after seq_k.
  std::vector<Manifest::Extra> extras;
  /// Sizes the entry IR fixed (-1: dynamic): a launch must have them.
  /// Written only when fixed.
  int64_t staticBatch = -1, staticSeqQ = -1, staticSeqK = -1;
  /// Query heads packed in a main-kernel step's rows (the GQA packing).
  int64_t gqaPacking = 1;
  /// Packed query rows per main-kernel step, the rows of its Q and dO
  /// tiles: 64 on Hopper (a wgmma row block), 128 on Blackwell (the N of
  /// Sᵀ).
  int64_t stepRows = 64;
  /// The main kernel's persistent grid: min(sm_count, tasks) CTAs, a task
  /// per (batch, K/V head, 128 keys).
  int64_t smCount = 1;
  struct Kernel {
    std::string name;
    uint32_t block = 1;
    uint32_t dynamicSmemBytes = 0;
    std::vector<Manifest::Role> roles;
  };
  /// prepare, main, finish: the launch order.
  Kernel kernels[3];
};

/// Whether `json` is a backward manifest (its "kind"); false for a forward
/// one or text that does not parse.
bool isBackwardManifest(const std::string &json);
/// Parses a backward manifest: an error naming the field when it is
/// malformed (the limits of parseManifest apply).
llvm::Expected<BackwardManifest> parseBackwardManifest(const std::string &json);
/// Its JSON text; parseBackwardManifest(writeBackwardManifest(m)) gives m.
std::string writeBackwardManifest(const BackwardManifest &manifest);

/// The kernels' parameters, by the conventions FA4ToNVVM lowers them with:
/// name and size in bytes, in order; the main kernel's end with each
/// extra's address ("extra") and dynamic sizes ("extra_dim").
struct BackwardParameter {
  const char *name;
  uint32_t bytes;
};
std::vector<BackwardParameter>
backwardParameters(int kernel, const BackwardManifest &manifest);

/// Device addresses of the backward's tensors and their strides in
/// elements ([batch, seq, heads, head_dim]; empty: dense). Q, O, dO, dQ
/// [batch, seq_q, q_heads, head_dim]; K, V, dK, dV [batch, seq_k, kv_heads,
/// head_dim]; the LSE and delta [batch, q_heads, seq_q] f32 and the dQ
/// accumulator [batch, seq_q, q_heads, head_dim] f32, dense.
struct BackwardBuffers {
  uint64_t q = 0, k = 0, v = 0, o = 0, dout = 0, lse = 0, dq = 0, dk = 0,
           dv = 0, delta = 0, dqAccum = 0;
  std::vector<int64_t> qStrides, kStrides, vStrides, oStrides, doutStrides,
      dqStrides, dkStrides, dvStrides;
  /// The extras, in the manifest's order: address and shape (row-major).
  std::vector<Buffers::Extra> extras;
};

/// The three launches, in order.
struct BackwardPlan {
  LaunchPlan kernels[3];
};

/// Checks the sizes (runtime::checkShapes's limits), the addresses and the
/// strides (TMA's rules for Q, K, V and dO; element pairs for the stores),
/// encodes the main kernel's tensor maps of Q, K, V, dO and the dQ
/// accumulator, and lays out
/// each kernel's parameters and grid.
llvm::Expected<BackwardPlan> planBackwardLaunch(const BackwardManifest &manifest,
                                                const Shapes &shapes,
                                                const BackwardBuffers &buffers,
                                                const TensorMapEncoder &encode);

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_BACKWARD_H
