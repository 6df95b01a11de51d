//===- Parser.cpp - PTX text to a Program -----------------------------------===//
//
// Reads the PTX that LLVM's NVPTX back end writes (and that inline assembly
// adds to it): module directives, shared-memory variables, entries with their
// parameters and performance directives, register declarations, nested
// `{ }` scopes with their own registers and labels, predicated instructions.
// Each instruction is decoded once; a mnemonic or qualifier the emulator does
// not model is an error that names it, never a guess.
//
//===----------------------------------------------------------------------===//

#include "Program.h"

#include "fa4/Support/Error.h"
#include "fa4/Target/Target.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace mlir::fa4::emu {
namespace {

/// testp's class (1 finite, 2 infinite, 3 number, 4 notanumber, 5 normal,
/// 6 subnormal), 0 for anything else.
uint8_t testpClass(const std::string &q) {
  static const char *const classes[] = {"finite", "infinite", "number",
                                        "notanumber", "normal", "subnormal"};
  for (uint8_t i = 0; i < 6; ++i)
    if (q == classes[i])
      return i + 1;
  return 0;
}


struct ParseError {
  std::string message;
};

/// The longest message a parse error carries: the statements it quotes come
/// from the input, which may be one line of hundreds of megabytes (or the
/// bytes of a cubin named as PTX).
constexpr size_t kMaxMessageBytes = 512;

/// `message` cut to kMaxMessageBytes, bytes outside printable ASCII shown
/// as '?'.
std::string boundedMessage(const std::string &message) {
  std::string shown = message.substr(0, kMaxMessageBytes);
  for (char &c : shown)
    if (!std::isprint(static_cast<unsigned char>(c)) && c != '\t')
      c = '?';
  if (message.size() > kMaxMessageBytes)
    shown += "... (" + std::to_string(message.size() - kMaxMessageBytes) +
             " more bytes)";
  return shown;
}

[[noreturn]] void fail(const std::string &message) {
  throw ParseError{boundedMessage(message)};
}

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return s.substr(b, e - b);
}

std::vector<std::string> splitTopLevel(const std::string &s, char separator) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string current;
  for (char c : s) {
    if (c == '[' || c == '{' || c == '(')
      ++depth;
    if (c == ']' || c == '}' || c == ')')
      --depth;
    if (c == separator && depth == 0) {
      parts.push_back(trim(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (!trim(current).empty())
    parts.push_back(trim(current));
  return parts;
}

/// Splits a mnemonic at dots, keeping `::` inside a part.
std::vector<std::string> splitMnemonic(const std::string &s) {
  std::vector<std::string> parts;
  std::string current;
  for (char c : s) {
    if (c == '.') {
      parts.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  parts.push_back(current);
  return parts;
}

bool parseType(const std::string &s, Ty &type) {
  static const std::map<std::string, Ty> types = {
      {"b8", Ty::B8},     {"u8", Ty::U8},         {"s8", Ty::S8},
      {"b16", Ty::B16},   {"u16", Ty::U16},       {"s16", Ty::S16},
      {"f16", Ty::F16},   {"bf16", Ty::BF16},     {"b32", Ty::B32},
      {"u32", Ty::U32},   {"s32", Ty::S32},       {"f32", Ty::F32},
      {"b64", Ty::B64},   {"u64", Ty::U64},       {"s64", Ty::S64},
      {"f64", Ty::F64},   {"f16x2", Ty::F16x2},   {"bf16x2", Ty::BF16x2},
      {"f32x2", Ty::F32x2}, {"pred", Ty::Pred}};
  auto it = types.find(s);
  if (it == types.end())
    return false;
  type = it->second;
  return true;
}

/// The 8-bit float types and their pairs, which only wgmma and cvt take.
bool parseFloat8Type(const std::string &s, Ty &type) {
  static const std::map<std::string, Ty> types = {{"e4m3", Ty::E4M3},
                                                  {"e5m2", Ty::E5M2},
                                                  {"e4m3x2", Ty::E4M3x2},
                                                  {"e5m2x2", Ty::E5M2x2}};
  auto it = types.find(s);
  if (it == types.end())
    return false;
  type = it->second;
  return true;
}

bool parseInteger(const std::string &text, int64_t &value) {
  if (text.empty())
    return false;
  std::string s = text;
  bool negative = false;
  if (s[0] == '-' || s[0] == '+') {
    negative = s[0] == '-';
    s = s.substr(1);
  }
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  if (s.size() > 1 && s.back() == 'U')
    s.pop_back();
  char *end = nullptr;
  unsigned long long magnitude;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    magnitude = std::strtoull(s.c_str() + 2, &end, 16);
  else if (s.size() > 1 && s[0] == '0' && std::isdigit(static_cast<unsigned char>(s[1])))
    magnitude = std::strtoull(s.c_str() + 1, &end, 8);
  else
    magnitude = std::strtoull(s.c_str(), &end, 10);
  if (*end != '\0')
    return false;
  value = negative ? -static_cast<int64_t>(magnitude)
                   : static_cast<int64_t>(magnitude);
  return true;
}

const std::map<std::string, Special> &specials() {
  static const std::map<std::string, Special> table = {
      {"%tid.x", Special::TidX},       {"%tid.y", Special::TidY},
      {"%tid.z", Special::TidZ},       {"%ntid.x", Special::NtidX},
      {"%ntid.y", Special::NtidY},     {"%ntid.z", Special::NtidZ},
      {"%ctaid.x", Special::CtaidX},   {"%ctaid.y", Special::CtaidY},
      {"%ctaid.z", Special::CtaidZ},   {"%nctaid.x", Special::NctaidX},
      {"%nctaid.y", Special::NctaidY}, {"%nctaid.z", Special::NctaidZ},
      {"%laneid", Special::LaneId},    {"%warpid", Special::WarpId},
      {"%nwarpid", Special::NWarpId},  {"%smid", Special::SmId},
      {"%nsmid", Special::NSmId},
      {"%dynamic_smem_size", Special::DynamicSmemSize},
      {"%clock", Special::Clock},      {"%clock64", Special::Clock64},
      {"%globaltimer", Special::GlobalTimer},
      {"%cluster_ctarank", Special::ClusterCtaRank},
      {"%cluster_nctarank", Special::ClusterNCtaRank},
      {"%cluster_ctaid.x", Special::ClusterCtaidX},
      {"%cluster_ctaid.y", Special::ClusterCtaidY},
      {"%cluster_ctaid.z", Special::ClusterCtaidZ},
      {"%cluster_nctaid.x", Special::ClusterNCtaidX},
      {"%cluster_nctaid.y", Special::ClusterNCtaidY},
      {"%cluster_nctaid.z", Special::ClusterNCtaidZ},
      {"%clusterid.x", Special::ClusteridX},
      {"%clusterid.y", Special::ClusteridY},
      {"%clusterid.z", Special::ClusteridZ},
      {"%nclusterid.x", Special::NClusteridX},
      {"%nclusterid.y", Special::NClusteridY},
      {"%nclusterid.z", Special::NClusteridZ},
      {"%is_explicit_cluster", Special::IsExplicitCluster}};
  return table;
}

class Parser {
public:
  explicit Parser(const std::string &text) : text(text) {}
  void parse(Program &program);

private:
  // Scanning.
  void skipSpaceAndComments();
  std::string readStatement(char &terminator);

  // Module level.
  void parseModuleDirective(const std::string &statement);
  void parseEntryHeader(const std::string &header);
  void parseBody();
  void computeReconvergence();

  // Registers and scopes.
  struct Scope {
    int parent;
    std::map<std::string, uint32_t> registers;
    std::map<std::string, uint32_t> labels;
  };
  void declareRegisters(const std::string &statement);
  bool lookupRegister(const std::string &name, uint32_t &slot) const;

  // Instructions.
  void parseInstruction(const std::string &statement);
  Operand parseOperand(const std::string &text, Ty type);
  Operand parseMemory(const std::string &text);
  void decode(Inst &inst, const std::vector<std::string> &parts,
              std::vector<std::string> &operands);

  // Decoding, one instruction family each.
  struct Decoding;
  [[noreturn]] void unsupported(const Decoding &d, const std::string &what) const;
  void requireNoUnknown(const Decoding &d) const;
  void requireType(Decoding &d) const;
  void setOperands(Decoding &d, size_t expectedMin, size_t expectedMax, Ty type);
  void decodeCvta(Decoding &d);
  void decodeCvt(Decoding &d);
  void decodeAlu(Decoding &d);
  void decodeLoadStore(Decoding &d);
  void decodeAtom(Decoding &d);
  void decodeRed(Decoding &d);
  void decodeStMatrix(Decoding &d);
  void decodeBranch(Decoding &d);
  void decodeFence(Decoding &d);
  void decodeMbarrier(Decoding &d);
  void decodeBulkCopy(Decoding &d);
  void decodeTma(Decoding &d, const std::vector<std::string> &parts);
  void decodeTcgen05(Decoding &d);
  void decodeTmemCopy(Decoding &d);
  void decodeVote(Decoding &d);
  void decodeShfl(Decoding &d);
  void decodeWarpBarrier(Decoding &d);
  void decodeBarrier(Decoding &d);
  void decodeClusterBarrier(Decoding &d);
  void decodeMapa(Decoding &d);
  void decodeWgmma(Decoding &d);
  void decodeWgmmaShape(Decoding &d);
  void decodeWgmmaOperands(Decoding &d);
  /// Operand `i` of a wgmma.mma_async, an immediate from `allowed`.
  int64_t wgmmaImmediate(const Decoding &d, size_t i,
                         std::initializer_list<int64_t> allowed) const;
  void decodeSetMaxNReg(Decoding &d);

  uint32_t line() const;
  std::string where() const { return "line " + std::to_string(line()); }

  const std::string &text;
  size_t pos = 0;
  size_t statementBegin = 0;
  /// line()'s running count: the line of text[linesCountedTo].
  mutable size_t linesCountedTo = 0;
  mutable uint32_t linesBefore = 1;
  Program *program = nullptr;
  Kernel *kernel = nullptr;
  std::vector<Scope> scopes;
  int currentScope = -1;
  /// Branches to resolve: instruction index, scope, label.
  struct PendingBranch {
    uint32_t inst;
    int scope;
    std::string label;
  };
  std::vector<PendingBranch> branches;
  std::vector<int> instScopes;
  std::map<std::string, uint32_t> sharedSymbols;
  std::string dynamicSmemSymbol;
  std::set<std::string> globalVariables;
  /// Where the first wgmma and tcgen05 instructions are, for the target
  /// check.
  std::string firstWgmma, firstTcgen05;
};

uint32_t Parser::line() const {
  // Statements are read front to back: count on from the last statement
  // asked about (every instruction records its line, so a count from the
  // start each time would make parsing quadratic in the PTX's size).
  size_t end = std::min(statementBegin, text.size());
  if (end < linesCountedTo) {
    linesCountedTo = 0;
    linesBefore = 1;
  }
  for (; linesCountedTo < end; ++linesCountedTo)
    linesBefore += text[linesCountedTo] == '\n';
  return linesBefore;
}

void Parser::skipSpaceAndComments() {
  while (pos < text.size()) {
    char c = text[pos];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++pos;
    } else if (text.compare(pos, 2, "//") == 0) {
      while (pos < text.size() && text[pos] != '\n')
        ++pos;
    } else if (text.compare(pos, 2, "/*") == 0) {
      size_t end = text.find("*/", pos + 2);
      pos = end == std::string::npos ? text.size() : end + 2;
    } else {
      break;
    }
  }
}

/// Reads up to and including the next ';', '{' or '}' (returned in
/// `terminator`), or a label's ':' — a single colon right after the first
/// identifier of a statement.
std::string Parser::readStatement(char &terminator) {
  skipSpaceAndComments();
  statementBegin = pos;
  std::string out;
  bool firstToken = true;
  while (pos < text.size()) {
    char c = text[pos];
    if (text.compare(pos, 2, "//") == 0 || text.compare(pos, 2, "/*") == 0) {
      skipSpaceAndComments();
      out += ' ';
      continue;
    }
    // .version, .target and .address_size end at the line's end.
    if (c == '\n' && (out.compare(0, 8, ".version") == 0 ||
                      out.compare(0, 7, ".target") == 0 ||
                      out.compare(0, 13, ".address_size") == 0)) {
      terminator = ';';
      ++pos;
      return trim(out);
    }
    if (c == ';' || ((c == '{' || c == '}') && trim(out).empty())) {
      terminator = c;
      ++pos;
      return trim(out);
    }
    if (c == '{' && out.find('(') != std::string::npos &&
        out.find(".entry") != std::string::npos) {
      terminator = c;
      ++pos;
      return trim(out);
    }
    if (c == ':' && firstToken && text.compare(pos, 2, "::") != 0 &&
        (pos == 0 || text[pos - 1] != ':')) {
      std::string candidate = trim(out);
      if (!candidate.empty() &&
          candidate.find_first_of(" \t") == std::string::npos) {
        terminator = ':';
        ++pos;
        return candidate;
      }
    }
    if (std::isspace(static_cast<unsigned char>(c)) && !trim(out).empty())
      firstToken = false;
    out += c;
    ++pos;
  }
  terminator = '\0';
  return trim(out);
}

void Parser::parse(Program &prog) {
  program = &prog;
  while (true) {
    char terminator;
    std::string statement = readStatement(terminator);
    if (terminator == '\0') {
      if (!statement.empty())
        fail(where() + ": unterminated statement '" + statement + "'");
      break;
    }
    if (terminator == '{' && statement.find(".entry") != std::string::npos) {
      parseEntryHeader(statement);
      parseBody();
      continue;
    }
    if (terminator != ';')
      fail(where() + ": unexpected '" + std::string(1, terminator) +
           "' at module level");
    parseModuleDirective(statement);
  }
  if (prog.kernels.empty())
    fail("the PTX holds no .entry");
  // The architecture-specific families exist on their own chips only:
  // wgmma on sm_90a, tcgen05 on sm_100a (PTX ISA, target requirements).
  const target::ChipInfo *chip = target::lookup(prog.target);
  if (!firstWgmma.empty() && !(chip && chip->wgmma))
    fail(firstWgmma + ": wgmma needs .target " + target::chipsWithWgmma() +
         "; this module is for " +
         (prog.target.empty() ? std::string("no target") : prog.target));
  if (!firstTcgen05.empty() && !(chip && chip->tcgen05))
    fail(firstTcgen05 + ": tcgen05 needs .target " + target::chipsWithTcgen05() +
         "; this module is for " +
         (prog.target.empty() ? std::string("no target") : prog.target));
}

void Parser::parseModuleDirective(const std::string &statement) {
  std::vector<std::string> words = splitTopLevel(statement, ' ');
  if (words.empty())
    return;
  const std::string &first = words[0];
  if (first == ".target") {
    program->target = words.size() > 1 ? trim(words[1]) : "";
    if (!program->target.empty() && program->target.back() == ',')
      program->target.pop_back();
    return;
  }
  if (first == ".version" || first == ".address_size")
    return;
  if (statement.find(".func") != std::string::npos)
    fail(where() + ": .func declarations are not supported (fa4 kernels "
                   "call no device functions)");
  if (statement.find(".shared") != std::string::npos) {
    // [.extern] .shared [.align N] .b8 name[size];
    uint32_t align = 1;
    std::string declarator;
    bool isExtern = false;
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == ".extern")
        isExtern = true;
      else if (words[i] == ".align" && i + 1 < words.size())
        align = static_cast<uint32_t>(std::strtoul(words[++i].c_str(), nullptr, 10));
      else if (words[i][0] != '.')
        declarator = words[i];
    }
    size_t bracket = declarator.find('[');
    std::string name = declarator.substr(0, bracket);
    if (name.empty())
      fail(where() + ": cannot read the shared variable in '" + statement + "'");
    if (align == 0 || (align & (align - 1)))
      fail(where() + ": .align " + std::to_string(align) + " is not a power of 2");
    if (isExtern) {
      dynamicSmemSymbol = name;
      program->dynamicSmemAlign = std::max(program->dynamicSmemAlign, align);
      return;
    }
    uint32_t size = 1;
    if (bracket != std::string::npos)
      size = static_cast<uint32_t>(
          std::strtoul(declarator.c_str() + bracket + 1, nullptr, 10));
    uint32_t offset = (program->staticSmemBytes + align - 1) / align * align;
    sharedSymbols[name] = kSharedBase + offset;
    program->staticSmemBytes = offset + size;
    return;
  }
  if (std::find(words.begin(), words.end(), ".global") != words.end()) {
    // [.visible|.extern|.weak] .global [.align N] .type name[[size]] [= init]:
    // the declaration is accepted, but the emulator places no module
    // variable in global memory, so an instruction naming one is refused
    // (parseMemory). nvcc declares CUDA's and CuTe's namespace-scope tag
    // objects this way in every module that includes them.
    std::string name;
    for (size_t i = 0; i < words.size() && name.empty(); ++i) {
      if (words[i] == ".align")
        ++i;
      else if (words[i][0] != '.')
        name = words[i].substr(0, words[i].find_first_of("[="));
    }
    if (name.empty())
      fail(where() + ": cannot read the .global variable in '" + statement + "'");
    globalVariables.insert(name);
    return;
  }
  if (first == ".const" || statement.find(" .const ") != std::string::npos)
    fail(where() + ": module-scope .const variables are not supported");
  fail(where() + ": unsupported module directive '" + statement + "'");
}

void Parser::parseEntryHeader(const std::string &header) {
  size_t open = header.find('('), close = header.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    fail(where() + ": cannot read the .entry header");
  std::vector<std::string> words = splitTopLevel(header.substr(0, open), ' ');
  program->kernels.emplace_back();
  kernel = &program->kernels.back();
  kernel->name = trim(words.empty() ? "" : words.back());
  for (const std::string &param :
       splitTopLevel(header.substr(open + 1, close - open - 1), ',')) {
    // .param [.align N] .type [.ptr ...] name[[size]]
    std::vector<std::string> tokens = splitTopLevel(param, ' ');
    KernelParam p;
    Ty type = Ty::None;
    bool explicitAlign = false, pointer = false;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string &t = tokens[i];
      if (t == ".ptr") {
        pointer = true;
      } else if (t == ".align" && i + 1 < tokens.size()) {
        uint32_t align = static_cast<uint32_t>(std::strtoul(tokens[++i].c_str(), nullptr, 10));
        // After .ptr, .align is the alignment of the memory the pointer
        // points to, not the parameter's (PTX ISA, "Kernel Function
        // Parameter Attribute: .ptr").
        if (!pointer) {
          p.align = align;
          explicitAlign = true;
        }
      } else if (t.size() > 1 && t[0] == '.') {
        parseType(t.substr(1), type);
      } else {
        p.name = t;
      }
    }
    uint32_t elementBytes = type == Ty::None ? 1 : std::max(1u, bitsOf(type) / 8);
    uint32_t count = 1;
    size_t bracket = p.name.find('[');
    if (bracket != std::string::npos) {
      count = static_cast<uint32_t>(std::strtoul(p.name.c_str() + bracket + 1, nullptr, 10));
      p.name = p.name.substr(0, bracket);
    }
    if (p.name.empty() || type == Ty::None)
      fail(where() + ": cannot read the parameter '" + param + "'");
    p.bytes = elementBytes * count;
    if (!explicitAlign)
      p.align = elementBytes;
    if (p.align == 0 || (p.align & (p.align - 1)))
      fail(where() + ": parameter " + p.name + " has alignment " +
           std::to_string(p.align));
    uint32_t offset = (kernel->paramBytes + p.align - 1) / p.align * p.align;
    kernel->paramOffsets.push_back(offset);
    kernel->paramBytes = offset + p.bytes;
    kernel->params.push_back(p);
  }
  // Performance directives may span lines: split on any whitespace.
  std::string directives = header.substr(close + 1);
  for (char &c : directives)
    if (std::isspace(static_cast<unsigned char>(c)))
      c = ' ';
  std::vector<std::string> tail = splitTopLevel(directives, ' ');
  // The threads of a .maxntid or .reqntid nx[, ny[, nz]]: the product.
  auto threads = [&](size_t i) {
    std::string extents;
    for (size_t j = i + 1; j < tail.size() && tail[j][0] != '.'; ++j)
      extents += tail[j];
    uint32_t product = 1;
    for (const std::string &extent : splitTopLevel(extents, ','))
      product *= static_cast<uint32_t>(std::strtoul(extent.c_str(), nullptr, 10));
    return product;
  };
  for (size_t i = 0; i < tail.size(); ++i) {
    if (tail[i] == ".explicitcluster")
      kernel->explicitCluster = true;
    if (i + 1 >= tail.size())
      break;
    if (tail[i] == ".reqnctapercluster") {
      std::string extents;
      for (size_t j = i + 1; j < tail.size() && tail[j][0] != '.'; ++j)
        extents += tail[j];
      std::vector<std::string> dims = splitTopLevel(extents, ',');
      if (dims.empty() || dims.size() > 3)
        fail(where() + ": .reqnctapercluster takes one to three extents");
      for (uint32_t d = 0; d < 3; ++d) {
        unsigned long extent =
            d < dims.size() ? std::strtoul(dims[d].c_str(), nullptr, 10) : 1;
        if (extent == 0 || extent > 16)
          fail(where() + ": .reqnctapercluster extent " + dims[d] +
               " (1 to 16)");
        kernel->reqCluster[d] = static_cast<uint32_t>(extent);
      }
    }
    if (tail[i] == ".maxclusterrank")
      kernel->maxClusterRank =
          static_cast<uint32_t>(std::strtoul(tail[i + 1].c_str(), nullptr, 10));
    if (tail[i] == ".maxnreg")
      kernel->maxnreg = static_cast<uint32_t>(std::strtoul(tail[i + 1].c_str(), nullptr, 10));
    if (tail[i] == ".reqntid")
      kernel->reqntid = threads(i);
    if (tail[i] == ".maxntid")
      kernel->maxntid = threads(i);
  }
}

void Parser::declareRegisters(const std::string &statement) {
  // .reg .type name<N> | .reg .type a, b, c
  std::string rest = trim(statement.substr(4));
  size_t space = rest.find_first_of(" \t");
  if (space == std::string::npos)
    fail(where() + ": cannot read '" + statement + "'");
  Ty type;
  std::string typeName = rest.substr(0, space);
  if (typeName.empty() || typeName[0] != '.' || !parseType(typeName.substr(1), type))
    fail(where() + ": unknown register type in '" + statement + "'");
  for (const std::string &name : splitTopLevel(rest.substr(space + 1), ',')) {
    size_t angle = name.find('<');
    Scope &scope = scopes[currentScope];
    if (angle == std::string::npos) {
      scope.registers[name] = program->numRegs++;
      continue;
    }
    std::string prefix = trim(name.substr(0, angle));
    uint32_t count = static_cast<uint32_t>(std::strtoul(name.c_str() + angle + 1, nullptr, 10));
    for (uint32_t i = 0; i < count; ++i)
      scope.registers[prefix + std::to_string(i)] = program->numRegs++;
  }
}

bool Parser::lookupRegister(const std::string &name, uint32_t &slot) const {
  for (int s = currentScope; s >= 0; s = scopes[s].parent) {
    auto it = scopes[s].registers.find(name);
    if (it != scopes[s].registers.end()) {
      slot = it->second;
      return true;
    }
  }
  return false;
}

void Parser::parseBody() {
  scopes.clear();
  scopes.push_back({-1, {}, {}});
  currentScope = 0;
  kernel->begin = static_cast<uint32_t>(program->code.size());
  branches.clear();
  instScopes.clear();
  int depth = 1;
  while (depth > 0) {
    char terminator;
    std::string statement = readStatement(terminator);
    if (terminator == '\0')
      fail(where() + ": the body of " + kernel->name + " is not closed");
    if (terminator == '{') {
      scopes.push_back({currentScope, {}, {}});
      currentScope = static_cast<int>(scopes.size()) - 1;
      ++depth;
      continue;
    }
    if (terminator == '}') {
      currentScope = scopes[currentScope].parent;
      --depth;
      continue;
    }
    if (terminator == ':') {
      scopes[currentScope].labels[statement] =
          static_cast<uint32_t>(program->code.size());
      continue;
    }
    if (statement.empty())
      continue;
    if (statement.compare(0, 4, ".reg") == 0) {
      declareRegisters(statement);
      continue;
    }
    if (statement.compare(0, 6, ".local") == 0 || statement.compare(0, 7, ".shared") == 0)
      fail(where() + ": function-scope ." +
           statement.substr(1, statement.find(' ') - 1) +
           " variables are not supported");
    if (statement.compare(0, 7, ".pragma") == 0)
      continue;
    parseInstruction(statement);
  }
  // A trailing `ret` keeps every path terminated.
  Inst ret;
  ret.op = Op::Ret;
  ret.source = static_cast<uint32_t>(program->sources.size());
  program->sources.push_back("end of " + kernel->name);
  program->code.push_back(ret);
  instScopes.push_back(0);
  kernel->end = static_cast<uint32_t>(program->code.size());
  for (const PendingBranch &branch : branches) {
    bool found = false;
    for (int s = branch.scope; s >= 0 && !found; s = scopes[s].parent) {
      auto it = scopes[s].labels.find(branch.label);
      if (it != scopes[s].labels.end()) {
        program->code[branch.inst].target = it->second;
        found = true;
      }
    }
    if (!found)
      fail(program->sources[program->code[branch.inst].source] +
           ": branch to an undefined label " + branch.label);
  }
  computeReconvergence();
}

/// Where diverged lanes meet again: for every branch, the immediate
/// post-dominator of its block in the kernel's control-flow graph (the
/// reconvergence point a SIMT stack uses, and what the hardware's
/// convergence barriers approximate for code like this).
void Parser::computeReconvergence() {
  std::vector<Inst> &code = program->code;
  uint32_t begin = kernel->begin, end = static_cast<uint32_t>(code.size());
  // Basic blocks: leaders are the entry, branch targets and the instruction
  // after a branch or a return.
  std::vector<bool> leader(end - begin + 1, false);
  leader[0] = true;
  for (uint32_t i = begin; i < end; ++i) {
    if (code[i].op == Op::Bra) {
      leader[code[i].target - begin] = true;
      leader[i + 1 - begin] = true;
    } else if (code[i].op == Op::Ret) {
      leader[i + 1 - begin] = true;
    }
  }
  std::vector<uint32_t> blockStart, blockOf(end - begin);
  for (uint32_t i = begin; i < end; ++i) {
    if (leader[i - begin])
      blockStart.push_back(i);
    blockOf[i - begin] = static_cast<uint32_t>(blockStart.size() - 1);
  }
  size_t n = blockStart.size();
  const size_t exitNode = n; // a virtual exit after every return
  std::vector<std::vector<uint32_t>> successors(n);
  for (size_t b = 0; b < n; ++b) {
    uint32_t last = (b + 1 < n ? blockStart[b + 1] : end) - 1;
    const Inst &in = code[last];
    bool conditional = in.guard != kNoReg;
    if (in.op == Op::Bra) {
      successors[b].push_back(blockOf[in.target - begin]);
      if (conditional && last + 1 < end)
        successors[b].push_back(blockOf[last + 1 - begin]);
    } else if (in.op == Op::Ret) {
      successors[b].push_back(static_cast<uint32_t>(exitNode));
      if (conditional && last + 1 < end)
        successors[b].push_back(blockOf[last + 1 - begin]);
    } else if (last + 1 < end) {
      successors[b].push_back(blockOf[last + 1 - begin]);
    } else {
      successors[b].push_back(static_cast<uint32_t>(exitNode));
    }
  }
  // Post-dominator sets as bit vectors, by iteration to a fixed point.
  size_t words = (n + 1 + 63) / 64;
  std::vector<std::vector<uint64_t>> pdom(n + 1, std::vector<uint64_t>(words, ~0ull));
  std::fill(pdom[exitNode].begin(), pdom[exitNode].end(), 0);
  pdom[exitNode][exitNode / 64] |= 1ull << (exitNode % 64);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t b = n; b-- > 0;) {
      std::vector<uint64_t> next(words, ~0ull);
      for (uint32_t s : successors[b])
        for (size_t w = 0; w < words; ++w)
          next[w] &= pdom[s][w];
      next[b / 64] |= 1ull << (b % 64);
      if (next != pdom[b]) {
        pdom[b].swap(next);
        changed = true;
      }
    }
  }
  auto count = [&](size_t b) {
    size_t c = 0;
    for (uint64_t w : pdom[b])
      c += __builtin_popcountll(w);
    return c;
  };
  // The strict post-dominators of a block form a chain; the immediate one
  // is post-dominated by all the others, so it has the most.
  for (size_t b = 0; b < n; ++b) {
    uint32_t last = (b + 1 < n ? blockStart[b + 1] : end) - 1;
    if (code[last].op != Op::Bra)
      continue;
    size_t best = exitNode, bestCount = 0;
    for (size_t p = 0; p <= n; ++p) {
      if (p == b || !((pdom[b][p / 64] >> (p % 64)) & 1))
        continue;
      size_t c = count(p);
      if (c > bestCount) {
        best = p;
        bestCount = c;
      }
    }
    code[last].reconverge = best == exitNode ? kReconvergeAtExit : blockStart[best];
  }
}

Operand Parser::parseMemory(const std::string &inner) {
  Operand op;
  op.kind = Operand::Kind::Mem;
  std::string s = trim(inner);
  // base [+|- offset]
  size_t split = std::string::npos;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] == '+' || (s[i] == '-' && s[i - 1] != '+')) {
      split = i;
      break;
    }
  std::string base = trim(s.substr(0, split));
  if (split != std::string::npos) {
    std::string offset = trim(s.substr(split));
    if (offset[0] == '+')
      offset = trim(offset.substr(1));
    int64_t value;
    if (!parseInteger(offset, value))
      fail(where() + ": cannot read the address offset in [" + inner + "]");
    op.imm += value;
  }
  int64_t value;
  uint32_t slot;
  if (parseInteger(base, value)) {
    op.imm += value;
  } else if (lookupRegister(base, slot)) {
    op.reg = slot;
  } else if (sharedSymbols.count(base)) {
    op.imm += sharedSymbols[base];
    op.sharedSymbol = true;
  } else if (base == dynamicSmemSymbol && !base.empty()) {
    op.imm += kSharedBase + (program->staticSmemBytes + program->dynamicSmemAlign - 1) /
                                program->dynamicSmemAlign * program->dynamicSmemAlign;
    op.sharedSymbol = true;
  } else if (globalVariables.count(base)) {
    fail(where() + ": '" + base +
         "' is a module-scope .global variable, which fa4-emu does not "
         "place in global memory");
  } else {
    bool found = false;
    for (size_t i = 0; kernel && i < kernel->params.size(); ++i)
      if (kernel->params[i].name == base) {
        op.imm += kernel->paramOffsets[i];
        found = true;
      }
    if (!found)
      fail(where() + ": unknown name '" + base + "' in an address");
  }
  return op;
}

Operand Parser::parseOperand(const std::string &raw, Ty type) {
  std::string s = trim(raw);
  Operand op;
  if (s.empty())
    fail(where() + ": empty operand");
  if (s == "_") {
    op.kind = Operand::Kind::Sink;
    return op;
  }
  if (s[0] == '[') {
    if (s.back() != ']')
      fail(where() + ": unbalanced '[' in " + s);
    std::string inner = s.substr(1, s.size() - 2);
    std::vector<std::string> tuple = splitTopLevel(inner, ',');
    if (tuple.size() == 1)
      return parseMemory(inner);
    // [tensorMap, {coordinates}]: the address, with the coordinates as its
    // vector part.
    if (tuple.size() != 2 || tuple[1].empty() || tuple[1][0] != '{')
      fail(where() + ": cannot read the operand " + s);
    Operand address = parseMemory(tuple[0]);
    Operand coords = parseOperand(tuple[1], Ty::S32);
    address.vecBegin = coords.vecBegin;
    address.vecCount = coords.vecCount;
    return address;
  }
  if (s[0] == '{') {
    if (s.back() != '}')
      fail(where() + ": unbalanced '{' in " + s);
    std::vector<Operand> elements;
    for (const std::string &e : splitTopLevel(s.substr(1, s.size() - 2), ','))
      elements.push_back(parseOperand(e, type));
    op.kind = Operand::Kind::Vec;
    op.vecBegin = static_cast<uint32_t>(program->vectors.size());
    op.vecCount = static_cast<uint32_t>(elements.size());
    for (const Operand &e : elements)
      program->vectors.push_back(e);
    return op;
  }
  size_t bar = s.find('|');
  if (bar != std::string::npos) {
    Operand first = parseOperand(s.substr(0, bar), type);
    Operand second = parseOperand(s.substr(bar + 1), Ty::Pred);
    if (second.kind != Operand::Kind::Reg ||
        (first.kind != Operand::Kind::Reg && first.kind != Operand::Kind::Sink))
      fail(where() + ": a pair operand must name registers: " + s);
    // The first part keeps its kind: a register, or the sink `_` (as in
    // `elect.sync _|p`), whose value is discarded.
    first.reg2 = second.reg;
    return first;
  }
  auto special = specials().find(s);
  if (special != specials().end()) {
    op.kind = Operand::Kind::Special;
    op.special = special->second;
    return op;
  }
  uint32_t slot;
  if (lookupRegister(s, slot)) {
    op.kind = Operand::Kind::Reg;
    op.reg = slot;
    return op;
  }
  // Immediates: 0fXXXXXXXX (f32 bits), 0dXXXXXXXXXXXXXXXX (f64 bits),
  // integers, decimal floats.
  if (s.size() == 10 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) {
    op.kind = Operand::Kind::Imm;
    op.imm = static_cast<int64_t>(std::strtoull(s.c_str() + 2, nullptr, 16));
    return op;
  }
  if (s.size() == 18 && s[0] == '0' && (s[1] == 'd' || s[1] == 'D')) {
    op.kind = Operand::Kind::Imm;
    op.imm = static_cast<int64_t>(std::strtoull(s.c_str() + 2, nullptr, 16));
    return op;
  }
  int64_t value;
  if (parseInteger(s, value)) {
    op.kind = Operand::Kind::Imm;
    op.imm = value;
    return op;
  }
  if (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '.') {
    char *end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (*end == '\0') {
      op.kind = Operand::Kind::Imm;
      if (type == Ty::F64) {
        std::memcpy(&op.imm, &d, 8);
      } else {
        float f = static_cast<float>(d);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        op.imm = bits;
      }
      return op;
    }
  }
  if (s[0] == '%')
    fail(where() + ": undeclared register " + s);
  // A symbol used as a value: its address in its state space.
  Operand address = parseMemory(s);
  if (address.reg != kNoReg)
    fail(where() + ": cannot read operand " + s);
  op.kind = Operand::Kind::Imm;
  op.imm = address.imm;
  op.sharedSymbol = address.sharedSymbol;
  return op;
}

void Parser::parseInstruction(const std::string &statement) {
  Inst inst;
  std::string s = statement;
  if (s[0] == '@') {
    size_t space = s.find_first_of(" \t");
    std::string guard = s.substr(1, space - 1);
    if (!guard.empty() && guard[0] == '!') {
      inst.guardNegated = true;
      guard = guard.substr(1);
    }
    if (!lookupRegister(guard, inst.guard))
      fail(where() + ": undeclared guard predicate " + guard);
    s = trim(s.substr(space));
  }
  size_t space = s.find_first_of(" \t");
  std::string mnemonic = s.substr(0, space);
  std::string rest = space == std::string::npos ? "" : trim(s.substr(space));
  std::vector<std::string> operands = splitTopLevel(rest, ',');
  inst.source = static_cast<uint32_t>(program->sources.size());
  program->sources.push_back(where() + ": " + statement);
  decode(inst, splitMnemonic(mnemonic), operands);
  // The cluster qualifiers readQualifiers takes anywhere belong to a few
  // instructions only.
  if ((inst.flags & kMulticast) && inst.op != Op::TmaLoad && inst.op != Op::TcCommit)
    fail(where() + ": .multicast::cluster in '" + mnemonic +
         "' (only TMA loads and tcgen05.commit multicast)");
  if ((inst.flags & kCtaGroup2) && inst.op != Op::TmaLoad && inst.op != Op::TcAlloc &&
      inst.op != Op::TcDealloc && inst.op != Op::TcRelinquish &&
      inst.op != Op::TcMma && inst.op != Op::TcCommit)
    fail(where() + ": .cta_group::2 in '" + mnemonic + "' is not modelled");
  program->code.push_back(inst);
  instScopes.push_back(currentScope);
}

/// Qualifiers that change nothing the emulator models: memory-model
/// orderings and scopes (it is sequentially consistent), cache and eviction
/// hints, `.sync`/`.aligned` (convergence is checked for every collective).
bool isIgnorable(const std::string &q) {
  static const std::set<std::string> ignorable = {
      "sync", "aligned", "uni", "relaxed", "acquire", "release", "acq_rel",
      "sc", "volatile", "weak", "cta", "cluster", "gpu", "sys", "nc",
      "L1::no_allocate", "L1::evict_last", "L1::evict_first",
      "L1::evict_normal", "L1::evict_unchanged", "L2::64B", "L2::128B",
      "L2::256B", "noftz"};
  return ignorable.count(q) != 0;
}

/// The instruction being decoded: its mnemonic split at dots (`base` the
/// first part) and joined again for messages, its operand texts, and what
/// readQualifiers found.
struct Parser::Decoding {
  Inst &inst;
  const std::vector<std::string> &parts;
  std::vector<std::string> &operandTexts;
  const std::string &base;
  std::string mnemonic;
  std::vector<Ty> types;
  std::vector<std::string> unknown;

  /// Reads parts[from..]: types, rounding, comparison, state spaces, flags,
  /// vector widths; the qualifiers it does not know go to `unknown`.
  void readQualifiers(size_t from);
  /// Whether a qualifier (a part after the base) is `q`.
  bool has(const std::string &q) const {
    for (size_t i = 1; i < parts.size(); ++i)
      if (parts[i] == q)
        return true;
    return false;
  }
  /// Takes the first unknown qualifier `q` out; whether there was one.
  bool dropUnknown(const std::string &q) {
    for (auto it = unknown.begin(); it != unknown.end(); ++it)
      if (*it == q) {
        unknown.erase(it);
        return true;
      }
    return false;
  }
  /// Takes every unknown qualifier `q` out; whether there was one.
  bool dropEachUnknown(const std::string &q) {
    bool dropped = false;
    for (auto it = unknown.begin(); it != unknown.end();)
      if (*it == q) {
        dropped = true;
        it = unknown.erase(it);
      } else {
        ++it;
      }
    return dropped;
  }
};

void Parser::Decoding::readQualifiers(size_t from) {
  static const std::map<std::string, Round> rounds = {
      {"rn", Round::Rn},   {"rz", Round::Rz},   {"rm", Round::Rm},
      {"rp", Round::Rp},   {"rni", Round::Rni}, {"rzi", Round::Rzi},
      {"rmi", Round::Rmi}, {"rpi", Round::Rpi}};
  static const std::map<std::string, Cmp> cmps = {
      {"eq", Cmp::Eq},   {"ne", Cmp::Ne},   {"lt", Cmp::Lt},
      {"le", Cmp::Le},   {"gt", Cmp::Gt},   {"ge", Cmp::Ge},
      {"lo", Cmp::Lo},   {"ls", Cmp::Ls},   {"hi", Cmp::Hi},
      {"hs", Cmp::Hs},   {"equ", Cmp::Equ}, {"neu", Cmp::Neu},
      {"ltu", Cmp::Ltu}, {"leu", Cmp::Leu}, {"gtu", Cmp::Gtu},
      {"geu", Cmp::Geu}, {"num", Cmp::Num}, {"nan", Cmp::Nan}};
  static const std::map<std::string, Space> spaces = {
      {"shared", Space::Shared},       {"shared::cta", Space::Shared},
      {"global", Space::Global},       {"param", Space::Param},
      {"local", Space::Local},         {"const", Space::Const}};
  static const std::map<std::string, uint32_t> flags = {
      {"lo", kLo},     {"hi", kHi},     {"wide", kWide}, {"ftz", kFtz},
      {"sat", kSat},   {"relu", kRelu}, {"NaN", kNaN},
      {"approx", kApprox}, {"full", kApprox}};
  for (size_t i = from; i < parts.size(); ++i) {
    const std::string &q = parts[i];
    Ty t;
    if (parseType(q, t)) {
      types.push_back(t);
      continue;
    }
    if (auto r = rounds.find(q); r != rounds.end()) {
      inst.round = r->second;
    } else if (auto c = cmps.find(q); c != cmps.end() && base == "setp") {
      inst.cmp = c->second;
    } else if (auto sp = spaces.find(q); sp != spaces.end()) {
      inst.space = sp->second;
    } else if (q == "shared::cluster") {
      // The cluster's window: this CTA's shared memory and, through mapa's
      // addresses, its peers'.
      inst.space = Space::Shared;
      inst.flags |= kClusterSpace;
    } else if (q == "multicast::cluster") {
      inst.flags |= kMulticast;
    } else if (q == "cta_group::2") {
      inst.flags |= kCtaGroup2;
    } else if (q == "cta_group::1") {
      // The default; recorded only for the one-group-a-kernel rule.
    } else if (auto f = flags.find(q); f != flags.end()) {
      inst.flags |= f->second;
    } else if (q == "v2" || q == "v4" || q == "v8") {
      inst.vec = static_cast<uint8_t>(q[1] - '0');
    } else if (base == "testp" && testpClass(q)) {
      // The class tested, kept in `count` (unused by testp otherwise).
      inst.count = testpClass(q);
    } else if (base == "setp" && (q == "and" || q == "or" || q == "xor")) {
      inst.boolOp = q == "and" ? BoolOp::And : q == "or" ? BoolOp::Or : BoolOp::Xor;
    } else if (!isIgnorable(q)) {
      unknown.push_back(q);
    }
  }
}

void Parser::unsupported(const Decoding &d, const std::string &what) const {
  fail(where() + ": " + what + " in '" + d.mnemonic +
       "' is not modelled by fa4-emu");
}

void Parser::requireNoUnknown(const Decoding &d) const {
  if (!d.unknown.empty())
    unsupported(d, "qualifier ." + d.unknown.front());
}

void Parser::requireType(Decoding &d) const {
  if (d.types.empty())
    fail(where() + ": '" + d.mnemonic + "' has no type");
  d.inst.type = d.types.back();
}

void Parser::setOperands(Decoding &d, size_t expectedMin, size_t expectedMax,
                         Ty type) {
  const std::vector<std::string> &texts = d.operandTexts;
  if (texts.size() < expectedMin || texts.size() > expectedMax)
    fail(where() + ": '" + d.mnemonic + "' takes " + std::to_string(expectedMin) +
         (expectedMax != expectedMin ? "-" + std::to_string(expectedMax) : "") +
         " operands, got " + std::to_string(texts.size()));
  d.inst.numOperands = static_cast<uint8_t>(texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    d.inst.operands[i] = parseOperand(texts[i], type);
}

/// The integer and floating-point instructions, by their base mnemonic.
const std::map<std::string, Op> &aluOps() {
  static const std::map<std::string, Op> alu = {
      {"mov", Op::Mov},   {"add", Op::Add},   {"sub", Op::Sub},
      {"mul", Op::Mul},   {"mad", Op::Mad},   {"fma", Op::Fma},
      {"div", Op::Div},   {"rem", Op::Rem},   {"min", Op::Min},
      {"max", Op::Max},   {"neg", Op::Neg},   {"abs", Op::Abs},
      {"and", Op::And},   {"or", Op::Or},     {"xor", Op::Xor},
      {"not", Op::Not},   {"shl", Op::Shl},   {"shr", Op::Shr},
      {"selp", Op::Selp}, {"setp", Op::Setp}, {"cvt", Op::Cvt},
      {"cvta", Op::Cvta}, {"bfe", Op::Bfe},   {"bfi", Op::Bfi},
      {"prmt", Op::Prmt}, {"popc", Op::Popc},
      {"clz", Op::Clz},   {"ex2", Op::Ex2},   {"lg2", Op::Lg2},
      {"rcp", Op::Rcp},   {"sqrt", Op::Sqrt}, {"rsqrt", Op::Rsqrt},
      {"copysign", Op::CopySign}, {"testp", Op::Testp}};
  return alu;
}

void Parser::decode(Inst &inst, const std::vector<std::string> &parts,
                    std::vector<std::string> &operandTexts) {
  Decoding d{inst, parts, operandTexts, parts[0], "", {}, {}};
  for (size_t i = 0; i < parts.size(); ++i)
    d.mnemonic += (i ? "." : "") + parts[i];
  const std::string &base = d.base;
  if (auto it = aluOps().find(base); it != aluOps().end()) {
    inst.op = it->second;
    if (inst.op == Op::Cvta)
      return decodeCvta(d);
    if (inst.op == Op::Cvt)
      return decodeCvt(d);
    return decodeAlu(d);
  }
  if (base == "ld" || base == "st")
    return decodeLoadStore(d);
  if (base == "atom")
    return decodeAtom(d);
  if (base == "red")
    return decodeRed(d);
  if (base == "stmatrix")
    return decodeStMatrix(d);
  if (base == "bra")
    return decodeBranch(d);
  if (base == "ret" || base == "exit") {
    inst.op = Op::Ret;
    return;
  }
  if (base == "membar" || base == "fence")
    return decodeFence(d);
  if (base == "prefetch") {
    inst.op = Op::Nop;
    return;
  }
  if (base == "mbarrier")
    return decodeMbarrier(d);
  if (base == "cp")
    return decodeBulkCopy(d);
  if (base == "tcgen05")
    return decodeTcgen05(d);
  if (base == "elect") {
    inst.op = Op::Elect;
    setOperands(d, 2, 2, Ty::B32);
    return;
  }
  if (base == "vote")
    return decodeVote(d);
  if (base == "shfl")
    return decodeShfl(d);
  if (base == "bar" && parts.size() > 1 && parts[1] == "warp")
    return decodeWarpBarrier(d);
  if (base == "barrier" && parts.size() > 1 && parts[1] == "cluster")
    return decodeClusterBarrier(d);
  if (base == "bar" || base == "barrier")
    return decodeBarrier(d);
  if (base == "mapa" || base == "getctarank")
    return decodeMapa(d);
  if (base == "wgmma")
    return decodeWgmma(d);
  if (base == "setmaxnreg")
    return decodeSetMaxNReg(d);
  fail(where() + ": unknown instruction '" + d.mnemonic +
       "' (fa4-emu models the PTX subset listed in docs/Emulator.md)");
}

void Parser::decodeCvta(Decoding &d) {
  // cvta[.to].space.size
  Inst &inst = d.inst;
  const std::vector<std::string> &parts = d.parts;
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i] == "to")
      inst.flags |= kToSpace;
  for (size_t i = 1; i < parts.size(); ++i) {
    Ty t;
    if (parts[i] == "to")
      continue;
    if (parseType(parts[i], t))
      d.types.push_back(t);
    else if (parts[i] == "shared" || parts[i] == "shared::cta")
      inst.space = Space::Shared;
    else if (parts[i] == "global")
      inst.space = Space::Global;
    else if (parts[i] == "param")
      inst.space = Space::Param;
    else
      d.unknown.push_back(parts[i]);
  }
  requireNoUnknown(d);
  requireType(d);
  setOperands(d, 2, 2, inst.type);
}

// cvt: the destination type, then the source type; the packed forms
//   cvt.rn[.relu].{f16x2,bf16x2}.f32                 d, a, b
//   cvt.rn.satfinite[.relu].{e4m3x2,e5m2x2}.f32      d, a, b
//   cvt.rn.satfinite[.relu].{e4m3x2,e5m2x2}.f16x2    d, a
//   cvt.rn[.relu].f16x2.{e4m3x2,e5m2x2}              d, a
// (a into the upper half of d, b into the lower).
void Parser::decodeCvt(Decoding &d) {
  Inst &inst = d.inst;
  std::vector<Ty> types;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    Ty t;
    if (parseType(d.parts[i], t) || parseFloat8Type(d.parts[i], t))
      types.push_back(t);
  }
  d.readQualifiers(1);
  d.dropEachUnknown("e4m3x2");
  d.dropEachUnknown("e5m2x2");
  bool satfinite = d.dropUnknown("satfinite");
  requireNoUnknown(d);
  if (types.size() != 2)
    fail(where() + ": cvt needs a destination and a source type");
  inst.type = types[0];
  inst.type2 = types[1];
  auto isFloat8x2 = [](Ty t) { return t == Ty::E4M3x2 || t == Ty::E5M2x2; };
  bool toFloat8 = isFloat8x2(inst.type), fromFloat8 = isFloat8x2(inst.type2);
  if (toFloat8 || fromFloat8) {
    bool known = toFloat8 ? inst.type2 == Ty::F32 || inst.type2 == Ty::F16x2
                          : inst.type == Ty::F16x2;
    if (!known)
      unsupported(d, "an 8-bit float conversion other than f32 or f16x2 to "
                     "e4m3x2/e5m2x2 and e4m3x2/e5m2x2 to f16x2");
    if (inst.round != Round::Rn)
      fail(where() + ": '" + d.mnemonic + "' needs .rn (the PTX ISA's only "
                                          "rounding for 8-bit floats)");
    if (satfinite != toFloat8)
      fail(where() + ": '" + d.mnemonic + "' " +
           (toFloat8 ? "needs .satfinite (mandatory for conversions to "
                       "e4m3x2/e5m2x2)"
                     : "takes no .satfinite"));
    if (inst.flags & ~kRelu)
      unsupported(d, "a modifier other than .relu");
    size_t operands = toFloat8 && inst.type2 == Ty::F32 ? 3 : 2;
    setOperands(d, operands, operands, Ty::B32);
    return;
  }
  if (satfinite)
    unsupported(d, "qualifier .satfinite");
  bool packed = inst.type == Ty::F16x2 || inst.type == Ty::BF16x2;
  setOperands(d, packed ? 3 : 2, packed ? 3 : 2, inst.type2);
}

void Parser::decodeAlu(Decoding &d) {
  Inst &inst = d.inst;
  d.readQualifiers(1);
  requireNoUnknown(d);
  requireType(d);
  if (inst.op == Op::Testp) {
    // testp.class.{f32,f64} p, a (LLVM's frem expansion tests for an
    // infinite divisor).
    if (!inst.count || (inst.type != Ty::F32 && inst.type != Ty::F64))
      fail(where() + ": '" + d.mnemonic +
           "' needs a class (finite, infinite, number, notanumber, normal, "
           "subnormal) and .f32 or .f64");
    setOperands(d, 2, 2, inst.type);
    return;
  }
  if (inst.op == Op::Setp) {
    setOperands(d, inst.boolOp == BoolOp::None ? 3 : 4,
                inst.boolOp == BoolOp::None ? 3 : 4, inst.type);
    return;
  }
  // sm_100a's mixed-precision add, sub and fma: `.f32.{f16,bf16}`, an f32
  // result of 16-bit a (and b) and an f32 c; type2 holds the 16-bit type.
  if (d.types.size() == 2 &&
      (inst.op == Op::Add || inst.op == Op::Sub || inst.op == Op::Fma) &&
      d.types[0] == Ty::F32 &&
      (d.types[1] == Ty::F16 || d.types[1] == Ty::BF16)) {
    inst.type = Ty::F32;
    inst.type2 = d.types[1];
    size_t operands = inst.op == Op::Fma ? 4 : 3;
    setOperands(d, operands, operands, Ty::F32);
    return;
  }
  if (d.types.size() > 1)
    fail(where() + ": '" + d.mnemonic +
         "' has more than one type (fa4-emu models the mixed-precision "
         "add, sub and fma .f32.f16 / .f32.bf16 only)");
  size_t arity = 3;
  switch (inst.op) {
  case Op::Mov: case Op::Neg: case Op::Abs: case Op::Not: case Op::Cvta:
  case Op::Popc: case Op::Clz: case Op::Ex2: case Op::Lg2: case Op::Rcp:
  case Op::Sqrt: case Op::Rsqrt:
    arity = 2;
    break;
  case Op::Mad: case Op::Fma: case Op::Selp: case Op::Bfe: case Op::Prmt:
    arity = 4;
    break;
  case Op::Bfi:
    arity = 5;
    break;
  default:
    break;
  }
  // sm_100a's three-input min/max.
  size_t maxArity = (inst.op == Op::Min || inst.op == Op::Max) ? 4 : arity;
  setOperands(d, arity, maxArity, inst.type);
  if (inst.op == Op::Mul && !isFloat(inst.type) &&
      !(inst.flags & (kLo | kHi | kWide)))
    fail(where() + ": integer mul needs .lo, .hi or .wide");
  // prmt's modes (.f4e, .b4e, .rc8, .ecl, .ecr, .rc16) are refused above as
  // unknown qualifiers; its default form permutes bytes of a b32.
  if (inst.op == Op::Prmt && inst.type != Ty::B32)
    unsupported(d, "a prmt type other than .b32");
  if (inst.op == Op::Bfi && inst.type != Ty::B32 && inst.type != Ty::B64)
    unsupported(d, "a bfi type other than .b32 or .b64");
}

void Parser::decodeLoadStore(Decoding &d) {
  Inst &inst = d.inst;
  inst.op = d.base == "ld" ? Op::Ld : Op::St;
  d.readQualifiers(1);
  requireNoUnknown(d);
  requireType(d);
  setOperands(d, 2, 2, inst.type);
  const Operand &address = inst.operands[inst.op == Op::Ld ? 1 : 0];
  if (address.kind != Operand::Kind::Mem)
    fail(where() + ": '" + d.mnemonic + "' needs an address in [ ]");
  if (inst.space == Space::Local || inst.space == Space::Const)
    unsupported(d, "the ." +
                       std::string(inst.space == Space::Local ? "local" : "const") +
                       " state space");
}

void Parser::decodeAtom(Decoding &d) {
  // atom[.sem][.scope].global.add.{u32,s32} d, [a], b: the emulator is
  // sequentially consistent, so every .sem and .scope is the same one.
  Inst &inst = d.inst;
  inst.op = Op::Atom;
  d.readQualifiers(1);
  if (!d.dropUnknown("add"))
    unsupported(d, "an atomic other than add");
  requireNoUnknown(d);
  requireType(d);
  if (inst.type != Ty::U32 && inst.type != Ty::S32)
    unsupported(d, "an atomic add that is not .u32 or .s32");
  if (inst.space != Space::Global)
    unsupported(d, "an atomic outside .global");
  setOperands(d, 3, 3, inst.type);
  if (inst.operands[1].kind != Operand::Kind::Mem)
    fail(where() + ": '" + d.mnemonic + "' needs an address in [ ]");
}

void Parser::decodeRed(Decoding &d) {
  // red[.sem][.scope].global.add[.noftz][.v2|.v4].f32 [a], b, and
  // red.global.add.{u32,s32}: an add with no result, sequentially
  // consistent as every memory access here is.
  Inst &inst = d.inst;
  inst.op = Op::Red;
  d.readQualifiers(1);
  if (!d.dropUnknown("add"))
    unsupported(d, "a reduction other than add");
  requireNoUnknown(d);
  requireType(d);
  if (inst.type != Ty::F32 && inst.type != Ty::U32 && inst.type != Ty::S32)
    unsupported(d, "a reduction that is not .f32, .u32 or .s32");
  if (inst.vec > 1 && (inst.type != Ty::F32 || inst.vec > 4))
    unsupported(d, "a vector reduction other than .v2/.v4 of .f32");
  if (inst.space != Space::Global)
    unsupported(d, "a reduction outside .global");
  setOperands(d, 2, 2, inst.type);
  if (inst.operands[0].kind != Operand::Kind::Mem)
    fail(where() + ": '" + d.mnemonic + "' needs an address in [ ]");
}

void Parser::decodeStMatrix(Decoding &d) {
  // stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared[::cta].b16 [a],
  // {r...}: `vec` matrices, lanes 8i..8i+7 giving matrix i's row addresses;
  // the transpose (kTransA) writes each matrix's columns as rows.
  Inst &inst = d.inst;
  inst.op = Op::StMatrix;
  inst.space = Space::Shared;
  inst.type = Ty::B16;
  inst.vec = 0;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    if (q == "x1" || q == "x2" || q == "x4")
      inst.vec = static_cast<uint8_t>(q[1] - '0');
    else if (q == "trans")
      inst.flags |= kTransA;
    else if (q != "sync" && q != "aligned" && q != "m8n8" && q != "shared" &&
             q != "shared::cta" && q != "b16")
      unsupported(d, "qualifier ." + q);
  }
  if (!inst.vec)
    unsupported(d, "a matrix count other than .x1, .x2 or .x4");
  setOperands(d, 2, 2, Ty::B32);
  if (inst.operands[0].kind != Operand::Kind::Mem)
    fail(where() + ": '" + d.mnemonic + "' needs an address in [ ]");
  const Operand &data = inst.operands[1];
  unsigned count = data.kind == Operand::Kind::Vec ? data.vecCount : 1;
  if (count != inst.vec)
    fail(where() + ": '" + d.mnemonic + "' stores " +
         std::to_string(inst.vec) + " matrices from " + std::to_string(count) +
         " registers");
}

void Parser::decodeBranch(Decoding &d) {
  d.inst.op = Op::Bra;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    if (d.parts[i] == "uni")
      d.inst.flags |= kUniform;
    else
      d.unknown.push_back(d.parts[i]);
  }
  requireNoUnknown(d);
  if (d.operandTexts.size() != 1)
    fail(where() + ": bra takes one label");
  branches.push_back({static_cast<uint32_t>(program->code.size()),
                      currentScope, trim(d.operandTexts[0])});
}

void Parser::decodeFence(Decoding &d) {
  // The forms fa4-emu models: membar.{cta,gl,sys}; fence[.sc|.acq_rel]
  // [.cta|.cluster|.gpu|.sys]; fence.proxy.async[...];
  // fence.mbarrier_init.release.cluster. Others (the .acquire/.release
  // sync_restrict fences, other proxies) are refused.
  if (d.base == "membar") {
    if (d.parts.size() != 2 ||
        (d.parts[1] != "cta" && d.parts[1] != "gl" && d.parts[1] != "sys"))
      unsupported(d, "membar form");
  } else if (!d.has("proxy") && !d.has("mbarrier_init")) {
    bool sem = false, scope = false;
    for (size_t i = 1; i < d.parts.size(); ++i) {
      const std::string &q = d.parts[i];
      if (!sem && !scope && (q == "sc" || q == "acq_rel"))
        sem = true;
      else if (!scope && (q == "cta" || q == "cluster" || q == "gpu" || q == "sys"))
        scope = true;
      else
        unsupported(d, "fence qualifier ." + q);
    }
  } else if (d.has("mbarrier_init")) {
    if (d.parts.size() != 4 || d.parts[2] != "release" || d.parts[3] != "cluster")
      unsupported(d, "fence.mbarrier_init form (fence.mbarrier_init.release.cluster)");
  }
  if (d.base == "membar" || (!d.has("proxy") && !d.has("mbarrier_init"))) {
    // The emulator's memory is sequentially consistent; what a fence
    // orders matters to the ordering checks as a release pattern (a fence
    // then a relaxed arrive).
    d.inst.op = Op::FenceAcqRel;
    return;
  }
  if (d.has("mbarrier_init")) {
    // fence.mbarrier_init.release.cluster: this thread's mbarrier.inits
    // become visible to the async proxy (TMA, tcgen05.commit).
    d.inst.op = Op::FenceMbarrierInit;
    return;
  }
  // fence.proxy.async[.shared::cta|.global]: generic-proxy writes become
  // visible to the async proxy.
  if (!d.has("async"))
    unsupported(d, "proxy fence kind");
  d.inst.op = Op::FenceProxyAsync;
}

void Parser::decodeMbarrier(Decoding &d) {
  Inst &inst = d.inst;
  if (d.parts.size() < 2)
    unsupported(d, "mbarrier form");
  const std::string &verb = d.parts[1];
  d.readQualifiers(2);
  if (verb == "init") {
    inst.op = Op::MbarInit;
    setOperands(d, 2, 2, Ty::B32);
  } else if (verb == "inval") {
    inst.op = Op::MbarInval;
    setOperands(d, 1, 1, Ty::B32);
  } else if (verb == "arrive") {
    inst.op = Op::MbarArrive;
    inst.flags |= kArrive;
    if (d.has("relaxed"))
      inst.flags |= kRelaxed;
    if (d.dropEachUnknown("expect_tx"))
      inst.flags |= kExpectTx;
    setOperands(d, 2, 3, Ty::B32);
  } else if (verb == "expect_tx") {
    inst.op = Op::MbarExpectTx;
    inst.flags |= kExpectTx;
    setOperands(d, 2, 2, Ty::B32);
  } else if (verb == "try_wait" || verb == "test_wait") {
    inst.op = Op::MbarTryWait;
    // .relaxed: the wait acquires nothing (a fence after it does).
    if (d.has("relaxed"))
      inst.flags |= kRelaxed;
    if (verb == "test_wait")
      inst.flags |= kTest;
    if (d.dropEachUnknown("parity"))
      inst.flags |= kParity;
    setOperands(d, 3, 4, Ty::B64);
  } else {
    unsupported(d, "mbarrier." + verb);
  }
  requireNoUnknown(d);
  if (inst.space != Space::Shared)
    unsupported(d, "an mbarrier outside .shared");
  // A peer CTA's mbarrier (a .shared::cluster address) may be arrived on
  // and expect transactions, never initialized or waited on (PTX ISA,
  // mbarrier); its arrive returns no state (the sink `_`).
  if ((inst.flags & kClusterSpace) && inst.op != Op::MbarArrive &&
      inst.op != Op::MbarExpectTx)
    unsupported(d, ".shared::cluster (only arrive and expect_tx reach a "
                   "peer CTA's mbarrier)");
  if ((inst.flags & kClusterSpace) && inst.op == Op::MbarArrive &&
      inst.operands[0].kind != Operand::Kind::Sink)
    fail(where() + ": an mbarrier.arrive on .shared::cluster returns no "
                   "state: its destination must be the sink '_'");
}

void Parser::decodeBulkCopy(Decoding &d) {
  // cp.async.bulk.tensor.Nd.<dst>.<src>.tile[.mbarrier::complete_tx::bytes|.bulk_group][.L2::cache_hint]
  // cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group[.L2::cache_hint]
  //   (a TMA store that adds f32 elements into the tensor)
  // cp.async.bulk.commit_group / wait_group[.read]
  Inst &inst = d.inst;
  std::vector<std::string> parts = d.parts;
  // .cta_group::N may stand anywhere after the base (CUTLASS writes it
  // before the state spaces, the ISA's syntax after the completion
  // mechanism): take it out before reading the parts by position.
  for (auto it = parts.begin() + 1; it != parts.end();) {
    if (*it == "cta_group::1" || *it == "cta_group::2") {
      if (*it == "cta_group::2")
        inst.flags |= kCtaGroup2;
      it = parts.erase(it);
    } else {
      ++it;
    }
  }
  if (parts.size() > 1 && parts[1] == "reduce") {
    // The store's form with the reduction named: .add of f32 only, which
    // the tensor map's element type decides at run time.
    // cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.<mode>...:
    // the operation right after the source's state space.
    auto add = parts.size() > 8 ? parts.begin() + 8 : parts.end();
    if (add == parts.end() || *add != "add")
      unsupported(d, "reduction (only .add, after the state spaces)");
    parts.erase(add);
    parts.erase(parts.begin() + 1);
    if (parts.size() < 7 || parts[3] != "tensor" || parts[5] != "global")
      unsupported(d, "reduction form (a tensor copy shared -> global)");
    inst.type2 = Ty::F32;
  }
  if (parts.size() < 4 || parts[1] != "async" || parts[2] != "bulk")
    unsupported(d, "copy form");
  if (parts[3] == "commit_group") {
    inst.op = Op::BulkCommit;
    return;
  }
  if (parts[3] == "wait_group") {
    inst.op = Op::BulkWait;
    if (parts.size() > 4 && parts[4] == "read")
      inst.flags |= kRead;
    setOperands(d, 1, 1, Ty::B32);
    if (inst.operands[0].kind != Operand::Kind::Imm)
      fail(where() + ": wait_group takes an immediate count");
    return;
  }
  if (parts[3] != "tensor" || parts.size() <= 6)
    unsupported(d, "copy form");
  decodeTma(d, parts);
}

void Parser::decodeTma(Decoding &d, const std::vector<std::string> &parts) {
  Inst &inst = d.inst;
  const std::string &rank = parts[4];
  if (rank.size() != 2 || rank[1] != 'd' || rank[0] < '1' || rank[0] > '5')
    unsupported(d, "rank " + rank);
  inst.count = static_cast<uint8_t>(rank[0] - '0');
  bool load = parts[5].compare(0, 6, "shared") == 0;
  inst.op = load ? Op::TmaLoad : Op::TmaStore;
  // .tile is the default mode; im2col and the gather modes are refused as
  // unknown qualifiers.
  bool completeTx = false, bulkGroup = false;
  if (load && parts[5] == "shared::cluster")
    inst.flags |= kClusterSpace;
  for (size_t i = 7; i < parts.size(); ++i) {
    if (parts[i] == "tile")
      continue;
    if (load && parts[i] == "multicast::cluster") {
      // The box lands at the same offset in every CTA of a mask, each
      // CTA's mbarrier at the same offset told of its bytes.
      inst.flags |= kMulticast;
      continue;
    }
    if (parts[i] == "mbarrier::complete_tx::bytes")
      completeTx = true;
    else if (parts[i] == "bulk_group")
      bulkGroup = true;
    else if (parts[i] == "L2::cache_hint")
      inst.flags |= kCacheHint;
    else
      unsupported(d, "qualifier ." + parts[i]);
  }
  if ((inst.flags & kCtaGroup2) && !load)
    unsupported(d, ".cta_group::2 on a TMA store");
  if (load && (!completeTx || parts[6] != "global"))
    unsupported(d, "a TMA load that is not global -> shared with "
                   "mbarrier::complete_tx::bytes");
  if (!load && (!bulkGroup || parts[5] != "global"))
    unsupported(d, "a TMA store that is not shared -> global with .bulk_group");
  size_t expected = (load ? 3 : 2) + ((inst.flags & kMulticast) ? 1 : 0) +
                    ((inst.flags & kCacheHint) ? 1 : 0);
  // [tensorMap, {coords}] arrives as one bracketed operand.
  setOperands(d, expected, expected, Ty::B32);
}

void Parser::decodeTcgen05(Decoding &d) {
  Inst &inst = d.inst;
  if (d.parts.size() < 2)
    unsupported(d, "tcgen05 form");
  if (firstTcgen05.empty())
    firstTcgen05 = where();
  const std::string &verb = d.parts[1];
  d.readQualifiers(2);
  // The one .cta_group of a kernel's alloc, dealloc, relinquish, mma and
  // commit (PTX ISA, tcgen05).
  if (kernel && (verb == "alloc" || verb == "dealloc" ||
                 verb == "relinquish_alloc_permit" || verb == "mma" ||
                 verb == "commit")) {
    kernel->ctaGroups |= (inst.flags & kCtaGroup2) ? 2 : 1;
    if (kernel->ctaGroups == 3)
      fail(where() + ": '" + d.mnemonic + "' names another .cta_group than an "
           "earlier tcgen05 instruction of " + kernel->name +
           " (PTX ISA: every tcgen05 instruction of a kernel names the same)");
  }
  if ((inst.flags & kCtaGroup2) && verb != "alloc" && verb != "dealloc" &&
      verb != "relinquish_alloc_permit" && verb != "mma" && verb != "commit")
    unsupported(d, ".cta_group::2");
  if (verb == "alloc") {
    inst.op = Op::TcAlloc;
    setOperands(d, 2, 2, Ty::B32);
  } else if (verb == "dealloc") {
    inst.op = Op::TcDealloc;
    setOperands(d, 2, 2, Ty::B32);
  } else if (verb == "relinquish_alloc_permit") {
    inst.op = Op::TcRelinquish;
    setOperands(d, 0, 0, Ty::None);
  } else if (verb == "mma") {
    inst.op = Op::TcMma;
    if (d.dropUnknown("kind::f8f6f4"))
      inst.kind = MmaKind::F8F6F4;
    else if (!d.dropUnknown("kind::f16"))
      unsupported(d, "an MMA kind other than kind::f16 and kind::f8f6f4");
    d.dropUnknown("collector::a::discard");
    d.dropUnknown("collector::a::lastuse");
    d.dropUnknown("collector::a::fill");
    d.dropUnknown("collector::a::use");
    // The descriptors may be written `%rd+imm` (a register plus an
    // offset, as LLVM's NVPTX back end folds an add into them; ptxas takes
    // it): kept as a Mem operand whose value is that sum. A bracketed A is
    // a TMEM address.
    // [d], a, b, idesc[, {disable-output-lane}], enable-input-d: the
    // optional vector (4 words, 8 with cta_group::2) is kept as operand 5
    // so that operand 4 is always the predicate.
    std::vector<std::string> texts = d.operandTexts;
    if (texts.size() != 5 && texts.size() != 6)
      fail(where() + ": '" + d.mnemonic + "' takes 5 or 6 operands, got " +
           std::to_string(texts.size()));
    if (texts.size() == 6) {
      std::swap(texts[4], texts[5]);
      inst.operands[5] = parseOperand(texts[5], Ty::B32);
      uint32_t words = (inst.flags & kCtaGroup2) ? 8 : 4;
      if (inst.operands[5].kind != Operand::Kind::Vec ||
          inst.operands[5].vecCount != words)
        fail(where() + ": tcgen05.mma's disable-output-lane operand is a "
             "vector of " + std::to_string(words) + " registers");
    }
    inst.numOperands = static_cast<uint8_t>(texts.size());
    for (size_t i = 0; i < 5; ++i) {
      std::string text = trim(texts[i]);
      bool offsetRegister =
          (i == 1 || i == 2) && !text.empty() && text[0] == '%' &&
          text.find_first_of("+-", 1) != std::string::npos;
      inst.operands[i] = offsetRegister ? parseMemory(text)
                                        : parseOperand(texts[i], Ty::B32);
      if (offsetRegister && inst.operands[i].reg == kNoReg)
        fail(where() + ": cannot read descriptor operand " + text);
    }
    if (!texts[1].empty() && trim(texts[1])[0] == '[')
      inst.flags |= kTmemA;
  } else if (verb == "commit") {
    inst.op = Op::TcCommit;
    if (!d.dropUnknown("mbarrier::arrive::one"))
      unsupported(d, "a commit without mbarrier::arrive::one");
    d.dropUnknown("shared::cta");
    // .multicast::cluster: the arrive reaches the mbarrier at the same
    // offset in each CTA of the 16-bit mask (the second operand).
    bool multicast = inst.flags & kMulticast;
    setOperands(d, multicast ? 2 : 1, multicast ? 2 : 1, Ty::B64);
    inst.space = Space::Shared;
  } else if (verb == "ld" || verb == "st") {
    decodeTmemCopy(d);
  } else if (verb == "wait::ld") {
    inst.op = Op::TcWaitLd;
  } else if (verb == "wait::st") {
    inst.op = Op::TcWaitSt;
  } else if (verb == "fence::before_thread_sync") {
    inst.op = Op::TcFenceBefore;
  } else if (verb == "fence::after_thread_sync") {
    inst.op = Op::TcFenceAfter;
  } else {
    unsupported(d, "tcgen05." + verb);
  }
  requireNoUnknown(d);
}

void Parser::decodeTmemCopy(Decoding &d) {
  Inst &inst = d.inst;
  const std::string &verb = d.parts[1];
  inst.op = verb == "ld" ? Op::TcLd : Op::TcSt;
  if (!d.dropUnknown("32x32b"))
    unsupported(d, "a tcgen05." + verb + " shape other than 32x32b");
  if (d.dropUnknown("pack::16b") || d.dropUnknown("unpack::16b"))
    inst.flags |= kPack16;
  for (auto it = d.unknown.begin(); it != d.unknown.end(); ++it)
    if (it->size() > 1 && (*it)[0] == 'x') {
      inst.count = static_cast<uint8_t>(std::strtoul(it->c_str() + 1, nullptr, 10));
      d.unknown.erase(it);
      break;
    }
  if (inst.count == 0 || inst.count > 128 || (inst.count & (inst.count - 1)))
    unsupported(d, "repeat count");
  setOperands(d, 2, 2, Ty::B32);
  const Operand &values = inst.operands[verb == "ld" ? 0 : 1];
  uint32_t words = inst.count / ((inst.flags & kPack16) ? 2 : 1);
  if (values.kind != Operand::Kind::Vec ? words != 1 : values.vecCount != words)
    fail(where() + ": tcgen05." + verb + " .x" + std::to_string(inst.count) +
         " needs " + std::to_string(words) + " registers");
}

void Parser::decodeVote(Decoding &d) {
  d.inst.op = Op::Vote;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    if (q == "any") d.inst.flags |= kVoteAny;
    else if (q == "all") d.inst.flags |= kVoteAll;
    else if (q == "uni") d.inst.flags |= kVoteUni;
    else if (q == "ballot") d.inst.flags |= kVoteBallot;
    else if (q != "sync" && q != "pred" && q != "b32") unsupported(d, "qualifier ." + q);
  }
  setOperands(d, 3, 3, Ty::Pred);
}

void Parser::decodeShfl(Decoding &d) {
  d.inst.op = Op::Shfl;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    if (q == "up") d.inst.flags |= kShflUp;
    else if (q == "down") d.inst.flags |= kShflDown;
    else if (q == "bfly") d.inst.flags |= kShflBfly;
    else if (q == "idx") d.inst.flags |= kShflIdx;
    else if (q != "sync" && q != "b32") unsupported(d, "qualifier ." + q);
  }
  setOperands(d, 5, 5, Ty::B32);
}

void Parser::decodeWarpBarrier(Decoding &d) {
  // bar.warp.sync membermask: the lanes of membermask meet.
  for (size_t i = 2; i < d.parts.size(); ++i)
    if (d.parts[i] != "sync")
      unsupported(d, "qualifier ." + d.parts[i]);
  d.inst.op = Op::BarWarpSync;
  setOperands(d, 1, 1, Ty::B32);
}

void Parser::decodeBarrier(Decoding &d) {
  // bar{.cta}.sync / barrier{.cta}.sync.aligned a{, b} and the .arrive
  // forms: named barrier a (0..15) of b threads (all of the CTA without
  // b). `barrier.sync` without .aligned lets a warp's lanes arrive apart,
  // which the emulator does not model.
  bool arrive = false, sync = false, aligned = d.base == "bar";
  for (size_t i = 1; i < d.parts.size(); ++i) {
    if (d.parts[i] == "sync")
      sync = true;
    else if (d.parts[i] == "arrive")
      arrive = true;
    else if (d.parts[i] == "aligned")
      aligned = true;
    else if (d.parts[i] != "cta")
      unsupported(d, "barrier form ." + d.parts[i]);
  }
  if (arrive == sync)
    unsupported(d, "barrier form (expected .sync or .arrive)");
  if (!aligned)
    unsupported(d, "a barrier without .aligned (divergent arrival)");
  d.inst.op = arrive ? Op::BarArrive : Op::BarSync;
  setOperands(d, arrive ? 2 : 1, 2, Ty::U32);
}

void Parser::decodeClusterBarrier(Decoding &d) {
  // barrier.cluster.arrive[.release|.relaxed][.aligned] and
  // barrier.cluster.wait[.acquire][.aligned]: every non-exited thread of
  // the cluster arrives, then waits for the phase to complete, counted per
  // thread; .aligned: every thread of the warp executes it together.
  bool arrive = false, wait = false, relaxed = false;
  for (size_t i = 2; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    if (q == "aligned")
      d.inst.flags |= kAlignedCluster;
    if (q == "arrive")
      arrive = true;
    else if (q == "wait")
      wait = true;
    else if (q == "relaxed" && arrive && !relaxed)
      relaxed = true;
    else if (!(q == "aligned" || (q == "release" && arrive) ||
               (q == "acquire" && wait)))
      unsupported(d, "qualifier ." + q);
  }
  if (relaxed && d.has("release"))
    unsupported(d, "both .release and .relaxed");
  if (arrive == wait)
    unsupported(d, "cluster barrier form (expected .arrive or .wait)");
  d.inst.op = arrive ? Op::ClusterArrive : Op::ClusterWait;
  // .relaxed: the arrival releases nothing.
  if (relaxed)
    d.inst.flags |= kRelaxed;
  setOperands(d, 0, 0, Ty::None);
}

void Parser::decodeMapa(Decoding &d) {
  // mapa[.shared::cluster].u32|u64 d, a, rank: the address of the
  // variable at `a` in the CTA of that rank (shared::cluster addresses;
  // generic ones without the space).
  // getctarank[.shared::cluster].u32|u64 d, a: the rank of the CTA whose
  // shared memory holds `a`.
  const bool rank = d.base == "getctarank";
  d.inst.op = rank ? Op::GetCtaRank : Op::Mapa;
  d.readQualifiers(1);
  requireNoUnknown(d);
  requireType(d);
  if (d.inst.type != Ty::U32 && d.inst.type != Ty::U64)
    unsupported(d, "type (mapa takes .u32 or .u64)");
  if (d.inst.space == Space::Shared && !(d.inst.flags & kClusterSpace))
    unsupported(d, "state space (" + d.base + " takes .shared::cluster)");
  if (d.inst.space != Space::Shared && d.inst.space != Space::Generic)
    unsupported(d, "state space");
  setOperands(d, rank ? 2 : 3, rank ? 2 : 3, d.inst.type);
}

void Parser::decodeWgmma(Decoding &d) {
  Inst &inst = d.inst;
  if (d.parts.size() < 2)
    unsupported(d, "wgmma form");
  const std::string &verb = d.parts[1];
  auto onlySyncAligned = [&](size_t from) {
    for (size_t i = from; i < d.parts.size(); ++i)
      if (d.parts[i] != "sync" && d.parts[i] != "aligned")
        unsupported(d, "qualifier ." + d.parts[i]);
  };
  program->usesWgmma = true;
  if (firstWgmma.empty())
    firstWgmma = where();
  if (verb == "fence") {
    onlySyncAligned(2);
    inst.op = Op::WgFence;
    return;
  }
  if (verb == "commit_group") {
    onlySyncAligned(2);
    inst.op = Op::WgCommit;
    return;
  }
  if (verb == "wait_group") {
    onlySyncAligned(2);
    inst.op = Op::WgWait;
    setOperands(d, 1, 1, Ty::B32);
    if (inst.operands[0].kind != Operand::Kind::Imm || inst.operands[0].imm < 0)
      fail(where() + ": wgmma.wait_group takes an immediate count");
    return;
  }
  if (verb != "mma_async")
    unsupported(d, "wgmma." + verb);
  inst.op = Op::WgMma;
  decodeWgmmaShape(d);
  decodeWgmmaOperands(d);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}
//   d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a,
//   imm-trans-b                                   (A in shared memory)
//   d, {a0, a1, a2, a3}, b-desc, scale-d, imm-scale-a, imm-scale-b,
//   imm-trans-b                                   (A in registers)
// wgmma.mma_async.sync.aligned.m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}
//   d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b
//   d, {a0, a1, a2, a3}, b-desc, scale-d, imm-scale-a, imm-scale-b
// The FP8 forms have no transpose immediates: the PTX ISA supports the
// transpose only for .f16/.bf16, so both FP8 operands are K-major.
void Parser::decodeWgmmaShape(Decoding &d) {
  Inst &inst = d.inst;
  std::string shapeK;
  for (size_t i = 2; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    Ty t;
    if (q == "sync" || q == "aligned")
      continue;
    if (q.size() > 7 && q.compare(0, 4, "m64n") == 0 &&
        (q.compare(q.size() - 3, 3, "k16") == 0 ||
         q.compare(q.size() - 3, 3, "k32") == 0)) {
      int64_t n = 0;
      if (!parseInteger(q.substr(4, q.size() - 7), n) || n < 8 || n > 256 ||
          n % 8)
        unsupported(d, "shape ." + q);
      inst.shapeN = static_cast<uint16_t>(n);
      shapeK = q.substr(q.size() - 3);
    } else if (parseType(q, t) || parseFloat8Type(q, t)) {
      d.types.push_back(t);
    } else {
      unsupported(d, "qualifier ." + q);
    }
  }
  if (!inst.shapeN)
    unsupported(d, "a shape other than m64nNk16 and m64nNk32");
  const std::vector<Ty> &types = d.types;
  auto isFloat8 = [](Ty t) { return t == Ty::E4M3 || t == Ty::E5M2; };
  bool halves = types.size() == 3 &&
                (types[1] == Ty::F16 || types[1] == Ty::BF16) &&
                types[2] == types[1];
  bool float8 = types.size() == 3 && isFloat8(types[1]) && isFloat8(types[2]);
  if (types.size() != 3 || types[0] != Ty::F32 || !(halves || float8))
    unsupported(d, "types other than .f32 accumulating .f16 x .f16, "
                   ".bf16 x .bf16 or {.e4m3, .e5m2} x {.e4m3, .e5m2}");
  if (shapeK != (float8 ? "k32" : "k16"))
    fail(where() + ": '" + d.mnemonic + "' has shape K " + shapeK.substr(1) +
         "; the PTX ISA's K is " +
         (float8 ? "32 for .e4m3/.e5m2" : "16 for .f16/.bf16"));
  inst.type = types[0];
  inst.type2 = types[1];
  inst.type3 = types[2];
}

void Parser::decodeWgmmaOperands(Decoding &d) {
  Inst &inst = d.inst;
  const std::vector<std::string> &operandTexts = d.operandTexts;
  const std::string &mnemonic = d.mnemonic;
  bool regA = operandTexts.size() > 1 &&
              trim(operandTexts[1]).compare(0, 1, "{") == 0;
  // The FP8 forms take no transpose immediates (see above): six operands
  // either way; the 16-bit forms take imm-trans-b, and with A in shared
  // memory imm-trans-a.
  bool transposes = inst.type2 == Ty::F16 || inst.type2 == Ty::BF16;
  size_t expected = transposes ? (regA ? 7 : 8) : 6;
  if (operandTexts.size() != expected)
    fail(where() + ": '" + mnemonic + "' takes " + std::to_string(expected) +
         " operands with A in " +
         (regA ? "registers ({a0, a1, a2, a3})"
               : "shared memory (a descriptor)") +
         (transposes ? "" : " (FP8 wgmma has no transpose immediates)") +
         ", got " + std::to_string(operandTexts.size()));
  if (regA)
    inst.flags |= kRegA;
  inst.numOperands = 4;
  inst.operands[0] = parseOperand(operandTexts[0], Ty::F32);
  inst.operands[1] = parseOperand(operandTexts[1], regA ? Ty::B32 : Ty::B64);
  inst.operands[2] = parseOperand(operandTexts[2], Ty::B64);
  inst.operands[3] = parseOperand(operandTexts[3], Ty::Pred);
  const Operand &acc = inst.operands[0];
  if (acc.kind != Operand::Kind::Vec || acc.vecCount != inst.shapeN / 2u)
    fail(where() + ": " + mnemonic + " needs " +
         std::to_string(inst.shapeN / 2) + " accumulator registers");
  if (regA && (inst.operands[1].kind != Operand::Kind::Vec ||
               inst.operands[1].vecCount != 4))
    fail(where() + ": " + mnemonic + " with A in registers needs 4 of them");
  for (uint32_t e = 0; e < acc.vecCount; ++e)
    if (program->vectors[acc.vecBegin + e].kind != Operand::Kind::Reg)
      fail(where() + ": a wgmma accumulator must be a register");
  if (wgmmaImmediate(d, 4, {-1, 1}) < 0)
    inst.flags |= kNegA;
  if (wgmmaImmediate(d, 5, {-1, 1}) < 0)
    inst.flags |= kNegB;
  if (transposes && !regA && wgmmaImmediate(d, 6, {0, 1}))
    inst.flags |= kTransA;
  if (transposes && wgmmaImmediate(d, regA ? 6 : 7, {0, 1}))
    inst.flags |= kTransB;
}

int64_t Parser::wgmmaImmediate(const Decoding &d, size_t i,
                               std::initializer_list<int64_t> allowed) const {
  const std::string text = trim(d.operandTexts[i]);
  int64_t value = 0;
  if (!parseInteger(text, value) ||
      std::find(allowed.begin(), allowed.end(), value) == allowed.end())
    fail(where() + ": operand " + std::to_string(i + 1) + " of '" +
         d.mnemonic + "' must be an immediate in {" +
         (allowed.size() == 2 && *allowed.begin() == -1 ? "-1, 1" : "0, 1") +
         "}, got " + text);
  return value;
}

void Parser::decodeSetMaxNReg(Decoding &d) {
  d.inst.op = Op::SetMaxNReg;
  for (size_t i = 1; i < d.parts.size(); ++i) {
    const std::string &q = d.parts[i];
    if (q == "inc")
      d.inst.flags |= kInc;
    else if (q != "dec" && q != "sync" && q != "aligned" && q != "u32")
      unsupported(d, "qualifier ." + q);
  }
  setOperands(d, 1, 1, Ty::U32);
  if (d.inst.operands[0].kind != Operand::Kind::Imm)
    fail(where() + ": setmaxnreg takes an immediate register count");
}

} // namespace

llvm::Expected<std::shared_ptr<const Program>>
parsePtx(const std::string &text) {
  auto program = std::make_shared<Program>();
  try {
    Parser parser(text);
    parser.parse(*program);
  } catch (const ParseError &e) {
    return makeError(e.message);
  }
  return std::shared_ptr<const Program>(std::move(program));
}

const std::string &targetOf(const Program &program) { return program.target; }

std::vector<KernelParam> kernelParams(const Program &program,
                                      const std::string &kernel) {
  const Kernel *k = program.findKernel(kernel);
  return k ? k->params : std::vector<KernelParam>();
}

} // namespace mlir::fa4::emu
