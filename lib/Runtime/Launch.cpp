//===- Launch.cpp - from a launch manifest to launch arguments --------------===//

#include "fa4/Runtime/Launch.h"

#include "Fields.h"
#include "fa4/Runtime/Fp8Value.h"
#include "fa4/Support/AttentionMath.h"
#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"
#include "fa4/Support/TileScheduler.h"
#include "fa4/Target/Target.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <cstring>

namespace mlir::fa4::runtime {

namespace {
/// A manifest size: a number, a variable, or "N * variable".
/// `seq_k_padded` is the keys of FP8's vt layout (Fp8Value.h).
bool evaluate(const std::string &text, const Shapes &shapes, int64_t &value) {
  int64_t result = 1;
  size_t from = 0;
  while (from <= text.size()) {
    size_t star = text.find('*', from);
    std::string term = text.substr(from, star == std::string::npos ? std::string::npos
                                                                   : star - from);
    size_t b = term.find_first_not_of(' '), e = term.find_last_not_of(' ');
    if (b == std::string::npos)
      return false;
    term = term.substr(b, e - b + 1);
    int64_t factor;
    if (term == "batch")
      factor = shapes.batch;
    else if (term == "seq_q")
      factor = shapes.seqQ;
    else if (term == "seq_k")
      factor = shapes.seqK;
    else if (term == "seq_k_padded")
      factor = vtPaddedKeys(shapes.seqK);
    else if (term == "num_blocks")
      factor = shapes.numBlocks;
    else {
      char *end = nullptr;
      factor = std::strtoll(term.c_str(), &end, 10);
      if (*end != '\0' || term.empty())
        return false;
    }
    if (factor != 0 && result > INT64_MAX / factor)
      return false;
    result *= factor;
    if (star == std::string::npos)
      break;
    from = star + 1;
  }
  value = result;
  return true;
}

/// A size or stride of a tensor map: a positive integer, or a non-empty
/// expression (in `batch`, `seq_q`, `seq_k`; checked where it is
/// evaluated); "" for anything else, which the caller refuses.
std::string asText(const llvm::json::Value &value) {
  if (auto i = value.getAsInteger())
    return *i > 0 ? std::to_string(*i) : "";
  if (auto s = value.getAsString())
    return s->str();
  return "";
}

bool dataTypeOf(const std::string &dtype, TensorMapDataType &type) {
  if (dtype == "fp16")
    type = TensorMapDataType::Float16;
  else if (dtype == "bf16")
    type = TensorMapDataType::BFloat16;
  else if (dtype == "f32")
    type = TensorMapDataType::Float32;
  else if (dtype == "e4m3")
    type = TensorMapDataType::UInt8; // TMA has no FP8 type; bytes move alike
  else
    return false;
  return true;
}
/// N of "<prefix>N", or -1.
int64_t extraIndex(const std::string &name, const char *prefix) {
  std::string head(prefix);
  if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0)
    return -1;
  int64_t value = 0;
  for (char c : name.substr(head.size())) {
    if (c < '0' || c > '9' || value > 1000000)
      return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}
} // namespace

bool isPlainFileName(const std::string &name) {
  if (name.empty())
    return true;
  return name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

size_t tensorElementBytes(const std::string &dtype) {
  if (dtype == "e4m3")
    return 1;
  if (dtype == "fp16" || dtype == "bf16")
    return 2;
  return extraElementBytes(dtype);
}

size_t extraElementBytes(const std::string &dtype) {
  if (dtype == "f32" || dtype == "i32")
    return 4;
  if (dtype == "f16" || dtype == "bf16" || dtype == "i16")
    return 2;
  if (dtype == "f64" || dtype == "i64")
    return 8;
  if (dtype == "i8" || dtype == "i1")
    return 1;
  return 0;
}

namespace {
// The manifest's sections, one reader each, in the order they are read:
// Fields keep the first failure, so that order decides which one a
// manifest broken in several places is refused for. A reader returns false
// where reading on would look past a failure (an array of the wrong
// length); the rest go on and the caller sees the failure at the end.

/// "kernel", "cubin", "ptx" (optional), "block" and "target".
void readKernel(Fields &top, const llvm::json::Object *object, Manifest &m) {
  m.kernel = top.string("kernel");
  m.cubin = top.string("cubin");
  if (object)
    if (auto ptx = object->getString("ptx"))
      m.ptx = ptx->str();
  // The cubin and the PTX lie beside the manifest: a name with a directory
  // part (`../x`, `/dev/zero`) would read any file of the machine.
  for (auto [field, name] : {std::pair<const char *, const std::string *>{"cubin", &m.cubin},
                             {"ptx", &m.ptx}})
    if (!isPlainFileName(*name))
      top.fail("\"" + std::string(field) + "\" must name a file beside the manifest "
               "(no directory part, not . or ..), got \"" + *name + "\"");
  if (const llvm::json::Array *block = top.array("block")) {
    if (block->size() != 3)
      top.fail("\"block\" is not [x, y, z]");
    for (size_t i = 0; i < block->size() && i < 3; ++i) {
      int64_t extent = (*block)[i].getAsInteger().value_or(0);
      if (extent < 1 || extent > 1024)
        top.fail("\"block\" entries must be 1 to 1024, got " + std::to_string(extent));
      m.block[i] = static_cast<uint32_t>(std::clamp<int64_t>(extent, 0, 1024));
    }
  }
  m.target = top.string("target");
  if (top.ok() && !target::lookup(m.target))
    top.fail("has \"target\" " + target::unknownChipMessage(m.target));
}

/// "grid" (its sm_count and order), "dynamic_smem_bytes" and
/// "tmem_columns".
void readResources(Fields &top, Manifest &m, std::string &error) {
  Fields grid(top.child("grid"), "\"grid\"", error);
  m.smCount = grid.integer("sm_count");
  // The persistent grid's size is a 32-bit launch dimension (as fa4c's
  // --sm-count); its "policy", "size" and "tasks" are derived from the
  // fields here and written again from them.
  if (m.smCount >= (int64_t(1) << 31))
    grid.fail("has \"sm_count\" " + std::to_string(m.smCount) +
              ", not below 2^31");
  m.order = grid.string("order");
  if (grid.optional("cluster")) {
    m.cluster = grid.integer("cluster");
    if (grid.ok() && m.cluster != 1 && m.cluster != 2)
      grid.fail("has \"cluster\" " + std::to_string(m.cluster) +
                ": 1, or 2 for a kernel of CTA pairs");
  }
  // Read at full width and ranged: a cast alone would wrap 2^32 to 0.
  int64_t smemBytes = top.integer("dynamic_smem_bytes");
  int64_t tmemColumns = top.integer("tmem_columns");
  if (smemBytes < 0 || smemBytes > (int64_t(1) << 20))
    top.fail("\"dynamic_smem_bytes\" must be 0 to 2^20, got " + std::to_string(smemBytes));
  if (tmemColumns < 0 || tmemColumns > 512)
    top.fail("\"tmem_columns\" must be 0 to 512, got " + std::to_string(tmemColumns));
  m.dynamicSmemBytes = static_cast<uint32_t>(std::clamp<int64_t>(smemBytes, 0, 1 << 20));
  m.tmemColumns = static_cast<uint32_t>(std::clamp<int64_t>(tmemColumns, 0, 512));
}

/// "attention": the variant. A malformed block_mask is refused at once, in
/// its own words (whatever failed before it).
void readAttention(Fields &attention, Manifest &m, std::string &error) {
  m.mask = attention.string("mask");
  m.windowLeft = attention.integer("window_left");
  m.windowRight = attention.integer("window_right");
  m.scale = attention.number("scale");
  m.softcap = attention.number("softcap");
  m.headDim = attention.integer("head_dim");
  m.valueHeadDim = m.headDim;
  if (attention.optional("v_head_dim"))
    m.valueHeadDim = attention.integer("v_head_dim");
  if (attention.optional("o_by_address"))
    m.oByAddress = attention.boolean("o_by_address");
  m.qHeads = attention.integer("q_heads");
  m.kvHeads = attention.integer("kv_heads");
  m.dtype = attention.string("dtype");
  // (Absent from the manifests of fa4s before FP8: O in the inputs' type.)
  m.outDtype = m.dtype;
  if (attention.optional("out_dtype"))
    m.outDtype = attention.string("out_dtype");
  m.lse = attention.boolean("lse");
  m.rowsPerTask = attention.integer("rows_per_task");
  if (const llvm::json::Value *flag = attention.optional("score_mod"))
    m.scoreMod = flag->getAsBoolean().value_or(false);
  if (const llvm::json::Value *flag = attention.optional("mask_mod"))
    m.maskMod = flag->getAsBoolean().value_or(false);
  // The optional positions and sizes: absent, -1 / 0.
  for (auto [key, field] : {std::pair{"block_mask", &m.blockMask},
                            std::pair{"seqused_k", &m.seqUsedK},
                            std::pair{"block_table", &m.blockTable},
                            std::pair{"page_size", &m.pageSize},
                            std::pair{"num_splits", &m.numSplits},
                            std::pair{"split_workspace", &m.splitWorkspace},
                            std::pair{"cu_seqlens_q", &m.cuSeqlensQ},
                            std::pair{"cu_seqlens_k", &m.cuSeqlensK}})
    if (const llvm::json::Value *position = attention.optional(key)) {
      std::optional<int64_t> value = position->getAsInteger();
      if (!value || *value < 0 || *value >= (int64_t(1) << 31)) {
        error = std::string("manifest: attention.") + key +
                " must be a non-negative integer below 2^31";
        return;
      }
      *field = *value;
    }
  if (const llvm::json::Value *descales = attention.optional("descales")) {
    Fields tables(descales->getAsObject(), "\"attention.descales\"", error);
    for (auto [key, field] : {std::pair{"q", &m.qDescale},
                              std::pair{"k", &m.kDescale},
                              std::pair{"v", &m.vDescale}}) {
      int64_t position = tables.integer(key);
      if (tables.ok() && (position < 0 || position >= (int64_t(1) << 31)))
        tables.fail(std::string("has \"") + key +
                    "\" that is not a non-negative integer below 2^31");
      *field = position;
    }
    // Only the three tables: another key is a manifest of another kind.
    if (const llvm::json::Object *object = descales->getAsObject())
      for (const auto &entry : *object)
        if (tables.ok() && entry.first != "q" && entry.first != "k" &&
            entry.first != "v")
          tables.fail("has \"" + entry.first.str() +
                      "\"; its keys are q, k and v");
  }
}


/// The types: inputs of fp16, bf16 or e4m3, O of fp16 or bf16 (the inputs'
/// own unless they are e4m3), and FP8's three descale tables — each an f32
/// extra [batch, kv_heads] of its own — exactly when the inputs are e4m3 (a
/// kernel that multiplies by a table nobody passed would read any memory).
void checkPrecision(Fields &attention, const Manifest &m) {
  bool fp8 = m.dtype == "e4m3";
  if (m.dtype != "fp16" && m.dtype != "bf16" && !fp8)
    attention.fail("has an unknown dtype \"" + m.dtype +
                   "\" (expected fp16, bf16 or e4m3)");
  if (fp8 && m.outDtype == m.dtype)
    attention.fail("has e4m3 inputs and O of e4m3 (\"out_dtype\" e4m3, or "
                   "absent: the inputs' type); an e4m3 kernel writes O in "
                   "fp16 or bf16");
  else if (m.outDtype != "fp16" && m.outDtype != "bf16")
    attention.fail("has an out_dtype \"" + m.outDtype +
                   "\" that is not fp16 or bf16");
  else if (!fp8 && m.outDtype != m.dtype)
    attention.fail("has an out_dtype " + m.outDtype + " for " + m.dtype +
                   " inputs (only e4m3 inputs give O another type)");
  int64_t tables[] = {m.qDescale, m.kDescale, m.vDescale};
  bool any = m.qDescale >= 0 || m.kDescale >= 0 || m.vDescale >= 0;
  if (!fp8) {
    if (any)
      attention.fail("has descale tables for " + m.dtype +
                     " inputs (only e4m3 inputs have them)");
    return;
  }
  if (!(m.qDescale >= 0 && m.kDescale >= 0 && m.vDescale >= 0)) {
    attention.fail("has e4m3 inputs without their descale tables "
                   "(\"descales\": {\"q\", \"k\", \"v\"})");
    return;
  }
  int64_t others[] = {m.blockMask,  m.seqUsedK,   m.blockTable,
                      m.splitWorkspace, m.cuSeqlensQ, m.cuSeqlensK};
  for (size_t i = 0; i < 3; ++i) {
    int64_t at = tables[i];
    bool own = at < static_cast<int64_t>(m.extras.size()) &&
               std::find(std::begin(others), std::end(others), at) ==
                   std::end(others) &&
               (i == 0 || (at != tables[0] && (i == 1 || at != tables[1])));
    if (!own || m.extras[at].dtype != "f32" ||
        m.extras[at].shape.size() != 2 ||
        (m.extras[at].shape[1] != m.kvHeads && m.extras[at].shape[1] != -1)) {
      attention.fail(std::string("names as its ") + "qkv"[i] +
                     " descale table an extra that is not an f32 table "
                     "[batch, kv_heads] of its own");
      return;
    }
  }
}

/// What the sections read so far must say together: a block mask that is
/// an extra of its shape, a known mask, an attention whose sizes no
/// product below overflows, a block and a grid.
void checkVariant(Fields &top, Fields &attention, const Manifest &m) {
  if (m.blockMask >= 0 &&
      (m.blockMask >= static_cast<int64_t>(m.extras.size()) ||
       m.extras[m.blockMask].dtype != "i32" ||
       m.extras[m.blockMask].shape.size() != 4 ||
       (m.extras[m.blockMask].shape[3] != 4 && m.extras[m.blockMask].shape[3] != -1)))
    attention.fail("names as its block_mask an extra that is not a rank-4 "
                   "i32 table [batch, heads, query blocks, 4]");
  if (m.seqUsedK >= 0 &&
      (m.seqUsedK >= static_cast<int64_t>(m.extras.size()) ||
       m.seqUsedK == m.blockMask || m.extras[m.seqUsedK].dtype != "i32" ||
       m.extras[m.seqUsedK].shape.size() != 1))
    attention.fail("names as its seqused_k an extra that is not a rank-1 "
                   "i32 table [batch] (or the block mask)");
  if ((m.blockTable >= 0) != (m.pageSize > 0) ||
      (m.blockTable >= 0 &&
       (m.blockTable >= static_cast<int64_t>(m.extras.size()) ||
        m.blockTable == m.blockMask || m.blockTable == m.seqUsedK ||
        m.extras[m.blockTable].dtype != "i32" ||
        m.extras[m.blockTable].shape.size() != 2 || m.pageSize < 16 ||
        (m.pageSize & (m.pageSize - 1)) != 0)))
    attention.fail("has a block_table that is not a rank-2 i32 extra [batch, "
                   "max_blocks] of its own with a page_size (a power of two "
                   "of at least 16), or one without the other");
  if ((m.splitWorkspace >= 0) != (m.numSplits > 1) || m.numSplits < 1 ||
      m.numSplits > kMaxSplits ||
      (m.splitWorkspace >= 0 &&
       (m.splitWorkspace >= static_cast<int64_t>(m.extras.size()) ||
        m.splitWorkspace == m.blockMask || m.splitWorkspace == m.seqUsedK ||
        m.splitWorkspace == m.blockTable ||
        m.extras[m.splitWorkspace].dtype != "i32" ||
        m.extras[m.splitWorkspace].shape.size() != 1)))
    attention.fail("has a split_workspace that is not a rank-1 i32 extra of "
                   "its own with num_splits in [2, " +
                   std::to_string(kMaxSplits) +
                   "], or one without the other");
  auto isCuSeqlens = [&](int64_t table) {
    return table >= 0 && table < static_cast<int64_t>(m.extras.size()) &&
           table != m.blockMask && table != m.seqUsedK &&
           table != m.blockTable && table != m.splitWorkspace &&
           m.extras[table].dtype == "i32" && m.extras[table].shape.size() == 1;
  };
  if ((m.cuSeqlensQ >= 0) != (m.cuSeqlensK >= 0) ||
      (m.cuSeqlensQ >= 0 &&
       (!isCuSeqlens(m.cuSeqlensQ) || !isCuSeqlens(m.cuSeqlensK) ||
        m.cuSeqlensQ == m.cuSeqlensK || m.blockTable >= 0 ||
        m.blockMask >= 0 || m.numSplits > 1)))
    attention.fail("has cu_seqlens_q and cu_seqlens_k that are not two "
                   "rank-1 i32 extras of their own, or one without the "
                   "other, or with a block table, block mask or split-KV");
  checkPrecision(attention, m);
  if (m.mask != "none" && m.mask != "causal" && m.mask != "window")
    attention.fail("has an unknown mask \"" + m.mask + "\"");
  // Bounded so that no product of sizes below overflows: heads below 2^31,
  // head_dim at most 1024, rows per task at most 2^20.
  if (m.qHeads <= 0 || m.kvHeads <= 0 || m.qHeads % m.kvHeads || m.headDim <= 0 ||
      m.qHeads >= (int64_t(1) << 31) || m.headDim > 1024 ||
      m.valueHeadDim <= 0 || m.valueHeadDim > m.headDim || m.rowsPerTask <= 0 ||
      m.rowsPerTask > (int64_t(1) << 20) || !(m.scale > 0))
    attention.fail("describes no valid attention (heads, head_dim, "
                   "v_head_dim, scale, rows_per_task)");
  if (m.block[0] * m.block[1] * m.block[2] == 0 || m.smCount <= 0)
    top.fail("has an empty block or grid");
}

/// A tensor map's "axes" (optional): one tensor axis per dimension, each
/// once, head_dim (3) first.
bool readAxes(Fields &f, Manifest::TensorMap &map) {
  const llvm::json::Value *axes = f.optional("axes");
  if (!axes)
    return true;
  const llvm::json::Array *list = axes->getAsArray();
  if (!list || list->size() != map.rank) {
    f.fail("has axes that are not one tensor axis per dimension");
    return false;
  }
  for (const llvm::json::Value &v : *list) {
    int64_t axis = v.getAsInteger().value_or(-1);
    if (axis < 0 || axis > 3) {
      f.fail("has an axis out of [0, 3]");
      return false;
    }
    map.axes.push_back(static_cast<int>(axis));
  }
  std::vector<int> sorted = map.axes;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = map.rank == 4;
  for (int axis = 0; permutation && axis < 4; ++axis)
    permutation = sorted[axis] == axis;
  if (!permutation || map.axes[0] != 3) {
    f.fail("has axes that are not a permutation of [0, 3] with head_dim (3) "
           "first");
    return false;
  }
  return true;
}

/// A tensor map's "layout_strides" (optional): four strides, null where
/// dynamic.
bool readLayoutStrides(Fields &f, Manifest::TensorMap &map) {
  const llvm::json::Value *layout = f.optional("layout_strides");
  if (!layout)
    return true;
  const llvm::json::Array *list = layout->getAsArray();
  if (!list || list->size() != 4) {
    f.fail("has layout_strides that are not four strides");
    return false;
  }
  for (const llvm::json::Value &v : *list) {
    std::optional<int64_t> stride = v.getAsInteger();
    if (v.getAsNull()) {
      map.layoutStrides.push_back(-1);
    } else if (stride && *stride > 0) {
      map.layoutStrides.push_back(*stride);
    } else {
      f.fail("has a layout stride that is neither positive nor null");
      return false;
    }
  }
  return true;
}

/// One entry of "tensor_maps".
bool readTensorMap(Fields &f, Manifest::TensorMap &map) {
  map.tensor = f.string("tensor");
  map.dtype = f.string("dtype");
  map.rank = static_cast<uint32_t>(f.integer("rank"));
  if (!f.ok())
    return false;
  // Nothing below reads past a refused rank: the box has five entries.
  if (map.rank < 1 || map.rank > 5) {
    f.fail("has rank " + std::to_string(map.rank));
    return false;
  }
  TensorMapDataType type;
  if (!dataTypeOf(map.dtype, type))
    f.fail("has an unknown dtype \"" + map.dtype + "\"");
  if (const llvm::json::Value *layout = f.optional("layout")) {
    std::optional<llvm::StringRef> name = layout->getAsString();
    map.layout = name ? name->str() : "";
    // vt is V's layout for the 8-bit P·V (Fp8Value.h): on any other
    // tensor or type the kernel would read keys permuted.
    if (!name || *name != "vt")
      f.fail("has an unknown layout (expected \"vt\" or none)");
    else if (map.tensor != "v" || map.dtype != "e4m3")
      f.fail("has the layout vt, which only an e4m3 V takes, on " +
             (map.tensor == "v" ? map.dtype + " V" : "\"" + map.tensor + "\""));
  }
  const llvm::json::Array *dims = f.array("dims");
  const llvm::json::Array *strides = f.array("strides_bytes");
  const llvm::json::Array *box = f.array("box");
  const llvm::json::Array *elementStrides = f.array("element_strides");
  if (!f.ok())
    return false;
  if (dims->size() != map.rank || strides->size() + 1 != map.rank ||
      box->size() != map.rank || elementStrides->size() != map.rank) {
    f.fail("has dims, strides_bytes, box or element_strides of the wrong "
           "length for rank " +
           std::to_string(map.rank));
    return false;
  }
  for (const llvm::json::Value &v : *dims)
    map.dims.push_back(asText(v));
  for (const llvm::json::Value &v : *strides)
    map.strides.push_back(asText(v));
  for (const std::vector<std::string> *entries : {&map.dims, &map.strides})
    for (const std::string &entry : *entries)
      if (entry.empty()) {
        f.fail(std::string("has a ") +
               (entries == &map.dims ? "dims" : "strides_bytes") +
               " entry that is neither a positive integer nor an "
               "expression");
        return false;
      }
  if (!readAxes(f, map) || !readLayoutStrides(f, map))
    return false;
  for (uint32_t d = 0; d < map.rank; ++d) {
    int64_t b = (*box)[d].getAsInteger().value_or(0);
    int64_t e = (*elementStrides)[d].getAsInteger().value_or(0);
    if (b <= 0 || b > 256 || e <= 0 || e > 8)
      f.fail("has a box or element stride out of range");
    map.box[d] = static_cast<uint32_t>(b);
    map.elementStrides[d] = static_cast<uint32_t>(e);
  }
  std::string swizzle = f.string("swizzle");
  if (swizzle == "none")
    map.swizzle = TensorMapSwizzle::None;
  else if (swizzle == "32B")
    map.swizzle = TensorMapSwizzle::Bytes32;
  else if (swizzle == "64B")
    map.swizzle = TensorMapSwizzle::Bytes64;
  else if (swizzle == "128B")
    map.swizzle = TensorMapSwizzle::Bytes128;
  else
    f.fail("has an unknown swizzle \"" + swizzle + "\"");
  std::string fill = f.string("oob_fill");
  if (fill == "nan")
    map.oobFill = TensorMapOobFill::NanRequestZeroFma;
  else if (fill != "zero")
    f.fail("has an unknown oob_fill \"" + fill + "\"");
  return f.ok();
}

/// "tensor_maps".
bool readTensorMaps(Fields &top, Manifest &m, std::string &error) {
  const llvm::json::Array *maps = top.array("tensor_maps");
  if (!maps)
    return true;
  for (size_t i = 0; i < maps->size(); ++i) {
    Fields f((*maps)[i].getAsObject(), "tensor_maps[" + std::to_string(i) + "]",
             error);
    Manifest::TensorMap map;
    if (!readTensorMap(f, map))
      return false;
    m.tensorMaps.push_back(std::move(map));
  }
  return true;
}

/// "parameters": each one's name, type and, when said, how it is passed
/// and what it points at.
void readParameters(Fields &top, Manifest &m, std::string &error) {
  const llvm::json::Array *params = top.array("parameters");
  if (!params)
    return;
  for (size_t i = 0; i < params->size(); ++i) {
    Fields f((*params)[i].getAsObject(),
             "parameters[" + std::to_string(i) + "]", error);
    Manifest::Parameter p;
    p.name = f.string("name");
    p.type = f.string("type");
    if (const llvm::json::Value *passing = f.optional("passing"))
      if (auto text = passing->getAsString())
        p.passing = text->str();
    if (const llvm::json::Value *layout = f.optional("layout"))
      if (auto text = layout->getAsString())
        p.layout = text->str();
    m.parameters.push_back(p);
  }
}

/// "roles" (optional): the warp roles and their register budgets.
void readRoles(const llvm::json::Object &object, Manifest &m,
               std::string &error) {
  const llvm::json::Array *roles = object.getArray("roles");
  if (!roles)
    return;
  for (size_t i = 0; i < roles->size(); ++i) {
    Fields f((*roles)[i].getAsObject(), "roles[" + std::to_string(i) + "]",
             error);
    Manifest::Role role;
    role.name = f.string("name");
    role.firstWarp = f.integer("first_warp");
    role.numWarps = f.integer("num_warps");
    role.registers = f.integer("registers");
    m.roles.push_back(role);
  }
}

/// "ptxas" (optional): what ptxas reported, each number when it is one.
void readPtxas(const llvm::json::Object &object, Manifest &m) {
  const llvm::json::Object *ptxas = object.getObject("ptxas");
  if (!ptxas)
    return;
  auto read = [&](const char *name, int64_t &field) {
    if (std::optional<int64_t> value = ptxas->getInteger(name))
      field = *value;
  };
  read("registers", m.ptxas.registers);
  read("spill_store_bytes", m.ptxas.spillStoreBytes);
  read("spill_load_bytes", m.ptxas.spillLoadBytes);
  read("stack_bytes", m.ptxas.stackBytes);
  read("static_smem_bytes", m.ptxas.staticSmemBytes);
}

/// Reads every section of `json` into `m`; false with `error` (the first
/// failure) when one is malformed.
bool readManifest(const llvm::json::Value &json, Manifest &m,
                  std::string &error) {
  const llvm::json::Object *object = json.getAsObject();
  if (object && object->getString("kind") == "backward") {
    error = "manifest: a backward's (\"kind\": \"backward\": three "
            "kernels), read by runtime::BackwardKernel::load "
            "(fa4rt_backward_load), not a kernel's";
    return false;
  }
  Fields top(object, "(top level)", error);
  readKernel(top, object, m);
  readResources(top, m, error);
  Fields attention(top.child("attention"), "\"attention\"", error);
  readAttention(attention, m, error);
  if (!error.empty() || !readExtras(top, m.extras, error))
    return false;
  checkVariant(top, attention, m);
  if (!readTensorMaps(top, m, error))
    return false;
  // A page of a paged cache is [page_size, kv_heads, head_dim]: the vt
  // layout has no such page.
  if (m.valueTransposed() && m.blockTable >= 0)
    top.fail("has V in the vt layout with a paged K/V cache, which fa4 "
             "does not support");
  // Only sm_90a's FP8 wgmma needs V transposed; Blackwell's kernels read V
  // as it is, so a vt map there would describe a V they do not read.
  if (const target::ChipInfo *chip = target::lookup(m.target);
      chip && m.valueTransposed() && chip->family != target::Family::Hopper)
    top.fail("has V in the vt layout for " + m.target +
             ", whose FP8 kernels read V as it is (only sm_90a's take vt)");
  readParameters(top, m, error);
  if (object) {
    readRoles(*object, m, error);
    readPtxas(*object, m);
  }
  return error.empty();
}
} // namespace

llvm::Expected<llvm::json::Value> parseManifestJson(const std::string &json) {
  // llvm::json recurses once per bracket: deep nesting would overflow the
  // stack before it could say anything.
  if (json.size() > kMaxManifestBytes)
    return makeError("manifest: " + std::to_string(json.size()) +
                     " bytes, more than the " +
                     std::to_string(kMaxManifestBytes) + " accepted");
  if (llvm::Error deep =
          checkNestingDepth(json, kMaxJsonNesting, NestingSyntax::Json))
    return prefixError("manifest: ", std::move(deep));
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed)
    return makeError("manifest: not JSON: " +
                     llvm::toString(parsed.takeError()));
  return parsed;
}

llvm::Expected<Manifest> parseManifest(const std::string &json) {
  llvm::Expected<llvm::json::Value> parsed = parseManifestJson(json);
  if (!parsed)
    return parsed.takeError();
  Manifest m;
  std::string error;
  if (!readManifest(*parsed, m, error))
    return makeError(error);
  return std::move(m);
}

namespace {
/// A JSON string: quotes, backslashes and control characters escaped, bytes
/// that are not UTF-8 replaced.
std::string quoted(const std::string &text) {
  std::string out;
  llvm::raw_string_ostream(out) << llvm::json::Value(llvm::json::fixUTF8(text));
  return out;
}
/// A size or stride entry: a number as a number, an expression as a string.
std::string sizeEntry(const std::string &text) {
  bool number = !text.empty() && text.size() < 19 &&
                std::all_of(text.begin(), text.end(),
                            [](char c) { return c >= '0' && c <= '9'; });
  return number ? text : quoted(text);
}
template <typename T>
std::string list(const T *values, size_t count) {
  std::string out = "[";
  for (size_t i = 0; i < count; ++i)
    out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}
} // namespace

std::string writeManifest(const Manifest &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "{\n";
  os << "  \"kernel\": " << quoted(m.kernel) << ",\n";
  os << "  \"cubin\": " << quoted(m.cubin) << ",\n";
  os << "  \"ptx\": " << quoted(m.ptx) << ",\n";
  os << "  \"target\": " << quoted(m.target) << ",\n";
  os << "  \"block\": " << list(m.block, 3) << ",\n";
  // The persistent grid: min(sm_count, tasks) CTAs, a task being
  // rows_per_task packed query rows of one head group (gqaPacking query
  // heads of one K/V head).
  int64_t packing = gqaPacking(m.kvHeads > 0 ? m.qHeads / m.kvHeads : 1);
  // Varlen: per head group, the packed tensor's tasks and one more per
  // sequence (its tables' entries less one).
  bool varlen = m.cuSeqlensQ >= 0;
  // A per-task grid is a persistent one without a cap (kPerTaskSmCount).
  bool perTask = m.smCount == kPerTaskSmCount;
  os << "  \"grid\": {\"policy\": \""
     << (perTask ? "per_task\", \"size\": \"tasks"
                 : "persistent\", \"size\": \"min(sm_count, tasks)")
     << "\", \"sm_count\": " << m.smCount << ", \"tasks\": \""
     << (varlen ? std::to_string(m.qHeads / packing) + " * (floor(seq_q * " +
                      std::to_string(packing) + " / " +
                      std::to_string(m.rowsPerTask) + ") + extra" +
                      std::to_string(m.cuSeqlensQ) + "_dim0 - 1)"
                : "batch * " + std::to_string(m.qHeads / packing) +
                      " * ceil(seq_q * " + std::to_string(packing) + " / " +
                      std::to_string(m.rowsPerTask) + ")")
     << (m.numSplits > 1 ? " * " + std::to_string(m.numSplits) : "")
     << "\", \"order\": " << quoted(m.order);
  // CTA pairs: the grid's size counts clusters of two CTAs.
  if (m.cluster > 1)
    os << ", \"cluster\": " << m.cluster;
  os << "},\n";
  os << "  \"dynamic_smem_bytes\": " << m.dynamicSmemBytes << ",\n";
  os << "  \"tmem_columns\": " << m.tmemColumns << ",\n";
  // The variant, in full: what a launcher validates shapes against and what
  // a reference needs (fa4-emu).
  os << "  \"attention\": {\"mask\": " << quoted(m.mask)
     << ", \"window_left\": " << m.windowLeft
     << ", \"window_right\": " << m.windowRight
     << ", \"scale\": " << llvm::formatv("{0:e9}", m.scale)
     << ", \"softcap\": " << llvm::formatv("{0:e9}", m.softcap)
     << ", \"head_dim\": " << m.headDim
     << ", \"v_head_dim\": " << m.vHeadDim()
     << ", \"q_heads\": " << m.qHeads
     << ", \"kv_heads\": " << m.kvHeads << ", \"dtype\": " << quoted(m.dtype)
     << ", \"out_dtype\": " << quoted(m.oDtype())
     << ", \"lse\": " << (m.lse ? "true" : "false")
     << ", \"rows_per_task\": " << m.rowsPerTask
     << ", \"score_mod\": " << (m.scoreMod ? "true" : "false")
     << ", \"mask_mod\": " << (m.maskMod ? "true" : "false");
  if (m.blockMask >= 0)
    os << ", \"block_mask\": " << m.blockMask;
  if (m.seqUsedK >= 0)
    os << ", \"seqused_k\": " << m.seqUsedK;
  if (m.blockTable >= 0)
    os << ", \"block_table\": " << m.blockTable << ", \"page_size\": "
       << m.pageSize;
  if (m.splitWorkspace >= 0)
    os << ", \"num_splits\": " << m.numSplits << ", \"split_workspace\": "
       << m.splitWorkspace << ", \"split_workspace_words\": \"batch * "
       << m.qHeads / packing << " * ceil(seq_q * " << packing
       << " / 128) * min(128, seq_q * " << packing << ") * "
       << (kSplitSlots * (1 + m.numSplits) + m.numSplits * m.vHeadDim())
       << "\"";
  if (varlen)
    os << ", \"cu_seqlens_q\": " << m.cuSeqlensQ << ", \"cu_seqlens_k\": "
       << m.cuSeqlensK;
  if (m.qDescale >= 0 || m.kDescale >= 0 || m.vDescale >= 0)
    os << ", \"descales\": {\"q\": " << m.qDescale << ", \"k\": "
       << m.kDescale << ", \"v\": " << m.vDescale << "}";
  if (m.oByAddress)
    os << ", \"o_by_address\": true";
  os << "},\n";
  // The memrefs the score_mod and mask_mod read: element type and shape, -1
  // where the launch gives the size.
  if (!m.extras.empty()) {
    os << "  \"extras\": [";
    for (size_t i = 0; i < m.extras.size(); ++i) {
      const Manifest::Extra &extra = m.extras[i];
      os << (i ? ", " : "") << "{\"name\": \"extra" << i
         << "\", \"dtype\": " << quoted(extra.dtype) << ", \"shape\": "
         << list(extra.shape.data(), extra.shape.size())
         << ", \"layout\": \"row-major\"}";
    }
    os << "],\n";
  }
  if (!m.roles.empty()) {
    os << "  \"roles\": [";
    for (size_t i = 0; i < m.roles.size(); ++i) {
      const Manifest::Role &role = m.roles[i];
      os << (i ? ", " : "") << "{\"name\": " << quoted(role.name)
         << ", \"first_warp\": " << role.firstWarp
         << ", \"num_warps\": " << role.numWarps
         << ", \"registers\": " << role.registers << "}";
    }
    os << "],\n";
  }
  // Sizes and strides innermost first: `strides_bytes` the dense ones, which
  // a launch replaces with its tensors' own through `axes`;
  // `layout_strides` the entry IR's (elements, [batch, seq, heads,
  // head_dim], null where dynamic or free), which a launch must match.
  os << "  \"tensor_maps\": [" << (m.tensorMaps.empty() ? "" : "\n");
  for (size_t i = 0; i < m.tensorMaps.size(); ++i) {
    const Manifest::TensorMap &map = m.tensorMaps[i];
    auto entries = [](const std::vector<std::string> &values) {
      std::string out = "[";
      for (size_t j = 0; j < values.size(); ++j)
        out += (j ? ", " : "") + sizeEntry(values[j]);
      return out + "]";
    };
    os << (i ? ",\n" : "") << "    {\"tensor\": " << quoted(map.tensor)
       << ", \"dtype\": " << quoted(map.dtype);
    if (!map.layout.empty())
      os << ", \"layout\": " << quoted(map.layout);
    os << ", \"rank\": " << map.rank
       << ", \"dims\": " << entries(map.dims)
       << ", \"strides_bytes\": " << entries(map.strides)
       << ", \"box\": " << list(map.box, map.rank);
    if (!map.axes.empty())
      os << ", \"axes\": " << list(map.axes.data(), map.axes.size());
    if (!map.layoutStrides.empty()) {
      os << ", \"layout_strides\": [";
      for (size_t j = 0; j < map.layoutStrides.size(); ++j) {
        os << (j ? ", " : "");
        if (map.layoutStrides[j] > 0)
          os << map.layoutStrides[j];
        else
          os << "null";
      }
      os << "]";
    }
    os << ", \"element_strides\": " << list(map.elementStrides, map.rank)
       << ", \"swizzle\": \"" << swizzleName(map.swizzle)
       << "\", \"interleave\": \"none\", \"oob_fill\": \""
       << (map.oobFill == TensorMapOobFill::Zero ? "zero" : "nan") << "\"}";
  }
  os << (m.tensorMaps.empty() ? "" : "\n  ") << "],\n";
  os << "  \"parameters\": [" << (m.parameters.empty() ? "" : "\n");
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    const Manifest::Parameter &p = m.parameters[i];
    os << (i ? ",\n" : "") << "    {\"name\": " << quoted(p.name)
       << ", \"type\": " << quoted(p.type);
    if (!p.passing.empty())
      os << ", \"passing\": " << quoted(p.passing);
    if (!p.layout.empty())
      os << ", \"layout\": " << quoted(p.layout);
    os << "}";
  }
  os << (m.parameters.empty() ? "" : "\n  ") << "],\n";
  os << "  \"ptxas\": {\"registers\": " << m.ptxas.registers
     << ", \"spill_store_bytes\": " << m.ptxas.spillStoreBytes
     << ", \"spill_load_bytes\": " << m.ptxas.spillLoadBytes
     << ", \"stack_bytes\": " << m.ptxas.stackBytes
     << ", \"static_smem_bytes\": " << m.ptxas.staticSmemBytes << "}\n";
  os << "}\n";
  return text;
}

llvm::Error checkInterface(const Manifest &m) {
  // The parameters fa4c writes, in its order.
  std::vector<Manifest::Parameter> expected = {{"q_map", "CUtensorMap"},
                                               {"k_map", "CUtensorMap"},
                                               {"v_map", "CUtensorMap"},
                                               {"o_map", "CUtensorMap"}};
  if (m.lse)
    expected.push_back({"lse", "float*"});
  for (const char *name : {"batch", "seq_q", "seq_k"})
    expected.push_back({name, "int32"});
  for (size_t i = 0; i < m.extras.size(); ++i) {
    std::string extra = "extra" + std::to_string(i);
    expected.push_back({extra, "void*"});
    for (size_t d = 0; d < m.extras[i].shape.size(); ++d)
      if (m.extras[i].shape[d] < 0)
        expected.push_back({extra + "_dim" + std::to_string(d), "int32"});
  }
  if (m.writesOByAddress()) {
    expected.push_back({"o", "void*"});
    for (const char *axis : {"batch", "seq", "head"})
      expected.push_back({std::string("o_stride_") + axis, "int64"});
  }
  auto list = [](const std::vector<Manifest::Parameter> &parameters) {
    std::string text;
    for (const Manifest::Parameter &p : parameters)
      text += (text.empty() ? "" : ", ") + p.name + ": " + p.type;
    return "[" + text + "]";
  };
  bool same = expected.size() == m.parameters.size();
  for (size_t i = 0; same && i < expected.size(); ++i)
    same = expected[i].name == m.parameters[i].name &&
           expected[i].type == m.parameters[i].type;
  if (!same)
    return makeError("manifest: the parameters " + list(m.parameters) +
                     " are not the kernel's " + list(expected));
  // One map per tensor, laid out [head_dim, heads, seq, batch] by its axes.
  for (const char *tensor : {"q", "k", "v", "o"}) {
    const Manifest::TensorMap *found = nullptr;
    for (const Manifest::TensorMap &map : m.tensorMaps) {
      if (map.tensor != tensor)
        continue;
      if (found)
        return makeError(std::string("manifest: two tensor maps for \"") +
                         tensor + "\"");
      found = &map;
    }
    std::string prefix = std::string("manifest: the tensor map of \"") + tensor + "\"";
    if (!found)
      return makeError(prefix + " is missing");
    // O in the output type, the inputs in theirs.
    const std::string &dtype = *tensor == 'o' ? m.oDtype() : m.dtype;
    if (found->rank != 4 || found->dims.size() != 4 || found->dtype != dtype)
      return makeError(prefix + " is not a rank-4 map of the kernel's " +
                       dtype);
    bool isQuery = *tensor == 'q' || *tensor == 'o';
    // V and O have V's head dim.
    int64_t dim = *tensor == 'v' || *tensor == 'o' ? m.vHeadDim() : m.headDim;
    std::vector<std::string> sizes = {
        "batch", isQuery ? "seq_q" : "seq_k",
        std::to_string(isQuery ? m.qHeads : m.kvHeads), std::to_string(dim)};
    // A paged cache: [num_blocks, page_size, kv_heads, head_dim].
    if (!isQuery && m.blockTable >= 0)
      sizes = {"num_blocks", std::to_string(m.pageSize),
               std::to_string(m.kvHeads), std::to_string(dim)};
    // FP8's V for sm_90a: [batch, kv_heads, v_head_dim, seq_k_padded].
    if (found->layout == "vt")
      sizes = {"batch", std::to_string(m.kvHeads), std::to_string(dim),
               "seq_k_padded"};
    // A size the entry IR fixed is written as its number in place of the
    // name (batch, seq_q, seq_k, num_blocks).
    auto fixedSize = [](const std::string &text) {
      return !text.empty() && text.size() < 11 && text[0] != '0' &&
             std::all_of(text.begin(), text.end(),
                         [](char c) { return c >= '0' && c <= '9'; }) &&
             std::stoll(text) < (int64_t(1) << 31);
    };
    for (uint32_t d = 0; d < 4; ++d) {
      int axis = found->axes.empty() ? 3 - static_cast<int>(d) : found->axes[d];
      bool named = axis >= 0 && axis < 4 &&
                   (sizes[axis] == "batch" || sizes[axis] == "seq_q" ||
                    sizes[axis] == "seq_k" || sizes[axis] == "num_blocks" ||
                    sizes[axis] == "seq_k_padded");
      if (axis < 0 || axis >= 4 ||
          (found->dims[d] != sizes[axis] &&
           !(named && fixedSize(found->dims[d]))))
        return makeError(prefix + ": dimension " + std::to_string(d) +
                         " is \"" + found->dims[d] +
                         "\", the kernel's tensor has " + sizes[axis] +
                         " there");
    }
  }
  for (const Manifest::TensorMap &map : m.tensorMaps)
    if (map.tensor != "q" && map.tensor != "k" && map.tensor != "v" &&
        map.tensor != "o")
      return makeError("manifest: a tensor map of \"" + map.tensor +
                       "\", which the kernel has not");
  return llvm::Error::success();
}

llvm::Error checkPtxEntry(const Manifest &m, const std::string &ptx) {
  // `.entry NAME (` then the parameters up to `)`.
  auto blank = [&](size_t i) {
    while (i < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[i])))
      ++i;
    return i;
  };
  size_t open = std::string::npos;
  for (size_t at = ptx.find(".entry"); at != std::string::npos && open == std::string::npos;
       at = ptx.find(".entry", at + 1)) {
    size_t name = blank(at + 6);
    if (name == at + 6 || ptx.compare(name, m.kernel.size(), m.kernel) != 0)
      continue;
    size_t paren = blank(name + m.kernel.size());
    if (paren < ptx.size() && ptx[paren] == '(')
      open = paren + 1;
  }
  if (open == std::string::npos)
    return makeError("the PTX has no entry point " + m.kernel +
                     " (the manifest's kernel)");
  size_t end = ptx.find(')', open);
  if (end == std::string::npos)
    return makeError("the PTX's entry point " + m.kernel +
                     " has no parameter list");
  std::vector<size_t> sizes;
  std::string list = ptx.substr(open, end - open);
  for (size_t from = 0; from < list.size();) {
    size_t comma = list.find(',', from);
    std::string param = list.substr(from, comma == std::string::npos ? std::string::npos
                                                                    : comma - from);
    from = comma == std::string::npos ? list.size() : comma + 1;
    if (param.find(".param") == std::string::npos)
      continue;
    // The element type (`.b8`, `.u32`, `.u64`, ...) times the array count.
    size_t bytes = 0, count = 1;
    size_t bracket = param.find('[');
    if (bracket != std::string::npos)
      count = std::strtoull(param.c_str() + bracket + 1, nullptr, 10);
    for (size_t t = param.find(" ."); t != std::string::npos && !bytes;
         t = param.find(" .", t + 1)) {
      char kind = t + 2 < param.size() ? param[t + 2] : 0;
      if (kind != 'b' && kind != 'u' && kind != 's' && kind != 'f')
        continue;
      char *after = nullptr;
      unsigned long bits = std::strtoul(param.c_str() + t + 3, &after, 10);
      if (after != param.c_str() + t + 3 && (*after == ' ' || *after == '\t') &&
          (bits == 8 || bits == 16 || bits == 32 || bits == 64))
        bytes = bits / 8 * count;
    }
    sizes.push_back(bytes);
  }
  if (sizes.size() != m.parameters.size())
    return makeError("the PTX's " + m.kernel + " takes " +
                     std::to_string(sizes.size()) +
                     " parameters, the manifest lists " +
                     std::to_string(m.parameters.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string &type = m.parameters[i].type;
    size_t want = type == "CUtensorMap" ? 128 : type == "int32" ? 4 : 8;
    if (sizes[i] != want)
      return makeError("the PTX's parameter " + std::to_string(i) + " of " +
                       m.kernel + " is " + std::to_string(sizes[i]) +
                       " bytes; the manifest's " + m.parameters[i].name + " (" +
                       type + ") is " + std::to_string(want));
  }
  // The block the kernel was compiled for.
  size_t reqntid = ptx.find(".reqntid", end);
  size_t next = ptx.find(".entry", end);
  if (reqntid != std::string::npos && (next == std::string::npos || reqntid < next)) {
    // `.reqntid x[, y[, z]]`.
    uint64_t threads = 1;
    const char *cursor = ptx.c_str() + reqntid + 8;
    for (int d = 0; d < 3; ++d) {
      char *after = nullptr;
      uint64_t extent = std::strtoull(cursor, &after, 10);
      if (after == cursor)
        break;
      threads *= extent;
      cursor = after;
      while (*cursor == ' ' || *cursor == '\t')
        ++cursor;
      if (*cursor != ',')
        break;
      ++cursor;
    }
    uint64_t block = uint64_t(m.block[0]) * m.block[1] * m.block[2];
    if (threads != block)
      return makeError(
          "the PTX's " + m.kernel + " runs " + std::to_string(threads) +
          " threads per CTA (.reqntid); the manifest's block has " +
          std::to_string(block));
  }
  return llvm::Error::success();
}

llvm::Error checkShapes(const Manifest &m, const Shapes &s) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (s.batch < 1 || s.seqQ < 1 || s.seqK < 1)
    return makeError("batch, seq_q and seq_k must be at least 1");
  if (s.batch >= kLimit || s.seqQ >= kLimit || s.seqK >= kLimit)
    return makeError(
        "batch, seq_q and seq_k are passed as int32: each must be below 2^31");
  if (m.qHeads <= 0 || m.kvHeads <= 0 || m.headDim <= 0 || m.qHeads >= kLimit ||
      m.kvHeads >= kLimit || m.headDim > 1024)
    return makeError("the manifest's heads or head_dim are out of range");
  // The kernel adds key offsets below 2^24 to 32-bit positions (a window's
  // or a mask_mod's edges, plus seq_k - seq_q): sequences keep 2^25 of
  // headroom, so that no edge wraps.
  if (s.seqQ >= kSequenceLimit || s.seqK >= kSequenceLimit)
    return makeError(
        "seq_q and seq_k must be below 2^31 - 2^25 (the kernel's 32-bit "
        "key edges add offsets of up to 2^24)");
  // Packed query rows and the LSE's index are computed in 32 bits.
  if (s.batch * m.qHeads > (kLimit - 1) / s.seqQ)
    return makeError("batch * q_heads * seq_q = " + std::to_string(s.batch) +
                     " * " + std::to_string(m.qHeads) + " * " +
                     std::to_string(s.seqQ) +
                     " reaches 2^31, past the kernel's 32-bit indices");
  // K and V span at most what a tensor map reaches (2^48 bytes).
  if (m.blockTable >= 0 && (s.numBlocks < 1 || s.numBlocks >= kLimit))
    return makeError("a paged cache needs 1 to 2^31 - 1 blocks, got " +
                     std::to_string(s.numBlocks));
  if ((__int128)(m.blockTable >= 0 ? s.numBlocks * m.pageSize
                                   : s.batch * s.seqK) *
          m.kvHeads * m.headDim * 4 >
      ((__int128)1 << 48))
    return makeError(
        "batch * seq_k * kv_heads * head_dim = " + std::to_string(s.batch) +
        " * " + std::to_string(s.seqK) + " * " + std::to_string(m.kvHeads) +
        " * " + std::to_string(m.headDim) +
        " elements span more than the 2^48 bytes a tensor map reaches");
  return llvm::Error::success();
}

llvm::Expected<LaunchPlan> planLaunch(const Manifest &m, const Shapes &shapes,
                                      const Buffers &buffers,
                                      const TensorMapEncoder &encode) {
  if (llvm::Error refused = checkShapes(m, shapes))
    return std::move(refused);
  LaunchPlan plan;
  // The kernel's task_count: batch · head groups · m_blocks.
  int64_t packing = gqaPacking(m.qHeads / m.kvHeads);
  int64_t rows = shapes.seqQ * packing;
  plan.tasks = shapes.batch * (m.qHeads / packing) *
               ((rows + m.rowsPerTask - 1) / m.rowsPerTask) * m.numSplits;
  if (m.cuSeqlensQ >= 0) {
    // Varlen: per head group, a slot per task of rows_per_task packed rows
    // of the packed tensor, and one more per sequence (each sequence's
    // slots begin at floor(cu_seqlens_q[b] · packing / rows) + b):
    // AttentionMath.h's varlenSlot.
    if (m.cuSeqlensQ >= static_cast<int64_t>(buffers.extras.size()) ||
        buffers.extras[m.cuSeqlensQ].shape.size() != 1 ||
        buffers.extras[m.cuSeqlensQ].shape[0] < 2)
      return makeError("a varlen launch needs its cu_seqlens_q table (extra" +
                       std::to_string(m.cuSeqlensQ) + ", [batch + 1] i32)");
    int64_t sequences = buffers.extras[m.cuSeqlensQ].shape[0] - 1;
    plan.tasks = (m.qHeads / packing) *
                 varlenSlot(shapes.seqQ, sequences, shapes.seqQ, packing,
                            m.rowsPerTask);
  }
  // The persistent grid: one CTA per SM, never more CTAs than tasks.
  // A kernel of CTA pairs: that many clusters of two.
  plan.grid[0] = static_cast<uint32_t>(std::min<int64_t>(m.smCount, plan.tasks) *
                                       m.cluster);
  std::memcpy(plan.block, m.block, sizeof(plan.block));
  plan.dynamicSmemBytes = m.dynamicSmemBytes;

  // O's strides in elements (batch, sequence, head): a split-KV kernel's
  // merge writes O by address.
  std::vector<int64_t> oStrides;
  for (const Manifest::TensorMap &entry : m.tensorMaps) {
    TensorMapSpec spec;
    dataTypeOf(entry.dtype, spec.dataType);
    spec.rank = entry.rank;
    spec.swizzle = entry.swizzle;
    spec.oobFill = entry.oobFill;
    const std::string &t = entry.tensor;
    spec.globalAddress = t == "q" ? buffers.q : t == "k" ? buffers.k
                         : t == "v" ? buffers.v : t == "o" ? buffers.o : 0;
    if (!spec.globalAddress)
      return makeError("no buffer for the tensor map of \"" + t + "\"");
    const std::string &dtype = t == "o" ? m.oDtype() : m.dtype;
    if (!dtype.empty() && entry.dtype != dtype)
      return makeError("manifest: the tensor map of \"" + t + "\" is " +
                       entry.dtype + ", the kernel's " +
                       (t == "o" ? "output " : "inputs ") + dtype);
    // The tensor this map walks: its sizes, and its strides (the launch's,
    // else dense), [batch, seq, heads, head_dim].
    bool isQuery = t == "q" || t == "o";
    int64_t dim = t == "v" || t == "o" ? m.vHeadDim() : m.headDim;
    std::vector<int64_t> sizes = {shapes.batch, isQuery ? shapes.seqQ : shapes.seqK,
                                  isQuery ? m.qHeads : m.kvHeads, dim};
    // A paged cache: [num_blocks, page_size, kv_heads, head_dim].
    if (!isQuery && m.blockTable >= 0)
      sizes = {shapes.numBlocks, m.pageSize, m.kvHeads, dim};
    // FP8's V for sm_90a (Fp8Value.h): the strides given are that tensor's.
    bool transposed = entry.layout == "vt";
    if (transposed)
      sizes = {shapes.batch, m.kvHeads, dim, vtPaddedKeys(shapes.seqK)};
    const std::vector<int64_t> &given = t == "q"   ? buffers.qStrides
                                        : t == "k" ? buffers.kStrides
                                        : t == "v" ? buffers.vStrides
                                                   : buffers.oStrides;
    if (!given.empty() &&
        (entry.axes.size() != entry.rank || given.size() != 4))
      return makeError(
          "the tensor map of \"" + t +
          "\" cannot take a launch's strides: its manifest names no axes "
          "(written by an older fa4; compile the kernel again)");
    std::vector<int64_t> strides = given;
    if (strides.empty()) {
      strides.assign(4, 1);
      for (size_t i = 3; i > 0; --i)
        strides[i - 1] = strides[i] * sizes[i];
    }
    if (t == "o")
      oStrides.assign(strides.begin(), strides.begin() + 3);
    if (entry.rank != 4 || (!entry.axes.empty() && entry.axes.size() != 4))
      return makeError("manifest: the tensor map of \"" + t +
                       "\" is not a rank-4 map "
                       "of its tensor");
    for (uint32_t d = 0; d < entry.rank; ++d) {
      int axis = entry.axes.empty() ? 3 - static_cast<int>(d) : entry.axes[d];
      int64_t size;
      if (!evaluate(entry.dims[d], shapes, size) || size <= 0)
        return makeError("manifest: cannot evaluate dimension " +
                         std::to_string(d) + " (\"" + entry.dims[d] +
                         "\") of the tensor map of \"" + t + "\"");
      // A size the entry IR fixed (a number in place of batch / seq_q /
      // seq_k / num_blocks): the kernel was compiled for it.
      bool fixed = !entry.dims[d].empty() &&
                   std::all_of(entry.dims[d].begin(), entry.dims[d].end(),
                               [](char c) { return c >= '0' && c <= '9'; });
      if (size != sizes[axis] && fixed && !transposed &&
          (axis == 0 || axis == 1)) {
        const char *axisName[] = {"batch", isQuery ? "seq_q" : "seq_k"};
        if (axis == 0 && !isQuery && m.blockTable >= 0)
          axisName[0] = "num_blocks";
        return makeError(t + ": " + axisName[axis] + " is " +
                         std::to_string(sizes[axis]) +
                         ", but the kernel was compiled for " +
                         std::to_string(size) +
                         " (a static size of its entry IR)");
      }
      // What the map reaches must be the tensor: an edited size or stride
      // would move the kernel's reads and writes past it.
      if (size != sizes[axis])
        return makeError("manifest: dimension " + std::to_string(d) +
                         " of the tensor map of \"" + t + "\" is " +
                         std::to_string(size) + ", the tensor's axis " +
                         std::to_string(axis) + " is " +
                         std::to_string(sizes[axis]));
      spec.globalDims[d] = static_cast<uint64_t>(size);
      spec.boxDims[d] = entry.box[d];
      spec.elementStrides[d] = entry.elementStrides[d];
      if (d == 0) {
        if (axis != 3)
          return makeError("manifest: the tensor map of \"" + t +
                           "\" does not walk its tensor's contiguous axis "
                           "(head_dim; vt: the keys) first");
        continue;
      }
      // Positive and below TMA's 2^40 bytes, checked before the product.
      if (strides[axis] <= 0 || strides[axis] >= (int64_t(1) << 40))
        return makeError("stride of axis " + std::to_string(axis) + " of \"" +
                         t + "\" is not positive and below 2^40");
      int64_t stride = strides[axis] * elementBytes(spec.dataType);
      if (given.empty()) {
        // A dense launch took the manifest's strides; they must be the
        // dense ones.
        int64_t written;
        if (!evaluate(entry.strides[d - 1], shapes, written) ||
            written != stride)
          return makeError(
              "manifest: stride " + std::to_string(d) + " (\"" +
              entry.strides[d - 1] + "\") of the tensor map of \"" + t +
              "\" is not the tensor's " + std::to_string(stride) + " bytes");
      }
      spec.globalStrides[d - 1] = static_cast<uint64_t>(stride);
    }
    plan.tensorMaps.push_back({t, spec});
  }

  for (const Manifest::Parameter &p : m.parameters) {
    std::vector<uint8_t> bytes;
    auto scalar = [&](auto value) {
      bytes.resize(sizeof(value));
      std::memcpy(bytes.data(), &value, sizeof(value));
    };
    if (p.type == "CUtensorMap") {
      // q_map -> the tensor map of "q".
      std::string tensor = p.name.substr(0, p.name.find('_'));
      const TensorMapSpec *spec = nullptr;
      for (auto &[name, s] : plan.tensorMaps)
        if (name == tensor)
          spec = &s;
      if (!spec)
        return makeError("manifest: parameter " + p.name +
                         " names no tensor map");
      bytes.assign(128, 0);
      if (llvm::Error refused = encode(*spec, bytes.data()))
        return prefixError("the tensor map of \"" + tensor +
                               "\" cannot be encoded: ",
                           std::move(refused));
    } else if (p.type == "float*") {
      if (p.name == "lse" && !buffers.lse)
        return makeError("the kernel writes the LSE: give it a buffer");
      scalar(p.name == "lse" ? buffers.lse : uint64_t(0));
    } else if (p.type == "void*" && p.name == "o") {
      scalar(buffers.o);
    } else if (p.type == "int64") {
      // o_stride_batch, _seq, _head: O's strides in elements.
      int axis = p.name == "o_stride_batch" ? 0
                 : p.name == "o_stride_seq" ? 1
                 : p.name == "o_stride_head" ? 2
                                             : -1;
      if (axis < 0 || oStrides.size() != 3)
        return makeError("manifest: unknown int64 parameter " + p.name);
      scalar(static_cast<int64_t>(oStrides[axis]));
    } else if (p.type == "void*") {
      // extraN: the address of the N-th extra.
      int64_t n = extraIndex(p.name, "extra");
      if (n < 0 || n >= static_cast<int64_t>(buffers.extras.size()))
        return makeError("the kernel reads " + p.name + ": give it a buffer (" +
                         std::to_string(m.extras.size()) + " extras)");
      scalar(buffers.extras[n].address);
    } else if (p.type == "int32") {
      int64_t value = p.name == "batch"   ? shapes.batch
                      : p.name == "seq_q" ? shapes.seqQ
                      : p.name == "seq_k" ? shapes.seqK
                                          : -1;
      // extraN_dimD: a dynamic size of the N-th extra.
      if (value < 0 && p.name.rfind("extra", 0) == 0) {
        size_t underscore = p.name.find("_dim");
        int64_t n = underscore == std::string::npos
                        ? -1
                        : extraIndex(p.name.substr(0, underscore), "extra");
        int64_t d = underscore == std::string::npos
                        ? -1
                        : extraIndex(p.name.substr(underscore + 1), "dim");
        if (n >= 0 && n < static_cast<int64_t>(buffers.extras.size()) &&
            d >= 0 && d < static_cast<int64_t>(buffers.extras[n].shape.size()))
          value = buffers.extras[n].shape[d];
      }
      if (value < 0)
        return makeError("manifest: unknown int32 parameter " + p.name);
      scalar(static_cast<int32_t>(value));
    } else {
      return makeError("manifest: parameter " + p.name +
                       " has an unknown type " + p.type);
    }
    plan.arguments.push_back(std::move(bytes));
  }
  return std::move(plan);
}

/// "extras" (optional): each one's element type and shape.
bool readExtras(Fields &top, std::vector<Manifest::Extra> &into,
                std::string &error) {
  const llvm::json::Value *extras = top.optional("extras");
  if (!extras)
    return true;
  const llvm::json::Array *list = extras->getAsArray();
  if (!list) {
    top.fail("has \"extras\" that is not an array");
    return false;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    Fields f((*list)[i].getAsObject(), "extras[" + std::to_string(i) + "]",
             error);
    Manifest::Extra extra;
    extra.dtype = f.string("dtype");
    const llvm::json::Array *shape = f.array("shape");
    if (!f.ok())
      return false;
    if (extraElementBytes(extra.dtype) == 0) {
      f.fail("has an unknown dtype \"" + extra.dtype + "\"");
      return false;
    }
    for (const llvm::json::Value &v : *shape) {
      int64_t dim = v.getAsInteger().value_or(0);
      if (dim == 0 || dim < -1 || dim >= (int64_t(1) << 31)) {
        f.fail("has a dimension that is neither -1 nor in [1, 2^31)");
        return false;
      }
      extra.shape.push_back(dim);
    }
    into.push_back(std::move(extra));
  }
  return true;
}

} // namespace mlir::fa4::runtime
