//===- Launch.h - from a launch manifest to launch arguments ----*- C++ -*-===//
//
// The host side of running an fa4 kernel, written once for every backend:
// read the manifest fa4c writes beside a cubin, check a problem's sizes
// against it, bind each tensor map to the problem's sizes and buffers,
// encode the maps with the backend's encoder, lay out the parameters in the
// manifest's order, and size the persistent grid. The CUDA driver and fa4-emu
// differ only in the encoder and in who runs the result.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_RUNTIME_LAUNCH_H
#define FA4_RUNTIME_LAUNCH_H

#include "fa4/Runtime/TensorMapSpec.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlir::fa4::runtime {

/// What a launch manifest says (docs/README.md, "The manifest").
struct Manifest {
  std::string kernel, cubin, ptx, target;
  uint32_t block[3] = {1, 1, 1};
  int64_t smCount = 1;
  /// CTAs a cluster ("grid"'s "cluster"; a manifest without it: 1): 2 for
  /// a kernel of CTA pairs, whose sm_count and tasks count pairs.
  int64_t cluster = 1;
  std::string order;
  uint32_t dynamicSmemBytes = 0;
  uint32_t tmemColumns = 0;

  /// The attention variant.
  std::string mask = "none";
  int64_t windowLeft = -1, windowRight = -1;
  double scale = 1.0, softcap = 0.0;
  int64_t headDim = 0, qHeads = 0, kvHeads = 0;
  /// V and O's head dim ("v_head_dim"; a manifest without it: head_dim's).
  int64_t valueHeadDim = 0;
  int64_t vHeadDim() const { return valueHeadDim > 0 ? valueHeadDim : headDim; }
  /// The kernel writes O by address: O's pointer and strides follow the
  /// extras among its parameters (split-KV and varlen kernels always;
  /// "o_by_address" says so for the others).
  bool oByAddress = false;
  bool writesOByAddress() const {
    return oByAddress || splitWorkspace >= 0 || cuSeqlensQ >= 0;
  }
  /// The inputs' element type (Q's, K's, V's: "fp16", "bf16", "e4m3"), and
  /// O's ("out_dtype"; a manifest without it: dtype's). An FP8 kernel
  /// writes O in fp16 or bf16.
  std::string dtype, outDtype;
  const std::string &oDtype() const {
    return outDtype.empty() ? dtype : outDtype;
  }
  bool lse = false;
  int64_t rowsPerTask = 0;
  /// The kernel inlines a score_mod / mask_mod region (the manifest does not
  /// hold it: a reference needs the entry IR).
  bool scoreMod = false, maskMod = false;
  /// Which extra is the block mask (`[batch or 1, q_heads or 1, ceil(seq_q /
  /// 128), 4]` i32), -1 without one.
  int64_t blockMask = -1;
  /// Which extra is the seqused_k table (`[batch]` i32: each sequence's
  /// keys), -1 without one.
  int64_t seqUsedK = -1;
  /// Which extra is the block table of a paged K/V cache (`[batch,
  /// max_blocks]` i32), -1 without one; `pageSize` its keys per page.
  int64_t blockTable = -1, pageSize = 0;
  /// Split-KV: the parts each task's keys are cut into (1: none) and which
  /// extra is the workspace (`[words]` i32, at least its layout's words;
  /// its first words, the arrival counters, zero before a launch),
  /// -1 without one. Such a kernel also takes O's address and strides
  /// (parameters `o`, `o_stride_batch`, `o_stride_seq`, `o_stride_head`).
  int64_t numSplits = 1, splitWorkspace = -1;
  /// Varlen: the extras that are the cu_seqlens tables (`[batch + 1]` i32
  /// each), -1 for a dense batch. Q, K, V and O are then packed [1, total,
  /// heads, head_dim], and the kernel writes O by address (`o` and its
  /// strides, as split-KV's).
  int64_t cuSeqlensQ = -1, cuSeqlensK = -1;
  /// FP8 (e4m3): the extras that are Q's, K's and V's descale tables
  /// (`[batch, kv_heads]` f32 each), -1 for 16-bit kernels, which have none
  /// ("descales": {"q": i, "k": j, "v": k}).
  int64_t qDescale = -1, kDescale = -1, vDescale = -1;

  /// A memref the mod regions read: element type ("f32", "i32", ...) and
  /// shape, -1 where the launch gives the size (an `extraN_dimD` parameter).
  struct Extra {
    std::string dtype;
    std::vector<int64_t> shape;
  };
  std::vector<Extra> extras;

  /// A tensor map's entry: sizes and strides are numbers or expressions in
  /// `batch`, `seq_q`, `seq_k`, `seq_k_padded` (16 · ceil(seq_k / 16)) and
  /// `num_blocks` ("8192 * seq_q").
  struct TensorMap {
    std::string tensor, dtype;
    /// Empty: the tensor as the user holds it ([batch, seq, heads,
    /// head_dim]). "vt" (V of an FP8 kernel only): V transposed, [batch,
    /// kv_heads, v_head_dim, seq_k_padded], its keys permuted within each
    /// 16 (Fp8Value.h); `axes` and `layout_strides` then number that
    /// tensor's axes.
    std::string layout;
    uint32_t rank = 0;
    std::vector<std::string> dims, strides;
    /// Per map dimension, the tensor axis it walks ([batch, seq, heads,
    /// head_dim] numbering): how a launch's own strides replace the dense
    /// `strides` (empty in a manifest that does not say).
    std::vector<int> axes;
    /// The entry IR's strides of the tensor in elements, [batch, seq,
    /// heads, head_dim]; -1 where dynamic (empty: all dynamic).
    std::vector<int64_t> layoutStrides;
    uint32_t box[5] = {};
    uint32_t elementStrides[5] = {1, 1, 1, 1, 1};
    TensorMapSwizzle swizzle = TensorMapSwizzle::None;
    TensorMapOobFill oobFill = TensorMapOobFill::Zero;
  };
  std::vector<TensorMap> tensorMaps;
  /// Whether the kernel reads V in the "vt" layout (an sm_90a FP8 kernel).
  bool valueTransposed() const {
    for (const TensorMap &map : tensorMaps)
      if (map.tensor == "v")
        return map.layout == "vt";
    return false;
  }

  struct Parameter {
    std::string name, type;
    /// How it is passed ("by value, __grid_constant__" for a tensor map)
    /// and what it points at (the LSE's layout); empty when not said.
    std::string passing, layout;
  };
  std::vector<Parameter> parameters;

  struct Role {
    std::string name;
    int64_t firstWarp = 0, numWarps = 0, registers = 0;
  };
  std::vector<Role> roles;

  /// What ptxas reported of the cubin (-1: not known).
  struct Ptxas {
    int64_t registers = -1, spillStoreBytes = -1, spillLoadBytes = -1,
            stackBytes = -1, staticSmemBytes = 0;
  };
  Ptxas ptxas;
};

/// Parses a manifest; an error naming the field when it is malformed or
/// from an incompatible fa4. Input nested deeper than kMaxJsonNesting or
/// larger than kMaxManifestBytes (InputLimits.h) is refused before it is
/// parsed; "cubin" and "ptx" must be plain file names (isPlainFileName).
llvm::Expected<Manifest> parseManifest(const std::string &json);

/// The manifest's JSON text, as fa4c writes it beside a cubin: every
/// field of `manifest`, in the order and layout docs/README.md shows ("The
/// manifest"), so that `parseManifest(writeManifest(m))` gives `m` back.
/// fa4c, the compile cache and the Python package write manifests through
/// it; parseManifest is the one reader.
std::string writeManifest(const Manifest &manifest);

/// Whether `name` names a file in a directory without leaving it: no `/`,
/// not `.` or `..` (the empty name, "no file", is allowed).
bool isPlainFileName(const std::string &name);

/// Checks what the manifest says of the kernel's interface against what
/// every fa4 kernel takes: the parameters in fa4c's order (q_map, k_map,
/// v_map, o_map, lse when the kernel writes one, batch, seq_q, seq_k, then
/// each extra's address and dynamic sizes), and one tensor map each for q,
/// k, v and o, rank 4, in the kernel's dtype, [head_dim, heads, seq, batch]
/// in the map's dimensions. A manifest whose roles were swapped or edited
/// (q_map naming O's buffer would have the kernel write O into Q) is
/// refused by name.
llvm::Error checkInterface(const Manifest &manifest);

/// Checks the PTX's entry point against the manifest: the function the
/// manifest names, one parameter per manifest parameter of its size (128
/// bytes for a tensor map, 8 for an address, 4 for an int32), and its
/// `.reqntid`, when it has one, the manifest's block.
llvm::Error checkPtxEntry(const Manifest &manifest, const std::string &ptx);

/// One launch's sizes.
struct Shapes {
  int64_t batch = 1, seqQ = 1, seqK = 1;
  /// A paged K/V cache's blocks (0 for dense K and V); seqK is then the
  /// block table's max_blocks · page_size.
  int64_t numBlocks = 0;
};

/// Device addresses of the tensors: Q, O [batch, seq_q, q_heads, head_dim],
/// K, V [batch, seq_k, kv_heads, head_dim] (V of a "vt" map: [batch,
/// kv_heads, v_head_dim, seq_k_padded]), LSE [batch, q_heads, seq_q] f32
/// (0 when the kernel writes none).
struct Buffers {
  uint64_t q = 0, k = 0, v = 0, o = 0, lse = 0;
  /// The extras, in the manifest's order: address and shape (row-major).
  struct Extra {
    uint64_t address = 0;
    std::vector<int64_t> shape;
  };
  std::vector<Extra> extras;
  /// Strides of Q, K, V and O in elements, in that axis order; empty: dense.
  /// The tensor maps take them (through the manifest's `axes`).
  std::vector<int64_t> qStrides, kStrides, vStrides, oStrides;
};

/// Encodes one tensor map into the 128 bytes the kernel takes by value.
using TensorMapEncoder =
    std::function<llvm::Error(const TensorMapSpec &, uint8_t *)>;

struct LaunchPlan {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamicSmemBytes = 0;
  /// The persistent scheduler's tasks: (batch, kv head, m block).
  int64_t tasks = 0;
  /// Per tensor map, by tensor name (q, k, v, o).
  std::vector<std::pair<std::string, TensorMapSpec>> tensorMaps;
  /// One byte string per kernel parameter, in the manifest's order.
  std::vector<std::vector<uint8_t>> arguments;
};

/// The largest sizes a launch accepts: every index the kernel computes stays
/// below 2^31 (docs/Runtime.md).
llvm::Error checkShapes(const Manifest &manifest, const Shapes &shapes);

/// Bytes per element of a tensor's dtype: "e4m3" 1, "fp16" and "bf16" 2,
/// else extraElementBytes.
size_t tensorElementBytes(const std::string &dtype);

/// Bytes per element of an extra's dtype ("f32", "i32", "bf16", ...); 0 for
/// one the runtime does not know.
size_t extraElementBytes(const std::string &dtype);

/// Binds the manifest to one launch: each tensor map's dimensions must be
/// the problem's sizes of its tensor and its strides the tensor's (those in
/// `buffers`, else the dense ones) — a manifest whose sizes or strides were
/// edited would have the kernel read or write past its tensors — then
/// encodes the maps, lays out the parameters and sizes the grid.
llvm::Expected<LaunchPlan> planLaunch(const Manifest &manifest,
                                      const Shapes &shapes,
                                      const Buffers &buffers,
                                      const TensorMapEncoder &encode);

} // namespace mlir::fa4::runtime

#endif // FA4_RUNTIME_LAUNCH_H
