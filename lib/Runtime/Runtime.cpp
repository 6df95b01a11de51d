//===- Runtime.cpp - kernels, tensor checks, the emulator backend ---------===//

#include "fa4/Runtime/Runtime.h"
#include "fa4/Support/AttentionMath.h"

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Runtime/Fp8Value.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

namespace mlir::fa4::runtime {

Backend::~Backend() = default;

/// A file the manifest at `manifestPath` names (its reader holds the names
/// to plain file names): beside it; empty when missing or unnamed, but one
/// that is there must be a regular file of a bounded size.
static llvm::Expected<std::string> readBeside(const std::string &manifestPath,
                                              const std::string &name) {
  if (name.empty())
    return std::string();
  llvm::SmallString<256> path(manifestPath);
  llvm::sys::path::remove_filename(path);
  llvm::sys::path::append(path, name);
  bool missing = false;
  llvm::Expected<std::string> contents =
      readRegularFile(std::string(path), kMaxKernelFileBytes, &missing);
  if (!contents && missing) {
    llvm::consumeError(contents.takeError());
    return std::string();
  }
  if (!contents)
    return prefixError(manifestPath + ": ", contents.takeError());
  // An empty file is not an absent one: a kernel file cut to nothing (a
  // failed copy) must not pass as "no cubin".
  if (contents->empty())
    return makeError(manifestPath + ": cannot read " + std::string(path) +
                     ": the file is empty");
  return contents;
}

/// A manifest file, parsed by `parse`, and the PTX and cubin it names,
/// beside it (one of them at least): Kernel's and BackwardKernel's.
template <typename Loaded, typename Parse>
static llvm::Expected<Loaded> loadKernelFiles(const std::string &manifestPath,
                                              Parse parse) {
  llvm::Expected<std::string> json =
      readRegularFile(manifestPath, kMaxManifestBytes);
  if (!json)
    return json.takeError();
  auto manifest = parse(*json);
  if (!manifest)
    return prefixError(manifestPath + ": ", manifest.takeError());
  Loaded kernel;
  kernel.manifest = std::move(*manifest);
  kernel.manifestJson = std::move(*json);
  llvm::Expected<std::string> ptx = readBeside(manifestPath, kernel.manifest.ptx);
  if (!ptx)
    return ptx.takeError();
  kernel.ptx = std::move(*ptx);
  llvm::Expected<std::string> cubin =
      readBeside(manifestPath, kernel.manifest.cubin);
  if (!cubin)
    return cubin.takeError();
  kernel.cubin.assign(cubin->begin(), cubin->end());
  if (kernel.ptx.empty() && kernel.cubin.empty())
    return makeError(manifestPath +
                     ": neither the cubin nor the PTX it names is there");
  return std::move(kernel);
}

std::string codeDigest(const std::string &ptx,
                       const std::vector<uint8_t> &cubin) {
  llvm::SHA256 hash;
  auto part = [&](const uint8_t *bytes, uint64_t size) {
    uint8_t length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<uint8_t>(size >> (8 * i));
    hash.update(llvm::ArrayRef<uint8_t>(length, 8));
    hash.update(llvm::ArrayRef<uint8_t>(bytes, size));
  };
  part(reinterpret_cast<const uint8_t *>(ptx.data()), ptx.size());
  part(cubin.data(), cubin.size());
  std::array<uint8_t, 32> digest = hash.final();
  return std::string(digest.begin(), digest.end());
}

CodeDigest CodeDigest::of(const std::string &ptx,
                          const std::vector<uint8_t> &cubin) {
  return {codeDigest(ptx, cubin), ptx.data(), ptx.size(), cubin.data(),
          cubin.size()};
}

std::string CodeDigest::forCode(const std::string &ptx,
                                const std::vector<uint8_t> &cubin) const {
  // An empty buffer's address is free to change (a moved empty string's
  // does); only its size counts.
  bool same = !value.empty() && ptx.size() == ptxBytes &&
              cubin.size() == cubinBytes &&
              (ptx.empty() || ptx.data() == this->ptx) &&
              (cubin.empty() || cubin.data() == this->cubin);
  return same ? value : codeDigest(ptx, cubin);
}

KernelCode Kernel::code() const {
  return {manifest.kernel, manifest.target, manifest.dynamicSmemBytes, ptx,
          cubin, digest.forCode(ptx, cubin)};
}

llvm::Expected<Kernel> Kernel::load(const std::string &manifestPath) {
  llvm::Expected<Kernel> loaded =
      loadKernelFiles<Kernel>(manifestPath, parseManifest);
  if (!loaded)
    return loaded.takeError();
  Kernel &kernel = *loaded;
  if (llvm::Error refused = kernel.check())
    return prefixError(manifestPath + ": ", std::move(refused));
  kernel.digest = CodeDigest::of(kernel.ptx, kernel.cubin);
  return std::move(kernel);
}

/// The limits of a kernel handed over in memory (Kernel::create's and
/// BackwardKernel::create's): the manifest's, the PTX's and the cubin's
/// sizes, and code of one kind at least.
static llvm::Error checkHandedOver(const std::string &manifestJson,
                                   const std::string &ptx,
                                   const std::vector<uint8_t> &cubin) {
  if (manifestJson.size() > kMaxManifestBytes)
    return makeError("the manifest is " + std::to_string(manifestJson.size()) +
                     " bytes, more than the " +
                     std::to_string(kMaxManifestBytes) + " a manifest may have");
  for (auto [name, bytes] : {std::pair<const char *, size_t>{"PTX", ptx.size()},
                             {"cubin", cubin.size()}})
    if (bytes > kMaxKernelFileBytes)
      return makeError(std::string("the ") + name + " is " +
                       std::to_string(bytes) + " bytes, more than the " +
                       std::to_string(kMaxKernelFileBytes) +
                       " a kernel file may have");
  if (ptx.empty() && cubin.empty())
    return makeError("the kernel has neither a cubin nor PTX");
  return llvm::Error::success();
}

llvm::Expected<Kernel> Kernel::create(std::string manifestJson,
                                      std::string ptx,
                                      std::vector<uint8_t> cubin) {
  if (llvm::Error refused = checkHandedOver(manifestJson, ptx, cubin))
    return std::move(refused);
  llvm::Expected<Manifest> manifest = parseManifest(manifestJson);
  if (!manifest)
    return manifest.takeError();
  Kernel kernel;
  kernel.manifest = std::move(*manifest);
  kernel.manifestJson = std::move(manifestJson);
  kernel.ptx = std::move(ptx);
  kernel.cubin = std::move(cubin);
  if (llvm::Error refused = kernel.check())
    return std::move(refused);
  kernel.digest = CodeDigest::of(kernel.ptx, kernel.cubin);
  return std::move(kernel);
}

llvm::Error Kernel::check() const {
  if (llvm::Error refused = checkInterface(manifest))
    return refused;
  if (!ptx.empty())
    if (llvm::Error refused = checkPtxEntry(manifest, ptx))
      return refused;
  return checkContract(manifest, ptx, cubin);
}

/// Where a tensor's elements lie: [address, address + span) bytes, its
/// strides dense when it gives none.
static unsigned __int128 spanBytes(const Tensor &t) {
  unsigned __int128 last = 0;
  uint64_t dense = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    uint64_t stride = t.strides.empty() ? dense : (uint64_t)t.strides[i];
    if (t.sizes[i] > 1)
      last += (unsigned __int128)(t.sizes[i] - 1) * stride;
    dense *= (uint64_t)t.sizes[i];
  }
  return (last + 1) * tensorElementBytes(t.dtype);
}

static bool overlap(const Tensor &a, const Tensor &b) {
  unsigned __int128 aBegin = a.address, aEnd = aBegin + spanBytes(a);
  unsigned __int128 bBegin = b.address, bEnd = bBegin + spanBytes(b);
  return aBegin < bEnd && bBegin < aEnd;
}

static std::string list(const std::vector<int64_t> &values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

/// What elementsDistinct can say of a strided layout.
enum class Distinctness { Distinct, Shared, Unproven };

/// Whether no two index tuples of a layout with positive `strides` reach the
/// same element: exactly when no nonzero d with |d_i| < sizes[i] has
/// sum(strides[i] * d_i) = 0. Axes of size 1 never step. An axis whose
/// stride is larger than the span of all the others can be in no such sum
/// (its term alone outweighs theirs), so it is set aside, repeatedly; what
/// remains is searched exhaustively, all axes but the longest enumerated and
/// the longest solved for, when that is at most 2^24 cases. Beyond the
/// budget (only layouts that interleave several long axes) the answer is
/// Unproven.
static Distinctness elementsDistinct(const std::vector<int64_t> &sizes,
                                     const std::vector<int64_t> &strides) {
  struct Axis {
    int64_t size;
    __int128 stride;
  };
  std::vector<Axis> axes;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1)
      axes.push_back({sizes[i], strides[i] < 0 ? -__int128(strides[i])
                                               : __int128(strides[i])});
  for (const Axis &axis : axes)
    if (axis.stride == 0)
      return Distinctness::Shared;
  auto span = [](const Axis &axis) { return axis.stride * (axis.size - 1); };
  for (bool removed = true; removed && !axes.empty();) {
    removed = false;
    __int128 total = 0;
    for (const Axis &axis : axes)
      total += span(axis);
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i].stride > total - span(axes[i])) {
        axes.erase(axes.begin() + i);
        removed = true;
        break;
      }
    }
  }
  if (axes.empty())
    return Distinctness::Distinct;
  // One axis left would have been set aside: at least two remain.
  size_t longest = 0;
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i].size > axes[longest].size)
      longest = i;
  Axis solved = axes[longest];
  axes.erase(axes.begin() + longest);
  uint64_t cases = 1;
  for (const Axis &axis : axes) {
    cases *= uint64_t(2 * axis.size - 1);
    if (cases > (uint64_t(1) << 24))
      return Distinctness::Unproven;
  }
  std::vector<int64_t> step(axes.size());
  for (size_t i = 0; i < axes.size(); ++i)
    step[i] = -(axes[i].size - 1);
  for (uint64_t c = 0; c < cases; ++c) {
    __int128 sum = 0;
    bool zero = true;
    for (size_t i = 0; i < axes.size(); ++i) {
      sum += axes[i].stride * step[i];
      zero = zero && step[i] == 0;
    }
    // solved.stride * d = -sum with |d| < solved.size; d = 0 only with a
    // nonzero step elsewhere.
    if (!zero && sum % solved.stride == 0) {
      __int128 d = sum / solved.stride;
      if (d < solved.size && -d < solved.size)
        return Distinctness::Shared;
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      if (++step[i] < axes[i].size)
        break;
      step[i] = -(axes[i].size - 1);
    }
  }
  return Distinctness::Distinct;
}

llvm::Expected<Shapes> checkTensors(const Manifest &m, const Tensor &q,
                                    const Tensor &k, const Tensor &v,
                                    const Tensor &o, const Tensor *lse) {
  // FP8's V for sm_90a, prepared by prepareFp8Value (Fp8Value.h).
  bool transposedValue = m.valueTransposed();
  // `tma`: any strides a tensor map expresses (contiguous along the last
  // axis, the others positive multiples of 16 bytes); else dense. A
  // dimension of size 1 is never stepped along: its stride is free.
  auto check = [&](const char *name, const Tensor &t, const std::string &dtype,
                   const std::vector<int64_t> &sizes, bool tma) -> llvm::Error {
    std::string prefix = std::string(name) + ": ";
    if (t.dtype != dtype)
      return makeError(prefix + "dtype " + t.dtype + ", the kernel takes " +
                       dtype);
    if (t.sizes != sizes)
      return makeError(prefix + "sizes " + list(t.sizes) +
                       ", the kernel expects " + list(sizes));
    if (t.strides.size() != sizes.size())
      return makeError(prefix + "strides " + list(t.strides) +
                       " do not match its rank");
    std::vector<int64_t> dense(sizes.size(), 1);
    for (size_t i = sizes.size() - 1; i > 0; --i)
      dense[i - 1] = dense[i] * sizes[i];
    int64_t bytes = static_cast<int64_t>(tensorElementBytes(t.dtype));
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 1 || t.strides[i] == dense[i])
        continue;
      if (!tma)
        return makeError(prefix + "strides " + list(t.strides) +
                         " are not the dense " + list(dense) +
                         " the kernel writes");
      if (i + 1 == sizes.size())
        return makeError(prefix + "strides " + list(t.strides) + ": " +
                         (transposedValue && t.sizes.size() == 4 &&
                                  &t == &v
                              ? "the keys"
                              : "head_dim") +
                         " must be contiguous (stride 1) for TMA");
      if (t.strides[i] <= 0 || (t.strides[i] * bytes) % 16)
        return makeError(prefix + "strides " + list(t.strides) +
                         ": every stride but head_dim's must be a positive "
                         "multiple of 16 bytes for TMA");
      if (t.strides[i] >= (int64_t(1) << 40) / bytes)
        return makeError(prefix + "strides " + list(t.strides) +
                         ": a stride of 2^40 bytes or more is beyond TMA");
    }
    // Sizes the entry IR fixed (numbers in the map's dims), named before
    // the strides they also fix.
    for (const Manifest::TensorMap &map : m.tensorMaps) {
      if (map.tensor != name || map.axes.size() != map.dims.size() ||
          !map.layout.empty())
        continue;
      bool query = std::string(name) == "q" || std::string(name) == "o";
      for (size_t d = 0; d < map.dims.size(); ++d) {
        int axis = map.axes[d];
        const std::string &text = map.dims[d];
        if ((axis != 0 && axis != 1) || static_cast<size_t>(axis) >= sizes.size() ||
            text.empty() || text.size() > 10 ||
            !std::all_of(text.begin(), text.end(),
                         [](char c) { return c >= '0' && c <= '9'; }))
          continue;
        int64_t fixed = std::stoll(text);
        const char *axisName = axis == 1    ? (query ? "seq_q" : "seq_k")
                               : !query && m.blockTable >= 0 ? "num_blocks"
                                                             : "batch";
        if (fixed != t.sizes[axis])
          return makeError(prefix + axisName +
                           " is " + std::to_string(t.sizes[axis]) +
                           ", but the kernel was compiled for " +
                           std::to_string(fixed) +
                           " (a static size of its entry IR)");
      }
    }
    // The layout the entry IR declared, where it is static.
    for (const Manifest::TensorMap &map : m.tensorMaps) {
      if (map.tensor != name || map.layoutStrides.size() != sizes.size())
        continue;
      for (size_t i = 0; i < sizes.size(); ++i)
        if (sizes[i] > 1 && map.layoutStrides[i] > 0 &&
            t.strides[i] != map.layoutStrides[i]) {
          std::string declared = "[";
          for (size_t j = 0; j < sizes.size(); ++j)
            declared += (j ? ", " : "") + (map.layoutStrides[j] > 0
                                               ? std::to_string(map.layoutStrides[j])
                                               : std::string("?"));
          return makeError(prefix + "strides " + list(t.strides) +
                           " differ from the " + declared +
                           "] the kernel was compiled for");
        }
    }
    if (t.address % 16)
      return makeError(prefix +
                       "base address is not 16-byte aligned (TMA needs it)");
    if (t.address == 0)
      return makeError(prefix + "null base address");
    return llvm::Error::success();
  };
  // O's elements must not share memory: the kernel would race on them.
  auto distinct = [&](const Tensor &t) -> llvm::Error {
    switch (elementsDistinct(t.sizes, t.strides)) {
    case Distinctness::Distinct:
      return llvm::Error::success();
    case Distinctness::Shared:
      return makeError("o: strides " + list(t.strides) +
                       " make elements share memory (the kernel would race "
                       "on them)");
    case Distinctness::Unproven:
      return makeError("o: strides " + list(t.strides) +
                       " interleave its axes too finely to prove its elements "
                       "distinct (the kernel would race on shared ones); use a "
                       "layout whose axes nest");
    }
    llvm_unreachable("every answer is handled above");
  };
  // Where each tensor's elements lie: [address, address + span) bytes.
  // What the kernel writes must not share memory with what it reads (nor
  // O with the LSE): on a GPU it would read values it already overwrote.
  auto disjoint = [&](const char *written, const Tensor &w, const char *other,
                      const Tensor &r) -> llvm::Error {
    if (!overlap(w, r))
      return llvm::Error::success();
    if (std::string(other) == "o")
      return makeError(std::string(written) +
                       ": shares memory with o (both are written)");
    return makeError(std::string(written) + ": shares memory with " + other +
                     " (the kernel writes " + written + " while it reads " +
                     other + ")");
  };
  if (q.sizes.size() != 4 || k.sizes.size() != 4)
    return makeError(
        std::string(q.sizes.size() != 4 ? "q" : "k") +
        ": expected [batch, seq, heads, head_dim], got rank " +
        std::to_string((q.sizes.size() != 4 ? q : k).sizes.size()));
  Shapes shapes;
  shapes.batch = q.sizes[0];
  shapes.seqQ = q.sizes[1];
  shapes.seqK = k.sizes[1];
  // Varlen tensors are packed: the batch-1 case of the dense layout.
  if (m.cuSeqlensQ >= 0 && (q.sizes[0] != 1 || k.sizes[0] != 1))
    return makeError(std::string(q.sizes[0] != 1 ? "q" : "k") +
                     ": a varlen kernel's tensors are packed [1, total, "
                     "heads, head_dim] (sequence b is rows [cu_seqlens[b], "
                     "cu_seqlens[b + 1])), got batch " +
                     std::to_string((q.sizes[0] != 1 ? q : k).sizes[0]));
  // A paged cache: K's first axis is its blocks; the sequences' length, the
  // block table's max_blocks pages, is known once the extras are
  // (launch() sets it); one page until then.
  if (m.blockTable >= 0) {
    shapes.numBlocks = k.sizes[0];
    shapes.seqK = m.pageSize;
  }
  if (shapes.batch <= 0 || shapes.seqQ <= 0 || shapes.seqK <= 0)
    return makeError("batch, seq_q and seq_k must be positive, got " +
                     list({shapes.batch, shapes.seqQ, shapes.seqK}));
  // The size limits first: every product below stays far from overflow.
  if (llvm::Error refused = checkShapes(m, shapes))
    return std::move(refused);
  std::vector<int64_t> qSizes{shapes.batch, shapes.seqQ, m.qHeads, m.headDim};
  std::vector<int64_t> kSizes{shapes.batch, shapes.seqK, m.kvHeads, m.headDim};
  if (m.blockTable >= 0)
    kSizes = {shapes.numBlocks, m.pageSize, m.kvHeads, m.headDim};
  // V and O: V's head dim.
  std::vector<int64_t> vSizes = kSizes, oSizes = qSizes;
  vSizes[3] = oSizes[3] = m.vHeadDim();
  // [batch, kv_heads, v_head_dim, seq_k_padded], its keys permuted.
  if (transposedValue) {
    vSizes = vtSizes({shapes.batch, shapes.seqK, m.kvHeads, m.vHeadDim()});
    if (v.sizes.size() == 4 && v.sizes != vSizes)
      return makeError(
          "v: sizes " + list(v.sizes) +
          "; the kernel reads V transposed, [batch, kv_heads, v_head_dim, "
          "seq_k_padded = 16 * ceil(seq_k / 16)] = " +
          list(vSizes) +
          ", its keys permuted within each 16 (prepare it with "
          "prepareFp8Value / fa4rt_prepare_fp8_value)");
  }
  for (auto [name, tensor, sizes] : {std::tuple{"q", &q, &qSizes},
                                     {"k", &k, &kSizes},
                                     {"v", &v, &vSizes},
                                     {"o", &o, &oSizes}})
    if (llvm::Error refused = check(name, *tensor,
                                    tensor == &o ? m.oDtype() : m.dtype,
                                    *sizes, true))
      return std::move(refused);
  if (llvm::Error refused = distinct(o))
    return std::move(refused);
  if (m.lse && !lse)
    return makeError(
        "lse: the kernel writes the log-sum-exp; pass a tensor for it");
  if (!m.lse && lse)
    return makeError(
        "lse: the kernel writes no log-sum-exp (compile it with --lse)");
  if (lse)
    if (llvm::Error refused = check(
            "lse", *lse, "f32", {shapes.batch, m.qHeads, shapes.seqQ}, false))
      return std::move(refused);
  for (const Tensor *t : {&q, &k, &v, &o, lse}) {
    if (!t)
      continue;
    std::string name = t == &q   ? "q"
                       : t == &k ? "k"
                       : t == &v ? "v"
                       : t == &o ? "o"
                                 : "lse";
    if (spanBytes(*t) > ((unsigned __int128)1 << 48))
      return makeError(name + ": its strides span more than 2^48 bytes");
    // No address space has its last bytes mapped: a tensor running past
    // 2^64 is a wrong address, not a tensor.
    if ((unsigned __int128)t->address + spanBytes(*t) >
        ((unsigned __int128)1 << 64))
      return makeError(name + ": its elements run past the end of the "
                       "address space");
  }
  std::pair<const char *, const Tensor *> read[] = {
      {"q", &q}, {"k", &k}, {"v", &v}};
  for (auto [name, tensor] : read)
    if (llvm::Error refused = disjoint("o", o, name, *tensor))
      return std::move(refused);
  if (lse) {
    for (auto [name, tensor] : read)
      if (llvm::Error refused = disjoint("lse", *lse, name, *tensor))
        return std::move(refused);
    if (llvm::Error refused = disjoint("lse", *lse, "o", o))
      return std::move(refused);
  }
  return shapes;
}

std::string describeExtras(const Manifest &m) {
  std::string text;
  for (size_t i = 0; i < m.extras.size(); ++i) {
    int64_t at = static_cast<int64_t>(i);
    text += std::string(i ? ", " : "") + "extra" + std::to_string(i) + ": " +
            (at == m.blockMask        ? "the block mask"
             : at == m.seqUsedK       ? "the seqused_k table"
             : at == m.blockTable     ? "the block table"
             : at == m.splitWorkspace ? "the split-KV workspace"
             : at == m.cuSeqlensQ     ? "cu_seqlens_q"
             : at == m.cuSeqlensK     ? "cu_seqlens_k"
             : at == m.qDescale       ? "Q's descale table"
             : at == m.kDescale       ? "K's descale table"
             : at == m.vDescale       ? "V's descale table"
                                      : "a score_mod / mask_mod table");
  }
  return text;
}

llvm::Error checkExtras(const Manifest &m, const std::vector<Tensor> &extras,
                        const std::vector<const Tensor *> &written,
                        const Shapes *shapes) {
  if (extras.size() != m.extras.size())
    return makeError("extras: the kernel reads " +
                     std::to_string(m.extras.size()) + " extra tensors (" +
                     describeExtras(m) + "), got " +
                     std::to_string(extras.size()));
  for (size_t i = 0; i < extras.size(); ++i) {
    const Tensor &t = extras[i];
    const Manifest::Extra &want = m.extras[i];
    std::string name = "extra" + std::to_string(i);
    if (t.dtype != want.dtype)
      return makeError(name + ": expected dtype " + want.dtype + ", got " +
                       t.dtype);
    if (!t.strides.empty() && t.strides.size() != t.sizes.size())
      return makeError(name + ": has " + std::to_string(t.strides.size()) +
                       " strides for " + std::to_string(t.sizes.size()) +
                       " sizes");
    if (t.sizes.size() != want.shape.size())
      return makeError(name + ": expected rank " +
                       std::to_string(want.shape.size()) + ", got " +
                       std::to_string(t.sizes.size()));
    // Row-major and dense: the kernel computes offsets from the sizes.
    int64_t count = 1;
    for (size_t d = t.sizes.size(); d-- > 0;) {
      if (t.sizes[d] <= 0 ||
          (want.shape[d] >= 0 && t.sizes[d] != want.shape[d]))
        return makeError(name + ": dimension " + std::to_string(d) + " is " +
                         std::to_string(t.sizes[d]) + ", expected " +
                         (want.shape[d] >= 0 ? std::to_string(want.shape[d])
                                             : std::string("a positive size")));
      if (!t.strides.empty() && t.strides[d] != count && t.sizes[d] != 1)
        return makeError(name +
                         ": must be dense and row-major (the kernel indexes it "
                         "from its sizes)");
      // (The split-KV workspace is addressed in 64 bits.)
      if (t.sizes[d] >= (int64_t(1) << 31) / count &&
          static_cast<int64_t>(i) != m.splitWorkspace)
        return makeError(
            name + ": 2^31 elements or more (the kernel's offsets are 32-bit)");
      count *= t.sizes[d];
    }
    size_t bytes = extraElementBytes(t.dtype);
    if (t.address % bytes)
      return makeError(name +
                       ": its address is not aligned to its element size");
    for (const Tensor *w : written)
      if (w && overlap(t, *w))
        return makeError(name +
                         ": shares memory with an output the kernel writes");
    // The block mask has an entry for every batch, query head and block of
    // 128 queries (or one for all batches or heads).
    if (shapes && static_cast<int64_t>(i) == m.blockMask &&
        ((t.sizes[0] != 1 && t.sizes[0] != shapes->batch) ||
         (t.sizes[1] != 1 && t.sizes[1] != m.qHeads) ||
         t.sizes[2] != (shapes->seqQ + 127) / 128 || t.sizes[3] != 4))
      return makeError(name +
                       ": the block mask must be [batch or 1, q_heads or 1, "
                       "ceil(seq_q / 128), 4] = [" +
                       std::to_string(shapes->batch) + " or 1, " +
                       std::to_string(m.qHeads) + " or 1, " +
                       std::to_string((shapes->seqQ + 127) / 128) + ", 4]");
    // The block table has a row per sequence.
    if (shapes && static_cast<int64_t>(i) == m.blockTable &&
        t.sizes[0] != shapes->batch)
      return makeError(name + ": the block table must have a row per "
                              "sequence, [batch, max_blocks] = [" +
                       std::to_string(shapes->batch) + ", ...]");
    // Varlen: the sequences are the cu_seqlens tables' entries less one,
    // the same in both.
    int64_t sequences = shapes ? shapes->batch : 0;
    if (m.cuSeqlensQ >= 0 &&
        m.cuSeqlensQ < static_cast<int64_t>(extras.size()))
      sequences = extras[m.cuSeqlensQ].sizes.empty()
                      ? 0
                      : extras[m.cuSeqlensQ].sizes[0] - 1;
    if ((static_cast<int64_t>(i) == m.cuSeqlensQ ||
         static_cast<int64_t>(i) == m.cuSeqlensK) &&
        (t.sizes[0] < 2 || t.sizes[0] != sequences + 1)) {
      int64_t other = m.cuSeqlensK < static_cast<int64_t>(extras.size()) &&
                              !extras[m.cuSeqlensK].sizes.empty()
                          ? extras[m.cuSeqlensK].sizes[0]
                          : -1;
      return makeError(name + ": cu_seqlens_q and cu_seqlens_k must both "
                              "have batch + 1 entries (at least 2), got " +
                       std::to_string(sequences + 1) + " and " +
                       std::to_string(other));
    }
    // FP8's descale tables: an entry per sequence and K/V head.
    bool descale = static_cast<int64_t>(i) == m.qDescale ||
                   static_cast<int64_t>(i) == m.kDescale ||
                   static_cast<int64_t>(i) == m.vDescale;
    if (shapes && descale &&
        (t.sizes[0] != sequences || t.sizes[1] != m.kvHeads))
      return makeError(name + ": a descale table must be [batch, kv_heads] = [" +
                       std::to_string(sequences) + ", " +
                       std::to_string(m.kvHeads) + "], got " + list(t.sizes));
    // The seqused_k table has one entry per sequence: the kernel reads
    // entry `batch` of every task.
    if (shapes && static_cast<int64_t>(i) == m.seqUsedK &&
        t.sizes[0] != sequences)
      return makeError(name + ": the seqused_k table must have one entry per "
                              "sequence, [batch] = [" +
                       std::to_string(sequences) + "]");
    // The split-KV workspace: the kernel writes it (no other extra may lie
    // in it), in 16-byte vectors, and needs its layout's words.
    if (static_cast<int64_t>(i) == m.splitWorkspace) {
      if (t.address % 16)
        return makeError(name + ": the split-KV workspace must be 16-byte "
                                "aligned");
      for (size_t j = 0; j < extras.size(); ++j)
        if (j != i && overlap(t, extras[j]))
          return makeError(name + ": the split-KV workspace shares memory "
                                  "with extra" +
                           std::to_string(j));
      if (shapes) {
        int64_t packing = gqaPacking(m.qHeads / m.kvHeads);
        SplitWorkspaceLayout layout =
            splitWorkspaceLayout(shapes->batch, m.qHeads / packing,
                                 shapes->seqQ, packing, m.numSplits,
                                 m.vHeadDim());
        if (t.sizes[0] < layout.words())
          return makeError(name + ": the split-KV workspace needs " +
                           std::to_string(layout.words()) +
                           " i32 words for this problem (" +
                           std::to_string(m.numSplits) + " parts), got " +
                           std::to_string(t.sizes[0]));
      }
    }
  }
  return llvm::Error::success();
}

llvm::Error launch(Backend &backend, const Kernel &kernel, const Tensor &q,
                   const Tensor &k, const Tensor &v, const Tensor &o,
                   const Tensor *lse, void *stream) {
  return launch(backend, kernel, q, k, v, o, lse, {}, stream);
}

llvm::Error launch(Backend &backend, const Kernel &kernel, const Tensor &q,
                   const Tensor &k, const Tensor &v, const Tensor &o,
                   const Tensor *lse, const std::vector<Tensor> &extras,
                   void *stream) {
  if (llvm::Error refused = checkInterface(kernel.manifest))
    return refused;
  // The manifest against the contract of the code this backend runs, on
  // every launch: a Kernel is a plain struct its caller may have filled or
  // edited since load(). The other file was checked by load(); scanning a
  // megabyte of PTX here would cost a CUDA launch more than its host work.
  if (llvm::Error refused =
          backend.runsPtx() ? checkContract(kernel.manifest, kernel.ptx, {})
                            : checkContract(kernel.manifest, {}, kernel.cubin))
    return refused;
  llvm::Expected<Shapes> shapes =
      checkTensors(kernel.manifest, q, k, v, o, lse);
  if (!shapes)
    return shapes.takeError();
  if (llvm::Error refused =
          checkExtras(kernel.manifest, extras, {&o, lse}, &*shapes))
    return refused;
  // The split-KV workspace is written: it may not lie in an input either.
  if (int64_t at = kernel.manifest.splitWorkspace;
      at >= 0 && at < static_cast<int64_t>(extras.size()))
    for (auto [name, tensor] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
      if (overlap(extras[at], *tensor))
        return makeError("extra" + std::to_string(at) +
                         ": the split-KV workspace shares memory with " + name);
  // A paged cache's sequences are the block table's max_blocks pages.
  if (kernel.manifest.blockTable >= 0) {
    shapes->seqK = extras[kernel.manifest.blockTable].sizes[1] *
                   kernel.manifest.pageSize;
    if (llvm::Error refused = checkShapes(kernel.manifest, *shapes))
      return refused;
  }
  Buffers buffers;
  for (const Tensor &extra : extras)
    buffers.extras.push_back({extra.address, extra.sizes});
  buffers.q = q.address;
  buffers.k = k.address;
  buffers.v = v.address;
  buffers.o = o.address;
  buffers.lse = lse ? lse->address : 0;
  // The tensors' own strides for the tensor maps, when they are not the
  // dense ones the manifest's maps already hold (so a manifest of an older
  // fa4, without axes, still launches dense tensors); a size-1 axis (whose
  // stride is free) takes its dense stride, which TMA accepts.
  auto strides = [](const Tensor &t) {
    std::vector<int64_t> strides = t.strides;
    int64_t dense = 1;
    bool isDense = true;
    for (size_t i = t.sizes.size(); i-- > 0;) {
      if (t.sizes[i] == 1)
        strides[i] = dense;
      isDense = isDense && strides[i] == dense;
      dense *= t.sizes[i];
    }
    return isDense ? std::vector<int64_t>() : strides;
  };
  buffers.qStrides = strides(q);
  buffers.kStrides = strides(k);
  buffers.vStrides = strides(v);
  buffers.oStrides = strides(o);
  auto encode = [&](const TensorMapSpec &spec, uint8_t *out) {
    return backend.encodeTensorMap(spec, out);
  };
  llvm::Expected<LaunchPlan> plan =
      planLaunch(kernel.manifest, *shapes, buffers, encode);
  if (!plan)
    return plan.takeError();
  if (plan->tasks == 0)
    return llvm::Error::success();
  return backend.run(kernel.code(), *plan, stream);
}

llvm::Expected<BackwardKernel>
BackwardKernel::load(const std::string &manifestPath) {
  llvm::Expected<BackwardKernel> loaded =
      loadKernelFiles<BackwardKernel>(manifestPath, parseBackwardManifest);
  if (!loaded)
    return loaded.takeError();
  if (llvm::Error refused = loaded->check())
    return prefixError(manifestPath + ": ", std::move(refused));
  loaded->digest = CodeDigest::of(loaded->ptx, loaded->cubin);
  return loaded;
}

llvm::Expected<BackwardKernel>
BackwardKernel::create(std::string manifestJson, std::string ptx,
                       std::vector<uint8_t> cubin) {
  if (llvm::Error refused = checkHandedOver(manifestJson, ptx, cubin))
    return std::move(refused);
  llvm::Expected<BackwardManifest> manifest =
      parseBackwardManifest(manifestJson);
  if (!manifest)
    return manifest.takeError();
  BackwardKernel kernel;
  kernel.manifest = std::move(*manifest);
  kernel.manifestJson = std::move(manifestJson);
  kernel.ptx = std::move(ptx);
  kernel.cubin = std::move(cubin);
  if (llvm::Error refused = kernel.check())
    return std::move(refused);
  kernel.digest = CodeDigest::of(kernel.ptx, kernel.cubin);
  return std::move(kernel);
}

llvm::Error BackwardKernel::check() const {
  // The code was compiled for this manifest (the contract fa4c embeds).
  if (llvm::Error refused =
          checkContractText(backwardContract(manifest), ptx, cubin))
    return refused;
  if (ptx.empty())
    return llvm::Error::success();
  llvm::Expected<std::shared_ptr<const emu::Program>> program =
      emu::parsePtx(ptx);
  if (!program)
    return prefixError("its PTX: ", program.takeError());
  for (int k = 0; k < 3; ++k) {
    std::vector<emu::KernelParam> params =
        emu::kernelParams(**program, manifest.kernels[k].name);
    std::vector<BackwardParameter> expected = backwardParameters(k, manifest);
    bool same = params.size() == expected.size();
    for (size_t i = 0; same && i < params.size(); ++i)
      same = params[i].bytes == expected[i].bytes;
    if (!same)
      return makeError("its PTX's " + manifest.kernels[k].name +
                       " does not take the backward's " +
                       std::to_string(expected.size()) + " parameters");
  }
  return llvm::Error::success();
}

llvm::Error launchBackward(Backend &backend, const BackwardKernel &kernel,
                           const BackwardTensors &t, void *stream) {
  const BackwardManifest &m = kernel.manifest;
  // The launch's sizes come from q and k: theirs are checked first.
  for (auto [name, tensor] : {std::pair<const char *, const Tensor *>{"q", &t.q},
                              {"k", &t.k}})
    if (tensor->sizes.size() != 4 ||
        llvm::any_of(tensor->sizes, [](int64_t size) { return size < 1; }))
      return makeError(std::string(name) + ": sizes " + list(tensor->sizes) +
                       " are not a positive [batch, seq, heads, head_dim]");
  if (t.k.sizes[0] != t.q.sizes[0])
    return makeError("k: batch " + std::to_string(t.k.sizes[0]) +
                     ", q's is " + std::to_string(t.q.sizes[0]));
  Shapes shapes{t.q.sizes[0], t.q.sizes[1], t.k.sizes[1]};
  std::vector<int64_t> query{shapes.batch, shapes.seqQ, m.qHeads, m.headDim};
  std::vector<int64_t> key{shapes.batch, shapes.seqK, m.kvHeads, m.headDim};
  std::vector<int64_t> rows{shapes.batch, m.qHeads, shapes.seqQ};
  struct Rule {
    const char *name;
    const Tensor *tensor;
    const std::vector<int64_t> *sizes;
    bool f32, dense, written;
  } rules[] = {{"q", &t.q, &query, false, false, false},
               {"k", &t.k, &key, false, false, false},
               {"v", &t.v, &key, false, false, false},
               {"o", &t.o, &query, false, false, false},
               {"dout", &t.dout, &query, false, false, false},
               {"lse", &t.lse, &rows, true, true, false},
               {"dq", &t.dq, &query, false, false, true},
               {"dk", &t.dk, &key, false, false, true},
               {"dv", &t.dv, &key, false, false, true},
               {"delta", &t.delta, &rows, true, true, true},
               {"dq_accum", &t.dqAccum, &query, true, true, true}};
  for (const Rule &rule : rules) {
    const Tensor &tensor = *rule.tensor;
    std::string prefix = std::string(rule.name) + ": ";
    std::string dtype = rule.f32 ? "f32" : m.dtype;
    if (tensor.dtype != dtype)
      return makeError(prefix + "dtype " + tensor.dtype + ", the kernels take " +
                       dtype);
    if (tensor.sizes != *rule.sizes)
      return makeError(prefix + "sizes " + list(tensor.sizes) +
                       ", the kernels expect " + list(*rule.sizes));
    if (tensor.strides.size() != tensor.sizes.size())
      return makeError(prefix + "strides " + list(tensor.strides) +
                       " do not match its rank");
    if (rule.dense) {
      int64_t dense = 1;
      for (size_t i = tensor.sizes.size(); i-- > 0;) {
        if (tensor.sizes[i] > 1 && tensor.strides[i] != dense)
          return makeError(prefix + "strides " + list(tensor.strides) +
                           " are not dense; the kernels read and write it "
                           "densely");
        dense *= tensor.sizes[i];
      }
    }
    if (rule.written && !rule.dense &&
        elementsDistinct(tensor.sizes, tensor.strides) !=
            Distinctness::Distinct)
      return makeError(prefix + "strides " + list(tensor.strides) +
                       " make elements share memory (or cannot be shown not "
                       "to); the kernels write every element");
  }
  // The regions' extras, by the forward's rules; none may share memory
  // with what the kernels write.
  {
    Manifest regions;
    regions.extras = m.extras;
    if (llvm::Error refused = checkExtras(
            regions, t.extras, {&t.dq, &t.dk, &t.dv, &t.delta, &t.dqAccum},
            &shapes))
      return refused;
  }
  BackwardBuffers buffers;
  for (const Tensor &extra : t.extras)
    buffers.extras.push_back({extra.address, extra.sizes});
  buffers.q = t.q.address;
  buffers.k = t.k.address;
  buffers.v = t.v.address;
  buffers.o = t.o.address;
  buffers.dout = t.dout.address;
  buffers.lse = t.lse.address;
  buffers.dq = t.dq.address;
  buffers.dk = t.dk.address;
  buffers.dv = t.dv.address;
  buffers.delta = t.delta.address;
  buffers.dqAccum = t.dqAccum.address;
  buffers.qStrides = t.q.strides;
  buffers.kStrides = t.k.strides;
  buffers.vStrides = t.v.strides;
  buffers.oStrides = t.o.strides;
  buffers.doutStrides = t.dout.strides;
  buffers.dqStrides = t.dq.strides;
  buffers.dkStrides = t.dk.strides;
  buffers.dvStrides = t.dv.strides;
  auto encode = [&](const TensorMapSpec &spec, uint8_t *out) {
    return backend.encodeTensorMap(spec, out);
  };
  llvm::Expected<BackwardPlan> plan =
      planBackwardLaunch(m, shapes, buffers, encode);
  if (!plan)
    return plan.takeError();
  // What the kernels write shares memory with nothing else they touch
  // (once the strides are known to be sound: the plan checked them).
  for (const Rule &written : rules) {
    if (!written.written)
      continue;
    for (const Rule &other : rules)
      if (&other != &written && overlap(*written.tensor, *other.tensor))
        return makeError(std::string(written.name) + " shares memory with " +
                         other.name + "; the kernels would read what they "
                         "already overwrote");
  }
  // Each kernel run as the backends run a forward's: its entry, target and
  // shared memory, with the binary the three share.
  std::string digest = kernel.digest.forCode(kernel.ptx, kernel.cubin);
  for (int k = 0; k < 3; ++k) {
    KernelCode code{m.kernels[k].name, m.target,
                    m.kernels[k].dynamicSmemBytes, kernel.ptx, kernel.cubin,
                    digest};
    if (llvm::Error failed = backend.run(code, plan->kernels[k], stream))
      return prefixError(m.kernels[k].name + ": ", std::move(failed));
  }
  return llvm::Error::success();
}

namespace {
class EmulatorBackend final : public Backend {
public:
  EmulatorBackend(emu::Device &device, unsigned workers, uint64_t seed,
                  bool execute)
      : device(device), workers(workers), seed(seed), execute(execute) {}
  const char *name() const override { return "fa4-emu"; }
  bool runsPtx() const override { return true; }
  llvm::Error encodeTensorMap(const TensorMapSpec &spec,
                              uint8_t out[128]) override {
    return emu::encodeTensorMap(spec, out);
  }
  llvm::Error run(const KernelCode &kernel, const LaunchPlan &plan,
                  void *) override {
    if (!emu::emulatesTarget(kernel.target))
      return makeError("fa4-emu runs " + target::emulatedChips() +
                       " kernels; this one is for " + kernel.target);
    if (kernel.ptx.empty())
      return makeError(
          "fa4-emu runs the kernel's PTX, and the kernel has none");
    if (!execute)
      return llvm::Error::success();
    std::shared_ptr<const emu::Program> &program = programs[kernel.digest];
    if (!program) {
      llvm::Expected<std::shared_ptr<const emu::Program>> parsed =
          emu::parsePtx(kernel.ptx);
      if (!parsed)
        return parsed.takeError();
      program = std::move(*parsed);
    }
    if (emu::targetOf(*program) != kernel.target)
      return makeError("the manifest is for " + kernel.target +
                       " but the kernel's PTX targets " +
                       emu::targetOf(*program));
    emu::LaunchConfig config;
    config.kernel = kernel.entry;
    std::memcpy(config.grid, plan.grid, sizeof(config.grid));
    std::memcpy(config.block, plan.block, sizeof(config.block));
    config.dynamicSmemBytes = plan.dynamicSmemBytes;
    config.arguments = plan.arguments;
    config.seed = seed++;
    config.workers =
        workers ? workers : std::max(1u, std::thread::hardware_concurrency());
    llvm::Expected<emu::LaunchReport> report =
        emu::launch(*program, device, config);
    if (!report)
      return report.takeError();
    if (report->clean())
      return llvm::Error::success();
    // The first thing that went wrong, by kind.
    if (!report->errors.empty())
      return makeError("fa4-emu: " + report->errors.front());
    if (!report->deadlock.empty())
      return makeError("fa4-emu: " + report->deadlock.front());
    if (!report->hazards.empty())
      return makeError("fa4-emu: hazard: " + report->hazards.front());
    return makeError("fa4-emu: barrier misuse: " +
                     report->barrierMisuse.front());
  }

private:
  emu::Device &device;
  unsigned workers;
  uint64_t seed;
  bool execute;
  /// Parsed programs by their code's digest.
  std::map<std::string, std::shared_ptr<const emu::Program>> programs;
};
} // namespace

std::unique_ptr<Backend> createEmulatorBackend(emu::Device &device,
                                               unsigned workers, uint64_t seed,
                                               bool execute) {
  return std::make_unique<EmulatorBackend>(device, workers, seed, execute);
}

} // namespace mlir::fa4::runtime
