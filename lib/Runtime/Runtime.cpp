//===- Runtime.cpp - kernels, tensor checks, the emulator backend ---------===//

#include "fa4/Runtime/Runtime.h"

#include "fa4/Emu/Emulator.h"
#include "fa4/Runtime/Contract.h"
#include "fa4/Support/InputLimits.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

namespace mlir::fa4::runtime {

Backend::~Backend() = default;

bool Kernel::load(const std::string &manifestPath, Kernel &kernel,
                  std::string &error) {
  std::string json;
  if (!readRegularFile(manifestPath, kMaxManifestBytes, json, error))
    return false;
  if (!parseManifest(json, kernel.manifest, error)) {
    error = manifestPath + ": " + error;
    return false;
  }
  kernel.manifestJson = json;
  // The cubin and the PTX lie beside the manifest (parseManifest holds their
  // names to plain file names); either may be missing, but one that is
  // there must be a regular file of a bounded size.
  auto readBeside = [&](const std::string &name, std::string &contents) {
    if (name.empty())
      return true;
    llvm::SmallString<256> path(manifestPath);
    llvm::sys::path::remove_filename(path);
    llvm::sys::path::append(path, name);
    bool missing = false;
    std::string why;
    if (readRegularFile(std::string(path), kMaxKernelFileBytes, contents, why,
                        &missing)) {
      // An empty file is not an absent one: a kernel file cut to nothing
      // (a failed copy) must not pass as "no cubin".
      if (!contents.empty())
        return true;
      why = "cannot read " + std::string(path) + ": the file is empty";
    } else if (missing) {
      return true;
    }
    error = manifestPath + ": " + why;
    return false;
  };
  kernel.ptx.clear();
  kernel.cubin.clear();
  std::string cubin;
  if (!readBeside(kernel.manifest.ptx, kernel.ptx) ||
      !readBeside(kernel.manifest.cubin, cubin))
    return false;
  kernel.cubin.assign(cubin.begin(), cubin.end());
  if (kernel.ptx.empty() && kernel.cubin.empty()) {
    error = manifestPath + ": neither the cubin nor the PTX it names is there";
    return false;
  }
  if (!kernel.check(error)) {
    error = manifestPath + ": " + error;
    return false;
  }
  return true;
}

bool Kernel::create(std::string manifestJson, std::string ptx,
                    std::vector<uint8_t> cubin, Kernel &kernel,
                    std::string &error) {
  if (manifestJson.size() > kMaxManifestBytes) {
    error = "the manifest is " + std::to_string(manifestJson.size()) +
            " bytes, more than the " + std::to_string(kMaxManifestBytes) +
            " a manifest may have";
    return false;
  }
  for (auto [name, bytes] : {std::pair<const char *, size_t>{"PTX", ptx.size()},
                             {"cubin", cubin.size()}})
    if (bytes > kMaxKernelFileBytes) {
      error = std::string("the ") + name + " is " + std::to_string(bytes) +
              " bytes, more than the " + std::to_string(kMaxKernelFileBytes) +
              " a kernel file may have";
      return false;
    }
  if (!parseManifest(manifestJson, kernel.manifest, error))
    return false;
  if (ptx.empty() && cubin.empty()) {
    error = "the kernel has neither a cubin nor PTX";
    return false;
  }
  kernel.manifestJson = std::move(manifestJson);
  kernel.ptx = std::move(ptx);
  kernel.cubin = std::move(cubin);
  return kernel.check(error);
}

bool Kernel::check(std::string &error) const {
  if (!checkInterface(manifest, error) ||
      (!ptx.empty() && !checkPtxEntry(manifest, ptx, error)))
    return false;
  if (llvm::Error refused = checkContract(manifest, ptx, cubin)) {
    error = llvm::toString(std::move(refused));
    return false;
  }
  return true;
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
  size_t bytes = t.dtype == "fp16" || t.dtype == "bf16" ? 2 : extraElementBytes(t.dtype);
  return (last + 1) * bytes;
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

bool checkTensors(const Manifest &m, const Tensor &q, const Tensor &k,
                  const Tensor &v, const Tensor &o, const Tensor *lse,
                  Shapes &shapes, std::string &error) {
  // `tma`: any strides a tensor map expresses (contiguous along the last
  // axis, the others positive multiples of 16 bytes); else dense. A
  // dimension of size 1 is never stepped along: its stride is free.
  auto check = [&](const char *name, const Tensor &t, const std::string &dtype,
                   const std::vector<int64_t> &sizes, bool tma) -> bool {
    std::string prefix = std::string(name) + ": ";
    if (t.dtype != dtype) {
      error = prefix + "dtype " + t.dtype + ", the kernel takes " + dtype;
      return false;
    }
    if (t.sizes != sizes) {
      error = prefix + "sizes " + list(t.sizes) + ", the kernel expects " +
              list(sizes);
      return false;
    }
    if (t.strides.size() != sizes.size()) {
      error = prefix + "strides " + list(t.strides) + " do not match its rank";
      return false;
    }
    std::vector<int64_t> dense(sizes.size(), 1);
    for (size_t i = sizes.size() - 1; i > 0; --i)
      dense[i - 1] = dense[i] * sizes[i];
    int64_t bytes = t.dtype == "f32" ? 4 : 2;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 1 || t.strides[i] == dense[i])
        continue;
      if (!tma) {
        error = prefix + "strides " + list(t.strides) + " are not the dense " +
                list(dense) + " the kernel writes";
        return false;
      }
      if (i + 1 == sizes.size()) {
        error = prefix + "strides " + list(t.strides) +
                ": head_dim must be contiguous (stride 1) for TMA";
        return false;
      }
      if (t.strides[i] <= 0 || (t.strides[i] * bytes) % 16) {
        error = prefix + "strides " + list(t.strides) +
                ": every stride but head_dim's must be a positive multiple of 16 "
                "bytes for TMA";
        return false;
      }
      if (t.strides[i] >= (int64_t(1) << 40) / bytes) {
        error = prefix + "strides " + list(t.strides) +
                ": a stride of 2^40 bytes or more is beyond TMA";
        return false;
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
          error = prefix + "strides " + list(t.strides) + " differ from the " +
                  declared + "] the kernel was compiled for";
          return false;
        }
    }
    if (t.address % 16) {
      error = prefix + "base address is not 16-byte aligned (TMA needs it)";
      return false;
    }
    if (t.address == 0) {
      error = prefix + "null base address";
      return false;
    }
    return true;
  };
  // O's elements must not share memory: the kernel would race on them.
  auto distinct = [&](const Tensor &t) -> bool {
    switch (elementsDistinct(t.sizes, t.strides)) {
    case Distinctness::Distinct:
      return true;
    case Distinctness::Shared:
      error = "o: strides " + list(t.strides) +
              " make elements share memory (the kernel would race on them)";
      return false;
    case Distinctness::Unproven:
      error = "o: strides " + list(t.strides) +
              " interleave its axes too finely to prove its elements distinct "
              "(the kernel would race on shared ones); use a layout whose "
              "axes nest";
      return false;
    }
    return false;
  };
  // Where each tensor's elements lie: [address, address + span) bytes.
  // What the kernel writes must not share memory with what it reads (nor
  // O with the LSE): on a GPU it would read values it already overwrote.
  auto disjoint = [&](const char *written, const Tensor &w, const char *other,
                      const Tensor &r) {
    if (overlap(w, r)) {
      error = std::string(written) + ": shares memory with " + other +
              " (the kernel writes " + written + " while it reads " + other + ")";
      if (std::string(other) == "o")
        error = std::string(written) + ": shares memory with o (both are written)";
      return false;
    }
    return true;
  };
  if (q.sizes.size() != 4 || k.sizes.size() != 4) {
    error = std::string(q.sizes.size() != 4 ? "q" : "k") +
            ": expected [batch, seq, heads, head_dim], got rank " +
            std::to_string((q.sizes.size() != 4 ? q : k).sizes.size());
    return false;
  }
  shapes.batch = q.sizes[0];
  shapes.seqQ = q.sizes[1];
  shapes.seqK = k.sizes[1];
  if (shapes.batch <= 0 || shapes.seqQ <= 0 || shapes.seqK <= 0) {
    error = "batch, seq_q and seq_k must be positive, got " +
            list({shapes.batch, shapes.seqQ, shapes.seqK});
    return false;
  }
  // The size limits first: every product below stays far from overflow.
  if (!checkShapes(m, shapes, error))
    return false;
  std::vector<int64_t> qSizes{shapes.batch, shapes.seqQ, m.qHeads, m.headDim};
  std::vector<int64_t> kSizes{shapes.batch, shapes.seqK, m.kvHeads, m.headDim};
  if (!check("q", q, m.dtype, qSizes, true) || !check("k", k, m.dtype, kSizes, true) ||
      !check("v", v, m.dtype, kSizes, true) || !check("o", o, m.dtype, qSizes, true) ||
      !distinct(o))
    return false;
  if (m.lse && !lse) {
    error = "lse: the kernel writes the log-sum-exp; pass a tensor for it";
    return false;
  }
  if (!m.lse && lse) {
    error = "lse: the kernel writes no log-sum-exp (compile it with --lse)";
    return false;
  }
  if (lse && !check("lse", *lse, "f32", {shapes.batch, m.qHeads, shapes.seqQ}, false))
    return false;
  for (const Tensor *t : {&q, &k, &v, &o})
    if (spanBytes(*t) > ((unsigned __int128)1 << 48)) {
      error = std::string(t == &q ? "q" : t == &k ? "k" : t == &v ? "v" : "o") +
              ": its strides span more than 2^48 bytes";
      return false;
    }
  if (!disjoint("o", o, "q", q) || !disjoint("o", o, "k", k) || !disjoint("o", o, "v", v))
    return false;
  if (lse && (!disjoint("lse", *lse, "q", q) || !disjoint("lse", *lse, "k", k) ||
              !disjoint("lse", *lse, "v", v) || !disjoint("lse", *lse, "o", o)))
    return false;
  return true;
}

bool checkExtras(const Manifest &m, const std::vector<Tensor> &extras,
                 const std::vector<const Tensor *> &written, std::string &error,
                 const Shapes *shapes) {
  if (extras.size() != m.extras.size()) {
    error = "extras: the kernel reads " + std::to_string(m.extras.size()) +
            " extra tensors (its score_mod / mask_mod tables), got " +
            std::to_string(extras.size());
    return false;
  }
  for (size_t i = 0; i < extras.size(); ++i) {
    const Tensor &t = extras[i];
    const Manifest::Extra &want = m.extras[i];
    std::string name = "extra" + std::to_string(i);
    if (t.dtype != want.dtype) {
      error = name + ": expected dtype " + want.dtype + ", got " + t.dtype;
      return false;
    }
    if (!t.strides.empty() && t.strides.size() != t.sizes.size()) {
      error = name + ": has " + std::to_string(t.strides.size()) +
              " strides for " + std::to_string(t.sizes.size()) + " sizes";
      return false;
    }
    if (t.sizes.size() != want.shape.size()) {
      error = name + ": expected rank " + std::to_string(want.shape.size()) +
              ", got " + std::to_string(t.sizes.size());
      return false;
    }
    // Row-major and dense: the kernel computes offsets from the sizes.
    int64_t count = 1;
    for (size_t d = t.sizes.size(); d-- > 0;) {
      if (t.sizes[d] <= 0 || (want.shape[d] >= 0 && t.sizes[d] != want.shape[d])) {
        error = name + ": dimension " + std::to_string(d) + " is " +
                std::to_string(t.sizes[d]) + ", expected " +
                (want.shape[d] >= 0 ? std::to_string(want.shape[d])
                                    : std::string("a positive size"));
        return false;
      }
      if (!t.strides.empty() && t.strides[d] != count && t.sizes[d] != 1) {
        error = name + ": must be dense and row-major (the kernel indexes it "
                       "from its sizes)";
        return false;
      }
      if (t.sizes[d] >= (int64_t(1) << 31) / count) {
        error = name + ": 2^31 elements or more (the kernel's offsets are 32-bit)";
        return false;
      }
      count *= t.sizes[d];
    }
    size_t bytes = extraElementBytes(t.dtype);
    if (t.address % bytes) {
      error = name + ": its address is not aligned to its element size";
      return false;
    }
    for (const Tensor *w : written)
      if (w && overlap(t, *w)) {
        error = name + ": shares memory with an output the kernel writes";
        return false;
      }
    // The block mask has an entry for every batch, query head and block of
    // 128 queries (or one for all batches or heads).
    if (shapes && static_cast<int64_t>(i) == m.blockMask &&
        ((t.sizes[0] != 1 && t.sizes[0] != shapes->batch) ||
         (t.sizes[1] != 1 && t.sizes[1] != m.qHeads) ||
         t.sizes[2] != (shapes->seqQ + 127) / 128 || t.sizes[3] != 4)) {
      error = name + ": the block mask must be [batch or 1, q_heads or 1, "
                     "ceil(seq_q / 128), 4] = [" +
              std::to_string(shapes->batch) + " or 1, " +
              std::to_string(m.qHeads) + " or 1, " +
              std::to_string((shapes->seqQ + 127) / 128) + ", 4]";
      return false;
    }
  }
  return true;
}

bool launch(Backend &backend, const Kernel &kernel, const Tensor &q,
            const Tensor &k, const Tensor &v, const Tensor &o,
            const Tensor *lse, void *stream, std::string &error) {
  return launch(backend, kernel, q, k, v, o, lse, {}, stream, error);
}

bool launch(Backend &backend, const Kernel &kernel, const Tensor &q,
            const Tensor &k, const Tensor &v, const Tensor &o,
            const Tensor *lse, const std::vector<Tensor> &extras, void *stream,
            std::string &error) {
  Shapes shapes;
  if (!checkInterface(kernel.manifest, error))
    return false;
  // The manifest against the contract of the code this backend runs, on
  // every launch: a Kernel is a plain struct its caller may have filled or
  // edited since load(). The other file was checked by load(); scanning a
  // megabyte of PTX here would cost a CUDA launch more than its host work.
  if (llvm::Error refused = backend.runsPtx()
                                ? checkContract(kernel.manifest, kernel.ptx, {})
                                : checkContract(kernel.manifest, {}, kernel.cubin)) {
    error = llvm::toString(std::move(refused));
    return false;
  }
  if (!checkTensors(kernel.manifest, q, k, v, o, lse, shapes, error) ||
      !checkExtras(kernel.manifest, extras, {&o, lse}, error, &shapes))
    return false;
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
  LaunchPlan plan;
  auto encode = [&](const TensorMapSpec &spec, uint8_t *out, std::string &why) {
    return backend.encodeTensorMap(spec, out, why);
  };
  if (!planLaunch(kernel.manifest, shapes, buffers, encode, plan, error))
    return false;
  if (plan.tasks == 0)
    return true;
  return backend.run(kernel, plan, stream, error);
}

namespace {
class EmulatorBackend final : public Backend {
public:
  EmulatorBackend(emu::Device &device, unsigned workers, uint64_t seed,
                  bool execute)
      : device(device), workers(workers), seed(seed), execute(execute) {}
  const char *name() const override { return "fa4-emu"; }
  bool runsPtx() const override { return true; }
  bool encodeTensorMap(const TensorMapSpec &spec, uint8_t out[128],
                       std::string &error) override {
    return emu::encodeTensorMap(spec, out, error);
  }
  bool run(const Kernel &kernel, const LaunchPlan &plan, void *,
           std::string &error) override {
    if (!emu::emulatesTarget(kernel.manifest.target)) {
      error = "fa4-emu runs " + target::emulatedChips() + " kernels; this one is for " +
              kernel.manifest.target;
      return false;
    }
    if (kernel.ptx.empty()) {
      error = "fa4-emu runs the kernel's PTX, and the kernel has none";
      return false;
    }
    if (!execute)
      return true;
    std::shared_ptr<const emu::Program> &program = programs[kernel.ptx];
    if (!program) {
      program = emu::parsePtx(kernel.ptx, error);
      if (!program)
        return false;
    }
    if (emu::targetOf(*program) != kernel.manifest.target) {
      error = "the manifest is for " + kernel.manifest.target +
              " but the kernel's PTX targets " + emu::targetOf(*program);
      return false;
    }
    emu::LaunchConfig config;
    config.kernel = kernel.manifest.kernel;
    std::memcpy(config.grid, plan.grid, sizeof(config.grid));
    std::memcpy(config.block, plan.block, sizeof(config.block));
    config.dynamicSmemBytes = plan.dynamicSmemBytes;
    config.arguments = plan.arguments;
    config.seed = seed++;
    config.workers =
        workers ? workers : std::max(1u, std::thread::hardware_concurrency());
    emu::LaunchReport report;
    if (!emu::launch(*program, device, config, report, error))
      return false;
    if (report.clean())
      return true;
    // The first thing that went wrong, by kind.
    if (!report.errors.empty())
      error = "fa4-emu: " + report.errors.front();
    else if (!report.deadlock.empty())
      error = "fa4-emu: " + report.deadlock.front();
    else if (!report.hazards.empty())
      error = "fa4-emu: hazard: " + report.hazards.front();
    else
      error = "fa4-emu: barrier misuse: " + report.barrierMisuse.front();
    return false;
  }

private:
  emu::Device &device;
  unsigned workers;
  uint64_t seed;
  bool execute;
  std::map<std::string, std::shared_ptr<const emu::Program>> programs;
};
} // namespace

std::unique_ptr<Backend> createEmulatorBackend(emu::Device &device,
                                               unsigned workers, uint64_t seed,
                                               bool execute) {
  return std::make_unique<EmulatorBackend>(device, workers, seed, execute);
}

} // namespace mlir::fa4::runtime
