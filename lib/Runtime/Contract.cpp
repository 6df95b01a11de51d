//===- Contract.cpp - a kernel's contract: written, read, checked ---------===//
//
// kernelContract() is the one definition of what the code depends on: fa4c
// embeds it computed from the manifest it is about to write, the runtime
// recomputes it from the manifest it was handed, so the two can only differ
// where the manifest does. The readers take the PTX and the cubin as
// untrusted bytes: every length is bounded before it is used.
//
//===----------------------------------------------------------------------===//

#include "fa4/Runtime/Contract.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace mlir::fa4::runtime {

namespace {
/// The contract's lines, in order; a value never holds a newline (escaped).
/// Appended straight to one string: launch() recomputes the contract on
/// every call, so it must cost little next to the launch's own host work.
class ContractWriter {
public:
  ContractWriter() {
    text.reserve(4096);
    text += "fa4-contract 1\n";
  }
  /// `prefix` names the array element a field belongs to ("tensor_maps[1].").
  void field(llvm::StringRef prefix, llvm::StringRef key, llvm::StringRef value) {
    keyed(prefix, key);
    escaped(value);
    text += '\n';
  }
  void field(llvm::StringRef key, llvm::StringRef value) { field("", key, value); }
  void field(llvm::StringRef prefix, llvm::StringRef key, int64_t value) {
    keyed(prefix, key);
    integer(value);
    text += '\n';
  }
  void field(llvm::StringRef key, int64_t value) { field("", key, value); }
  void flag(llvm::StringRef key, bool value) { field(key, value ? "true" : "false"); }
  /// Seventeen significant digits: one double, one text.
  void number(llvm::StringRef key, double value) {
    char digits[32];
    std::snprintf(digits, sizeof(digits), "%.17g", value);
    field(key, digits);
  }
  template <typename Range>
  void list(llvm::StringRef prefix, llvm::StringRef key, const Range &values) {
    keyed(prefix, key);
    text += '[';
    bool first = true;
    for (const auto &v : values) {
      if (!first)
        text += ',';
      first = false;
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
        escaped(v);
      else
        integer(static_cast<int64_t>(v));
    }
    text += "]\n";
  }
  std::string text;

private:
  void keyed(llvm::StringRef prefix, llvm::StringRef key) {
    text.append(prefix.data(), prefix.size());
    text.append(key.data(), key.size());
    text += '=';
  }
  void integer(int64_t value) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    text.append(digits, end);
  }
  void escaped(llvm::StringRef value) {
    if (value.find_first_of("\\\n") == llvm::StringRef::npos) {
      text.append(value.data(), value.size());
      return;
    }
    for (char c : value) {
      if (c == '\\')
        text += "\\\\";
      else if (c == '\n')
        text += "\\n";
      else
        text += c;
    }
  }
};

/// "NAME[I]", the name of an array element (its fields: "NAME[I].FIELD").
std::string element(llvm::StringRef name, size_t i) {
  return (name + "[" + llvm::Twine(i) + "]").str();
}

} // namespace

// A tensor map's `strides_bytes` are not in it: they are the dense strides a
// launch replaces with its tensors' own, and planLaunch holds them to those.
std::string kernelContract(const Manifest &m) {
  ContractWriter w;
  w.field("kernel", m.kernel);
  w.field("target", m.target);
  // The variant first: a swapped kernel is refused by what tells it apart.
  w.field("attention.mask", m.mask);
  // (Only for CTA pairs: the contracts of other kernels read as before.)
  if (m.cluster > 1)
    w.field("grid.cluster", m.cluster);
  w.field("attention.window_left", m.windowLeft);
  w.field("attention.window_right", m.windowRight);
  // The manifest prints nine digits: fa4c and the runtime read the same
  // double from them.
  w.number("attention.scale", m.scale);
  w.number("attention.softcap", m.softcap);
  w.field("attention.head_dim", m.headDim);
  // (Only where it differs: the contracts of kernels with one head dim
  // stay what they were.)
  if (m.valueHeadDim > 0 && m.valueHeadDim != m.headDim)
    w.field("attention.v_head_dim", m.valueHeadDim);
  if (m.oByAddress)
    w.field("attention.o_by_address", "true");
  w.field("attention.q_heads", m.qHeads);
  w.field("attention.kv_heads", m.kvHeads);
  w.field("attention.dtype", m.dtype);
  // (FP8's fields only where there are: the contracts of 16-bit kernels
  // read as before.)
  if (m.oDtype() != m.dtype)
    w.field("attention.out_dtype", m.oDtype());
  if (m.qDescale >= 0 || m.kDescale >= 0 || m.vDescale >= 0) {
    w.field("attention.descales.q", m.qDescale);
    w.field("attention.descales.k", m.kDescale);
    w.field("attention.descales.v", m.vDescale);
  }
  w.flag("attention.lse", m.lse);
  w.field("attention.rows_per_task", m.rowsPerTask);
  w.flag("attention.score_mod", m.scoreMod);
  w.flag("attention.mask_mod", m.maskMod);
  w.field("attention.block_mask", m.blockMask);
  // Only where there is one: the contracts of kernels without it read as
  // before.
  if (m.seqUsedK >= 0)
    w.field("attention.seqused_k", m.seqUsedK);
  if (m.blockTable >= 0) {
    w.field("attention.block_table", m.blockTable);
    w.field("attention.page_size", m.pageSize);
  }
  if (m.splitWorkspace >= 0) {
    w.field("attention.num_splits", m.numSplits);
    w.field("attention.split_workspace", m.splitWorkspace);
  }
  if (m.cuSeqlensQ >= 0) {
    w.field("attention.cu_seqlens_q", m.cuSeqlensQ);
    w.field("attention.cu_seqlens_k", m.cuSeqlensK);
  }
  w.list("", "block", llvm::ArrayRef<uint32_t>(m.block, 3));
  w.field("grid.order", m.order);
  w.field("dynamic_smem_bytes", m.dynamicSmemBytes);
  w.field("tmem_columns", m.tmemColumns);
  w.field("extras", static_cast<int64_t>(m.extras.size()));
  for (size_t i = 0; i < m.extras.size(); ++i) {
    std::string at = element("extras", i) + ".";
    w.field(at, "dtype", m.extras[i].dtype);
    w.list(at, "shape", m.extras[i].shape);
  }
  w.field("tensor_maps", static_cast<int64_t>(m.tensorMaps.size()));
  for (size_t i = 0; i < m.tensorMaps.size(); ++i) {
    const Manifest::TensorMap &map = m.tensorMaps[i];
    std::string at = element("tensor_maps", i) + ".";
    w.field(at, "tensor", map.tensor);
    w.field(at, "dtype", map.dtype);
    if (!map.layout.empty())
      w.field(at, "layout", map.layout);
    w.field(at, "rank", map.rank);
    w.list(at, "dims", map.dims);
    w.list(at, "axes", map.axes);
    w.list(at, "layout_strides", map.layoutStrides);
    w.list(at, "box", llvm::ArrayRef<uint32_t>(map.box, map.rank));
    w.list(at, "element_strides", llvm::ArrayRef<uint32_t>(map.elementStrides, map.rank));
    w.field(at, "swizzle", swizzleName(map.swizzle));
    w.field(at, "oob_fill",
            map.oobFill == TensorMapOobFill::Zero ? "zero" : "nan");
  }
  w.field("parameters", static_cast<int64_t>(m.parameters.size()));
  for (size_t i = 0; i < m.parameters.size(); ++i)
    w.field(element("parameters", i), "", m.parameters[i].name + ": " + m.parameters[i].type);
  w.field("roles", static_cast<int64_t>(m.roles.size()));
  for (size_t i = 0; i < m.roles.size(); ++i) {
    const Manifest::Role &role = m.roles[i];
    w.field(element("roles", i), "",
            role.name + " warps " + std::to_string(role.firstWarp) + "+" +
                std::to_string(role.numWarps) + " registers " +
                std::to_string(role.registers));
  }
  return w.text;
}

llvm::Expected<std::optional<std::string>> readPtxContract(llvm::StringRef ptx) {
  auto fail = [](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the PTX's " + llvm::Twine(kContractSymbol) +
                                       " " + why);
  };
  // The declaration is the symbol followed by `[`; an instruction naming
  // the symbol (there is none in fa4's code) takes its address without one.
  std::string declarator = std::string(kContractSymbol) + "[";
  // A declaration in a comment (`//` to the line's end, `/* ... */`) is no
  // declaration: ptxas ignores it, and so must the reader.
  auto commented = [&](size_t at) {
    size_t lineStart = ptx.find_last_of('\n', at);
    lineStart = lineStart == llvm::StringRef::npos ? 0 : lineStart + 1;
    if (ptx.slice(lineStart, at).contains("//"))
      return true;
    size_t open = ptx.take_front(at).rfind("/*");
    return open != llvm::StringRef::npos &&
           ptx.slice(open, at).find("*/") == llvm::StringRef::npos;
  };
  auto nextDeclaration = [&](size_t from) {
    size_t at = ptx.find(declarator, from);
    while (at != llvm::StringRef::npos && commented(at))
      at = ptx.find(declarator, at + 1);
    return at;
  };
  size_t at = nextDeclaration(0);
  if (at == llvm::StringRef::npos)
    return std::nullopt;
  if (nextDeclaration(at + 1) != llvm::StringRef::npos)
    return fail("is declared twice");
  // The declaration must be a `.global` one: the statement it is in starts
  // after the previous `;` or `}`.
  size_t start = ptx.find_last_of(";}", at);
  llvm::StringRef head = ptx.slice(start == llvm::StringRef::npos ? 0 : start + 1, at);
  if (!head.contains(".global") || !head.contains(".b8"))
    return fail("is not a .global .b8 array");
  llvm::StringRef rest = ptx.drop_front(at + declarator.size());
  uint64_t count = 0;
  if (rest.consumeInteger(10, count) || count > kMaxContractBytes)
    return fail("has no size of at most " + llvm::Twine(kMaxContractBytes) + " bytes");
  rest = rest.ltrim();
  if (!rest.consume_front("]") || !(rest = rest.ltrim()).consume_front("=") ||
      !(rest = rest.ltrim()).consume_front("{"))
    return fail("has no initializer");
  std::string bytes;
  bytes.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    rest = rest.ltrim();
    uint64_t byte = 0;
    if (rest.consumeInteger(10, byte) || byte > 255)
      return fail("has an initializer that is not " + llvm::Twine(count) + " bytes");
    bytes += static_cast<char>(byte);
    rest = rest.ltrim();
    if (i + 1 < count && !rest.consume_front(","))
      return fail("has an initializer that is not " + llvm::Twine(count) + " bytes");
  }
  if (!rest.ltrim().starts_with("}"))
    return fail("has an initializer that is not " + llvm::Twine(count) + " bytes");
  return bytes;
}

namespace {
// ELF64 as the ELF specification lays it out (little-endian: every cubin).
constexpr size_t kElfHeaderBytes = 64, kSectionHeaderBytes = 64, kSymbolBytes = 24;
constexpr uint32_t kSymtab = 2, kNobits = 8;

/// The file's bytes: every read() is preceded by a contains() of its range
/// (the headers' and the tables' ranges are checked once, whole).
class ElfBytes {
public:
  explicit ElfBytes(llvm::ArrayRef<uint8_t> bytes) : bytes(bytes) {}
  /// Whether [offset, offset + size) lies inside the file (no overflow).
  bool contains(uint64_t offset, uint64_t size) const {
    return offset <= bytes.size() && size <= bytes.size() - offset;
  }
  template <typename T> T read(uint64_t offset) const {
    return llvm::support::endian::read<T, llvm::endianness::little>(
        bytes.data() + offset);
  }
  llvm::ArrayRef<uint8_t> bytes;
};

struct Section {
  uint32_t type = 0, link = 0;
  uint64_t offset = 0, size = 0, entrySize = 0;
};
} // namespace

llvm::Expected<std::optional<std::string>>
readCubinContract(llvm::ArrayRef<uint8_t> cubin) {
  auto fail = [](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the cubin " + why);
  };
  ElfBytes elf(cubin);
  // Not ELF at all: no symbol to hold a contract (the driver takes other
  // formats too; checkContract refuses it when the PTX declares one).
  static const uint8_t magic[] = {0x7f, 'E', 'L', 'F', /*64-bit*/ 2,
                                  /*little-endian*/ 1};
  if (!elf.contains(0, 4) || std::memcmp(cubin.data(), magic, 4) != 0)
    return std::nullopt;
  if (!elf.contains(0, kElfHeaderBytes) ||
      std::memcmp(cubin.data(), magic, sizeof(magic)) != 0)
    return fail("is not a little-endian ELF64 file");
  uint64_t sectionTable = elf.read<uint64_t>(0x28);
  uint16_t entrySize = elf.read<uint16_t>(0x3a);
  uint16_t count = elf.read<uint16_t>(0x3c);
  if (entrySize < kSectionHeaderBytes ||
      !elf.contains(sectionTable, uint64_t(entrySize) * count))
    return fail("has a section table outside the file");
  std::vector<Section> sections(count);
  for (uint16_t i = 0; i < count; ++i) {
    uint64_t at = sectionTable + uint64_t(i) * entrySize;
    Section &s = sections[i];
    s.type = elf.read<uint32_t>(at + 0x04);
    s.offset = elf.read<uint64_t>(at + 0x18);
    s.size = elf.read<uint64_t>(at + 0x20);
    s.link = elf.read<uint32_t>(at + 0x28);
    s.entrySize = elf.read<uint64_t>(at + 0x38);
    if (s.type != kNobits && !elf.contains(s.offset, s.size))
      return fail("has section " + llvm::Twine(i) + " outside the file");
  }
  std::optional<std::string> found;
  for (const Section &symtab : sections) {
    if (symtab.type != kSymtab)
      continue;
    if (symtab.entrySize != kSymbolBytes || symtab.link >= count ||
        sections[symtab.link].type == kNobits)
      return fail("has a malformed symbol table");
    const Section &names = sections[symtab.link];
    llvm::StringRef table(reinterpret_cast<const char *>(cubin.data()) + names.offset,
                          names.size);
    for (uint64_t at = symtab.offset; at + kSymbolBytes <= symtab.offset + symtab.size;
         at += kSymbolBytes) {
      uint32_t name = elf.read<uint32_t>(at);
      if (name >= names.size)
        return fail("has a symbol whose name lies outside its string table");
      // The name must end inside the string table.
      size_t end = table.find('\0', name);
      if (end == llvm::StringRef::npos)
        return fail("has a symbol name that does not end in its string table");
      if (table.slice(name, end) != kContractSymbol)
        continue;
      if (found)
        return fail("defines " + llvm::Twine(kContractSymbol) + " twice");
      uint16_t index = elf.read<uint16_t>(at + 6);
      uint64_t value = elf.read<uint64_t>(at + 8);
      uint64_t size = elf.read<uint64_t>(at + 16);
      if (index == 0 || index >= count || sections[index].type == kNobits)
        return fail("has " + llvm::Twine(kContractSymbol) +
                    " without contents (not in a section holding bytes)");
      const Section &holder = sections[index];
      if (size > kMaxContractBytes || value > holder.size ||
          size > holder.size - value)
        return fail("has " + llvm::Twine(kContractSymbol) +
                    " larger than its section or than " +
                    llvm::Twine(kMaxContractBytes) + " bytes");
      const uint8_t *bytes = cubin.data() + holder.offset + value;
      found = std::string(bytes, bytes + size);
    }
  }
  return found;
}

namespace {
/// The contract's lines as (field, value) pairs, in order.
std::vector<std::pair<llvm::StringRef, llvm::StringRef>> fields(llvm::StringRef text) {
  std::vector<std::pair<llvm::StringRef, llvm::StringRef>> lines;
  llvm::SmallVector<llvm::StringRef> split;
  text.split(split, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : split)
    lines.push_back(line.split('='));
  return lines;
}

/// The first difference between two contracts, named by field: "FIELD is
/// A in the manifest, B in the kernel" (`a` is the manifest's).
std::string difference(llvm::StringRef a, llvm::StringRef b, llvm::StringRef aName,
                       llvm::StringRef bName) {
  auto left = fields(a), right = fields(b);
  for (size_t i = 0; i < std::max(left.size(), right.size()); ++i) {
    if (i < left.size() && i < right.size() && left[i] == right[i])
      continue;
    if (i >= right.size())
      return ("\"" + left[i].first + "\" is " + left[i].second + " in " + aName +
              ", absent from " + bName)
          .str();
    // A field one side has and the other lacks, the rest in step (a
    // pair's grid.cluster beside a kernel of one CTA), is named as missing,
    // not as the next field out of place.
    auto has = [](const auto &side, const auto &key) {
      return llvm::any_of(side, [&](const auto &f) { return f.first == key; });
    };
    if (i < left.size() && i < right.size() && left[i].first != right[i].first) {
      bool rightInLeft = has(left, right[i].first);
      bool leftInRight = has(right, left[i].first);
      if (!rightInLeft && leftInRight)
        return ("\"" + right[i].first + "\" is " + right[i].second + " in " +
                bName + ", absent from " + aName)
            .str();
      if (!leftInRight && rightInLeft)
        return ("\"" + left[i].first + "\" is " + left[i].second + " in " +
                aName + ", absent from " + bName)
            .str();
    }
    if (i >= left.size() || left[i].first != right[i].first)
      return ("\"" + right[i].first + "\" is " + right[i].second + " in " + bName +
              (i < left.size() ? ", where " + aName + " has \"" + left[i].first + "\""
                               : ", absent from " + aName))
          .str();
    return ("\"" + left[i].first + "\" is " + left[i].second + " in " + aName +
            " but " + right[i].second + " in " + bName)
        .str();
  }
  return "";
}
} // namespace

std::string backwardContract(const BackwardManifest &m) {
  ContractWriter w;
  w.field("kind", "backward");
  w.field("target", m.target);
  w.field("attention.mask", m.mask);
  w.field("attention.window_left", m.windowLeft);
  w.field("attention.window_right", m.windowRight);
  w.number("attention.scale", m.scale);
  w.number("attention.softcap", m.softcap);
  w.field("attention.head_dim", m.headDim);
  w.field("attention.q_heads", m.qHeads);
  w.field("attention.kv_heads", m.kvHeads);
  w.field("attention.dtype", m.dtype);
  w.flag("attention.deterministic", m.deterministic);
  // (Always, as the forward's: a manifest that says false, or lists other
  // extras, is then named by the field's two values.)
  w.flag("attention.score_mod", m.scoreMod);
  w.flag("attention.mask_mod", m.maskMod);
  w.field("attention.gqa_packing", m.gqaPacking);
  w.field("extras", static_cast<int64_t>(m.extras.size()));
  for (size_t i = 0; i < m.extras.size(); ++i) {
    std::string at = element("extras", i) + ".";
    w.field(at, "dtype", m.extras[i].dtype);
    w.list(at, "shape", m.extras[i].shape);
  }
  static const char *keys[3] = {"prepare", "main", "finish"};
  for (int k = 0; k < 3; ++k) {
    const BackwardManifest::Kernel &kernel = m.kernels[k];
    std::string at = std::string("kernels.") + keys[k] + ".";
    w.field(at, "name", kernel.name);
    w.field(at, "block", static_cast<int64_t>(kernel.block));
    w.field(at, "dynamic_smem_bytes",
            static_cast<int64_t>(kernel.dynamicSmemBytes));
    w.field(at, "roles", static_cast<int64_t>(kernel.roles.size()));
    for (size_t i = 0; i < kernel.roles.size(); ++i) {
      const Manifest::Role &role = kernel.roles[i];
      w.field(at + element("roles", i), "",
              role.name + " warps " + std::to_string(role.firstWarp) + "+" +
                  std::to_string(role.numWarps) + " registers " +
                  std::to_string(role.registers));
    }
  }
  return w.text;
}

llvm::Error checkContract(const Manifest &manifest, llvm::StringRef ptx,
                          llvm::ArrayRef<uint8_t> cubin) {
  return checkContractText(kernelContract(manifest), ptx, cubin);
}

llvm::Error checkContractText(const std::string &expected, llvm::StringRef ptx,
                              llvm::ArrayRef<uint8_t> cubin) {
  auto fail = [](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), why);
  };
  std::optional<std::string> fromPtx, fromCubin;
  if (!ptx.empty()) {
    auto read = readPtxContract(ptx);
    if (!read)
      return read.takeError();
    fromPtx = std::move(*read);
  }
  if (!cubin.empty()) {
    auto read = readCubinContract(cubin);
    if (!read)
      return read.takeError();
    fromCubin = std::move(*read);
  }
  // A contract in one file and none in the other: they are not the output
  // of one fa4c run (a hand-written or older file swapped in).
  if (!ptx.empty() && !cubin.empty() && fromPtx.has_value() != fromCubin.has_value())
    return fail(llvm::Twine("the ") + (fromPtx ? "PTX" : "cubin") +
                " declares the kernel's contract (" + kContractSymbol + ") and the " +
                (fromPtx ? "cubin" : "PTX") +
                " none: they are not the output of one fa4c run");
  if (fromPtx && fromCubin && *fromPtx != *fromCubin)
    return fail("the cubin is not the PTX's: " +
                difference(*fromPtx, *fromCubin, "the PTX's contract",
                           "the cubin's"));
  const std::optional<std::string> &declared = fromPtx ? fromPtx : fromCubin;
  if (!declared)
    return llvm::Error::success();
  if (expected != *declared)
    return fail("manifest: the kernel was not compiled for it: " +
                difference(expected, *declared, "the manifest",
                           fromPtx ? "the kernel's PTX" : "the kernel's cubin"));
  return llvm::Error::success();
}

} // namespace mlir::fa4::runtime
