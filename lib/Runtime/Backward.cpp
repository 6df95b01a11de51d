//===- Backward.cpp - the backward's manifest and launches ----------------===//

#include "fa4/Runtime/Backward.h"

#include <tuple>

#include "Fields.h"

#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Target/Target.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>

namespace mlir::fa4::runtime {

static const char *const kKernelKeys[3] = {"prepare", "main", "finish"};

bool isBackwardManifest(const std::string &json) {
  llvm::Expected<llvm::json::Value> parsed = parseManifestJson(json);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return false;
  }
  const llvm::json::Object *top = parsed->getAsObject();
  return top && top->getString("kind") == "backward";
}

llvm::Expected<BackwardManifest>
parseBackwardManifest(const std::string &json) {
  llvm::Expected<llvm::json::Value> parsed = parseManifestJson(json);
  if (!parsed)
    return parsed.takeError();
  std::string error;
  BackwardManifest m;
  const llvm::json::Object *object = parsed->getAsObject();
  if (object && object->getString("kind") != "backward")
    return makeError("manifest: not a backward's (no \"kind\": "
                     "\"backward\"): a forward kernel's manifest is read by "
                     "runtime::Kernel::load (fa4rt_kernel_load)");
  Fields top(object, "(top level)", error);
  m.cubin = top.string("cubin");
  m.ptx = top.string("ptx");
  for (auto [field, name] :
       {std::pair<const char *, const std::string *>{"cubin", &m.cubin},
        {"ptx", &m.ptx}})
    if (!isPlainFileName(*name))
      top.fail("\"" + std::string(field) +
               "\" must name a file beside the manifest (no directory part, "
               "not . or ..), got \"" + *name + "\"");
  m.target = top.string("target");
  if (top.ok() && !target::lookup(m.target))
    top.fail("has \"target\" " + target::unknownChipMessage(m.target));
  m.smCount = top.integer("sm_count");
  if (top.ok() && (m.smCount < 1 || m.smCount >= (int64_t(1) << 31)))
    top.fail("has \"sm_count\" " + std::to_string(m.smCount) +
             ", not in [1, 2^31)");

  Fields attention(top.child("attention"), "\"attention\"", error);
  m.mask = attention.string("mask");
  m.windowLeft = attention.integer("window_left");
  m.windowRight = attention.integer("window_right");
  m.scale = attention.number("scale");
  m.softcap = attention.number("softcap");
  m.headDim = attention.integer("head_dim");
  m.qHeads = attention.integer("q_heads");
  m.kvHeads = attention.integer("kv_heads");
  m.dtype = attention.string("dtype");
  m.deterministic = attention.boolean("deterministic");
  if (const llvm::json::Value *flag = attention.optional("score_mod"))
    m.scoreMod = flag->getAsBoolean().value_or(false);
  if (const llvm::json::Value *flag = attention.optional("mask_mod"))
    m.maskMod = flag->getAsBoolean().value_or(false);
  m.gqaPacking = attention.integer("gqa_packing");
  m.stepRows = attention.integer("step_rows");
  for (auto [name, size] :
       {std::pair<const char *, int64_t *>{"static_batch", &m.staticBatch},
        {"static_seq_q", &m.staticSeqQ},
        {"static_seq_k", &m.staticSeqK}})
    if (attention.optional(name)) {
      *size = attention.integer(name);
      if (attention.ok() && *size < 1)
        attention.fail(std::string("has \"") + name + "\" " +
                       std::to_string(*size) + " (a fixed size is positive)");
    }
  if (attention.ok()) {
    // A step's rows are the family's (its schedule's Q and dO tiles): the
    // TMA boxes the launch encodes must be the kernel's, or its copies
    // overrun the ring slots (64 where 128 was compiled) or never fill
    // them (a hang).
    const target::ChipInfo *chip = target::lookup(m.target);
    int64_t expected =
        chip && chip->family == target::Family::Blackwell ? 128 : 64;
    if (chip && m.stepRows != expected)
      attention.fail("has \"step_rows\" " + std::to_string(m.stepRows) +
                     ", but the backward's steps on " + m.target + " are " +
                     std::to_string(expected) + " rows");
    if (m.mask != "none" && m.mask != "causal" && m.mask != "window")
      attention.fail("has an unknown \"mask\" \"" + m.mask + "\"");
    if (m.dtype != "fp16" && m.dtype != "bf16")
      attention.fail("has an unknown \"dtype\" \"" + m.dtype + "\"");
    if (!llvm::is_contained(kBackwardHeadDims, m.headDim))
      attention.fail("has \"head_dim\" " + std::to_string(m.headDim) +
                     " (the backward's are 32, 64, 96 and 128)");
    if (m.qHeads < 1 || m.kvHeads < 1 || m.qHeads >= (int64_t(1) << 31) ||
        m.qHeads % m.kvHeads != 0)
      attention.fail("has \"q_heads\" " + std::to_string(m.qHeads) +
                     " that is not a positive multiple of \"kv_heads\" " +
                     std::to_string(m.kvHeads));
    else if (m.gqaPacking != gqaPacking(m.qHeads / m.kvHeads))
      attention.fail("has \"gqa_packing\" " + std::to_string(m.gqaPacking) +
                     ", but the kernels pack " +
                     std::to_string(gqaPacking(m.qHeads / m.kvHeads)) +
                     " query heads for this GQA ratio");
    if (!(m.scale > 0.0) || m.softcap < 0.0)
      attention.fail("has a \"scale\" that is not positive or a negative "
                     "\"softcap\"");
  }

  if (error.empty())
    readExtras(top, m.extras, error);
  if (error.empty() && !m.extras.empty() && !m.scoreMod && !m.maskMod)
    top.fail("has \"extras\" but no score_mod or mask_mod to read them");

  Fields kernels(top.child("kernels"), "\"kernels\"", error);
  for (int k = 0; k < 3; ++k) {
    Fields kernel(kernels.child(kKernelKeys[k]),
                  "\"kernels\"." + std::string(kKernelKeys[k]), error);
    BackwardManifest::Kernel &entry = m.kernels[k];
    entry.name = kernel.string("name");
    int64_t block = kernel.integer("block");
    int64_t smem = kernel.integer("dynamic_smem_bytes");
    if (kernel.ok() && (block < 32 || block > 1024 || block % 32 != 0))
      kernel.fail("has \"block\" " + std::to_string(block) +
                  ", not whole warps up to 1024 threads");
    if (kernel.ok() && (smem < 0 || smem > (int64_t(1) << 20)))
      kernel.fail("has \"dynamic_smem_bytes\" " + std::to_string(smem) +
                  ", not 0 to 2^20");
    entry.block = static_cast<uint32_t>(std::clamp<int64_t>(block, 0, 1024));
    entry.dynamicSmemBytes =
        static_cast<uint32_t>(std::clamp<int64_t>(smem, 0, 1 << 20));
    if (const llvm::json::Value *roles = kernel.optional("roles")) {
      const llvm::json::Array *list = roles->getAsArray();
      if (!list) {
        kernel.fail("has \"roles\" that is not an array");
        continue;
      }
      for (size_t i = 0; i < list->size(); ++i) {
        Fields role((*list)[i].getAsObject(), "roles[" + std::to_string(i) + "]",
                    error);
        Manifest::Role r;
        r.name = role.string("name");
        r.firstWarp = role.integer("first_warp");
        r.numWarps = role.integer("num_warps");
        r.registers = role.integer("registers");
        if (role.ok() && (r.firstWarp < 0 || r.numWarps < 1 ||
                          (r.firstWarp + r.numWarps) * 32 > block))
          role.fail("names warps outside the kernel's block");
        entry.roles.push_back(std::move(r));
      }
    }
  }
  if (!error.empty())
    return makeError(error);
  return std::move(m);
}

std::string writeBackwardManifest(const BackwardManifest &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream json(os, 2);
  json.object([&] {
    json.attribute("kind", "backward");
    json.attribute("cubin", m.cubin);
    json.attribute("ptx", m.ptx);
    json.attribute("target", m.target);
    json.attribute("sm_count", m.smCount);
    json.attributeObject("attention", [&] {
      json.attribute("mask", m.mask);
      json.attribute("window_left", m.windowLeft);
      json.attribute("window_right", m.windowRight);
      json.attribute("scale", m.scale);
      json.attribute("softcap", m.softcap);
      json.attribute("head_dim", m.headDim);
      json.attribute("q_heads", m.qHeads);
      json.attribute("kv_heads", m.kvHeads);
      json.attribute("dtype", m.dtype);
      json.attribute("deterministic", m.deterministic);
      if (m.scoreMod)
        json.attribute("score_mod", true);
      if (m.maskMod)
        json.attribute("mask_mod", true);
      json.attribute("gqa_packing", m.gqaPacking);
      json.attribute("step_rows", m.stepRows);
      if (m.staticBatch >= 0)
        json.attribute("static_batch", m.staticBatch);
      if (m.staticSeqQ >= 0)
        json.attribute("static_seq_q", m.staticSeqQ);
      if (m.staticSeqK >= 0)
        json.attribute("static_seq_k", m.staticSeqK);
    });
    if (!m.extras.empty())
      json.attributeArray("extras", [&] {
        for (size_t i = 0; i < m.extras.size(); ++i)
          json.object([&] {
            json.attribute("name", "extra" + std::to_string(i));
            json.attribute("dtype", m.extras[i].dtype);
            json.attributeArray("shape", [&] {
              for (int64_t dim : m.extras[i].shape)
                json.value(dim);
            });
            json.attribute("layout", "row-major");
          });
      });
    json.attributeObject("kernels", [&] {
      for (int k = 0; k < 3; ++k)
        json.attributeObject(kKernelKeys[k], [&] {
          const BackwardManifest::Kernel &kernel = m.kernels[k];
          json.attribute("name", kernel.name);
          json.attribute("block", static_cast<int64_t>(kernel.block));
          json.attribute("dynamic_smem_bytes",
                         static_cast<int64_t>(kernel.dynamicSmemBytes));
          if (!kernel.roles.empty())
            json.attributeArray("roles", [&] {
              for (const Manifest::Role &role : kernel.roles)
                json.object([&] {
                  json.attribute("name", role.name);
                  json.attribute("first_warp", role.firstWarp);
                  json.attribute("num_warps", role.numWarps);
                  json.attribute("registers", role.registers);
                });
            });
        });
    });
  });
  os << "\n";
  return text;
}

static std::vector<BackwardParameter> backwardFixedParameters(int kernel);

std::vector<BackwardParameter>
backwardParameters(int kernel, const BackwardManifest &manifest) {
  std::vector<BackwardParameter> params = backwardFixedParameters(kernel);
  if (kernel == 1)
    for (const Manifest::Extra &extra : manifest.extras) {
      params.push_back({"extra", 8});
      for (int64_t dim : extra.shape)
        if (dim < 0)
          params.push_back({"extra_dim", 4});
    }
  return params;
}

static std::vector<BackwardParameter> backwardFixedParameters(int kernel) {
  switch (kernel) {
  case 0:
    return {{"o", 8},           {"o_stride_batch", 8},    {"o_stride_seq", 8},
            {"o_stride_head", 8}, {"dout", 8},            {"dout_stride_batch", 8},
            {"dout_stride_seq", 8}, {"dout_stride_head", 8}, {"delta", 8},
            {"dq_accum", 8},    {"batch", 4},             {"seq_q", 4}};
  case 1:
    return {{"q_map", 128},     {"k_map", 128},         {"v_map", 128},
            {"dout_map", 128},  {"dq_accum_map", 128},  {"lse", 8},
            {"delta", 8},
            {"dq_accum", 8},    {"dk", 8},              {"dk_stride_batch", 8},
            {"dk_stride_seq", 8}, {"dk_stride_head", 8}, {"dv", 8},
            {"dv_stride_batch", 8}, {"dv_stride_seq", 8}, {"dv_stride_head", 8},
            {"batch", 4},       {"seq_q", 4},           {"seq_k", 4}};
  default:
    return {{"dq_accum", 8},   {"dq", 8},       {"dq_stride_batch", 8},
            {"dq_stride_seq", 8}, {"dq_stride_head", 8}, {"batch", 4},
            {"seq_q", 4}};
  }
}

namespace {
/// The strides given, or the dense ones of `sizes`; checked positive (a
/// dimension of size 1 may have any) and, when `pairs`, even: the kernels
/// move pairs of elements in 4-byte words.
llvm::Expected<std::vector<int64_t>>
stridesOf(const char *name, const std::vector<int64_t> &sizes,
          const std::vector<int64_t> &given) {
  std::vector<int64_t> dense(4, 1);
  for (size_t i = 3; i > 0; --i)
    dense[i - 1] = dense[i] * sizes[i];
  if (given.empty())
    return dense;
  if (given.size() != 4)
    return makeError(std::string(name) + ": 4 strides expected, got " +
                     std::to_string(given.size()));
  // An axis of size 1 is never stepped along: its stride is free, and the
  // dense one stands for it (a tensor map takes it).
  std::vector<int64_t> strides = given;
  for (size_t i = 0; i < 4; ++i)
    if (sizes[i] == 1)
      strides[i] = dense[i];
  if (strides[3] != 1)
    return makeError(std::string(name) +
                     ": head_dim must be contiguous (stride 1)");
  for (int axis = 0; axis < 3; ++axis) {
    if (sizes[axis] == 1)
      continue;
    if (strides[axis] <= 0 || strides[axis] >= (int64_t(1) << 40))
      return makeError(std::string(name) + ": the stride of axis " +
                       std::to_string(axis) + " is not positive and below 2^40");
    if (strides[axis] % 2 != 0)
      return makeError(std::string(name) + ": the stride of axis " +
                       std::to_string(axis) +
                       " is odd; the kernels move pairs of elements");
  }
  return strides;
}

void scalar(std::vector<uint8_t> &bytes, const void *value, size_t size) {
  bytes.resize(size);
  std::memcpy(bytes.data(), value, size);
}
} // namespace

llvm::Expected<BackwardPlan>
planBackwardLaunch(const BackwardManifest &m, const Shapes &shapes,
                   const BackwardBuffers &buffers,
                   const TensorMapEncoder &encode) {
  // The forward's limits: the same 32-bit indices.
  Manifest limits;
  limits.qHeads = m.qHeads;
  limits.kvHeads = m.kvHeads;
  limits.headDim = m.headDim;
  if (llvm::Error refused = checkShapes(limits, shapes))
    return std::move(refused);
  // Sizes the entry IR fixed, as the forward's launch names them.
  for (auto [tensor, axis, fixed, given] :
       {std::tuple<const char *, const char *, int64_t, int64_t>{
            "q", "batch", m.staticBatch, shapes.batch},
        {"q", "seq_q", m.staticSeqQ, shapes.seqQ},
        {"k", "seq_k", m.staticSeqK, shapes.seqK}})
    if (fixed >= 0 && fixed != given)
      return makeError(std::string(tensor) + ": " + axis + " is " +
                       std::to_string(given) +
                       ", but the kernel was compiled for " +
                       std::to_string(fixed) +
                       " (a static size of its entry IR)");
  if (m.qHeads % m.kvHeads != 0 ||
      m.gqaPacking != gqaPacking(m.qHeads / m.kvHeads))
    return makeError("manifest: the heads and gqa_packing disagree");
  TensorMapDataType dataType = m.dtype == "bf16" ? TensorMapDataType::BFloat16
                                                 : TensorMapDataType::Float16;
  std::vector<int64_t> querySizes{shapes.batch, shapes.seqQ, m.qHeads,
                                  m.headDim};
  std::vector<int64_t> keySizes{shapes.batch, shapes.seqK, m.kvHeads,
                                m.headDim};
  struct Named {
    const char *name;
    uint64_t address;
    const std::vector<int64_t> *sizes, *given;
  };
  Named tensors[] = {
      {"q", buffers.q, &querySizes, &buffers.qStrides},
      {"k", buffers.k, &keySizes, &buffers.kStrides},
      {"v", buffers.v, &keySizes, &buffers.vStrides},
      {"o", buffers.o, &querySizes, &buffers.oStrides},
      {"dout", buffers.dout, &querySizes, &buffers.doutStrides},
      {"dq", buffers.dq, &querySizes, &buffers.dqStrides},
      {"dk", buffers.dk, &keySizes, &buffers.dkStrides},
      {"dv", buffers.dv, &keySizes, &buffers.dvStrides},
  };
  llvm::StringMap<std::vector<int64_t>> strides;
  for (const Named &t : tensors) {
    if (!t.address || t.address % 16 != 0)
      return makeError(std::string(t.name) +
                       ": needs a non-null, 16-byte-aligned address");
    llvm::Expected<std::vector<int64_t>> s =
        stridesOf(t.name, *t.sizes, *t.given);
    if (!s)
      return s.takeError();
    strides[t.name] = std::move(*s);
  }
  for (auto [name, address] :
       {std::pair<const char *, uint64_t>{"lse", buffers.lse},
        {"delta", buffers.delta},
        {"dq_accum", buffers.dqAccum}})
    if (!address || address % 16 != 0)
      return makeError(std::string(name) +
                       ": needs a non-null, 16-byte-aligned address");

  // The extras: one buffer each, of the manifest's rank and static sizes.
  if (buffers.extras.size() != m.extras.size())
    return makeError("the backward's regions read " +
                     std::to_string(m.extras.size()) + " extras; " +
                     std::to_string(buffers.extras.size()) + " given");
  for (size_t i = 0; i < m.extras.size(); ++i) {
    const Buffers::Extra &given = buffers.extras[i];
    const std::vector<int64_t> &declared = m.extras[i].shape;
    bool fits = given.address != 0 && given.shape.size() == declared.size();
    for (size_t d = 0; fits && d < declared.size(); ++d)
      fits = given.shape[d] >= 1 && given.shape[d] < (int64_t(1) << 31) &&
             (declared[d] < 0 || declared[d] == given.shape[d]);
    if (!fits)
      return makeError("extra" + std::to_string(i) +
                       ": needs a non-null address and a shape of the "
                       "manifest's rank and static sizes, each in [1, 2^31)");
  }

  BackwardPlan plan;
  int64_t rows = shapes.batch * shapes.seqQ * m.qHeads;
  for (int k = 0; k < 3; ++k) {
    LaunchPlan &launch = plan.kernels[k];
    launch.block[0] = m.kernels[k].block;
    launch.dynamicSmemBytes = m.kernels[k].dynamicSmemBytes;
    if (k == 1) {
      launch.tasks = shapes.batch * m.kvHeads * ceilDiv(shapes.seqK, 128);
      // The deterministic order hands a CTA whole K/V heads: no more CTAs
      // than (batch, K/V head) pairs have work.
      int64_t units =
          m.deterministic ? shapes.batch * m.kvHeads : launch.tasks;
      launch.grid[0] = static_cast<uint32_t>(
          std::max<int64_t>(1, std::min(m.smCount, units)));
    } else {
      // A warp per row, grid-stride: at most 16 CTAs per SM.
      launch.tasks = rows;
      int64_t warps = std::max<int64_t>(1, m.kernels[k].block / 32);
      launch.grid[0] = static_cast<uint32_t>(std::max<int64_t>(
          1, std::min(ceilDiv(rows, warps), m.smCount * 16)));
    }
  }

  // The main kernel's tensor maps: [head_dim, heads, seq, batch], boxes of
  // a 128-byte line of columns (64 of 16 bits, 32 f32) by its tiles' rows
  // (Q, dO and the dQ accumulator's reductions: a step's rows,
  // `gqa_packing` packed heads; K and V: 128 keys), 128-byte swizzle, zero
  // fill.
  strides["dq_accum"] = {shapes.seqQ * m.qHeads * m.headDim,
                         m.qHeads * m.headDim, m.headDim, 1};
  auto mapOf = [&](const char *name, uint64_t address, int64_t heads,
                   int64_t seq, int64_t rowsPerBox, int64_t boxHeads,
                   bool f32 = false) -> llvm::Expected<std::vector<uint8_t>> {
    const std::vector<int64_t> &s = strides[name];
    int64_t elementBytes = f32 ? 4 : 2;
    TensorMapSpec spec;
    spec.dataType = f32 ? TensorMapDataType::Float32 : dataType;
    spec.rank = 4;
    spec.globalAddress = address;
    spec.swizzle = TensorMapSwizzle::Bytes128;
    spec.oobFill = TensorMapOobFill::Zero;
    uint64_t dims[4] = {static_cast<uint64_t>(m.headDim),
                        static_cast<uint64_t>(heads),
                        static_cast<uint64_t>(seq),
                        static_cast<uint64_t>(shapes.batch)};
    int axes[4] = {3, 2, 1, 0};
    uint32_t box[4] = {static_cast<uint32_t>(128 / elementBytes),
                       static_cast<uint32_t>(boxHeads),
                       static_cast<uint32_t>(rowsPerBox / boxHeads), 1};
    for (int d = 0; d < 4; ++d) {
      spec.globalDims[d] = dims[d];
      spec.boxDims[d] = box[d];
      if (d > 0) {
        int64_t bytes = s[axes[d]] * elementBytes;
        // TMA: strides multiples of 16 bytes (any for a size-1 axis).
        if (dims[d] > 1 && bytes % 16 != 0)
          return makeError(std::string(name) + ": the stride of axis " +
                           std::to_string(axes[d]) +
                           " is not a multiple of 16 bytes (TMA's rule)");
        spec.globalStrides[d - 1] =
            static_cast<uint64_t>(dims[d] > 1 ? bytes : 16 * ((bytes + 15) / 16));
      }
    }
    std::vector<uint8_t> bytes(128, 0);
    if (llvm::Error refused = encode(spec, bytes.data()))
      return prefixError(std::string("the tensor map of \"") + name +
                             "\" cannot be encoded: ",
                         std::move(refused));
    return bytes;
  };
  int64_t packing = m.gqaPacking;
  llvm::Expected<std::vector<uint8_t>> maps[] = {
      mapOf("q", buffers.q, m.qHeads, shapes.seqQ, m.stepRows, packing),
      mapOf("k", buffers.k, m.kvHeads, shapes.seqK, 128, 1),
      mapOf("v", buffers.v, m.kvHeads, shapes.seqK, 128, 1),
      mapOf("dout", buffers.dout, m.qHeads, shapes.seqQ, m.stepRows, packing),
      mapOf("dq_accum", buffers.dqAccum, m.qHeads, shapes.seqQ, m.stepRows,
            packing, /*f32=*/true)};
  for (auto &map : maps)
    if (!map)
      return map.takeError();

  for (int k = 0; k < 3; ++k) {
    std::vector<std::vector<uint8_t>> &arguments = plan.kernels[k].arguments;
    int map = 0;
    // The extras' parameters, in order: each address, then its dynamic
    // sizes.
    size_t nextExtra = 0, current = 0, dim = 0;
    for (const BackwardParameter &p : backwardParameters(k, m)) {
      std::vector<uint8_t> bytes;
      std::string name = p.name;
      if (name == "extra") {
        current = nextExtra++;
        dim = 0;
        scalar(bytes, &buffers.extras[current].address, 8);
      } else if (name == "extra_dim") {
        const std::vector<int64_t> &declared = m.extras[current].shape;
        while (dim < declared.size() && declared[dim] >= 0)
          ++dim;
        int32_t value =
            static_cast<int32_t>(buffers.extras[current].shape[dim++]);
        scalar(bytes, &value, 4);
      } else if (p.bytes == 128) {
        bytes = std::move(*maps[map++]);
      } else if (p.bytes == 4) {
        int32_t value = static_cast<int32_t>(
            name == "batch" ? shapes.batch
            : name == "seq_q" ? shapes.seqQ
                              : shapes.seqK);
        scalar(bytes, &value, 4);
      } else if (size_t at = name.find("_stride_"); at != std::string::npos) {
        std::string tensor = name.substr(0, at);
        std::string axis = name.substr(at + 8);
        int64_t value = strides[tensor][axis == "batch" ? 0
                                        : axis == "seq" ? 1
                                                        : 2];
        scalar(bytes, &value, 8);
      } else {
        uint64_t address = name == "o"       ? buffers.o
                           : name == "dout"  ? buffers.dout
                           : name == "delta" ? buffers.delta
                           : name == "dq_accum" ? buffers.dqAccum
                           : name == "lse"   ? buffers.lse
                           : name == "dk"    ? buffers.dk
                           : name == "dv"    ? buffers.dv
                                             : buffers.dq;
        scalar(bytes, &address, 8);
      }
      arguments.push_back(std::move(bytes));
    }
  }
  return std::move(plan);
}

} // namespace mlir::fa4::runtime
