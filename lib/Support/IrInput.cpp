//===- IrInput.cpp - IR text in, on a stack that fits it ------------------===//

#include "fa4/Support/IrInput.h"

#include "fa4/Support/Error.h"
#include "fa4/Support/InputLimits.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <csignal>
#include <cstring>
#include <functional>
#include <vector>
#include <pthread.h>

using namespace mlir;
using namespace mlir::fa4;

// Measured with fa4-opt (parse, verify, print) and a diagnostic printed at
// the op, for 20 000 levels of each construct, as the smallest stack that
// does not overflow, per byte of its text: `d0+d0+...` 38 bytes, `!b =
// tuple<!a>` aliases 32, `#b = [#a]` aliases 40, callsite location aliases
// 7; unary minus 1 100, bounded by kMaxUnaryMinusRun instead. 128 bytes per
// byte is three times the largest; the base covers what does not grow with
// the input (the pipeline's own frames, 256 bracket levels, 16-sign minus
// runs under each). fa4c and fa4-opt were run on 15 MiB of each construct
// (a million levels and more) with this stack.
static constexpr uint64_t kIrStackBase = uint64_t(64) << 20;
static constexpr uint64_t kIrStackPerByte = 128;

uint64_t fa4::irStackBytes(uint64_t bytes) {
  return kIrStackBase + kIrStackPerByte * std::min(bytes, kMaxIrBytes);
}

namespace {
/// The tokens of MLIR text that the guards look at; every other character is
/// a token of its own.
struct IrLexer {
  StringRef text;
  size_t pos = 0;

  static bool isIdentifierChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
           c == '.';
  }
  /// Skips whitespace and `//` comments.
  void skipTrivia() {
    while (pos < text.size()) {
      if (std::isspace(static_cast<unsigned char>(text[pos]))) {
        ++pos;
      } else if (text.substr(pos).starts_with("//")) {
        size_t end = text.find('\n', pos);
        pos = end == StringRef::npos ? text.size() : end;
      } else {
        return;
      }
    }
  }
  /// The next token; empty at the end. A string is one token, its contents
  /// opaque; `->` is one token, apart from a minus sign.
  StringRef next(size_t &start) {
    skipTrivia();
    start = pos;
    if (pos >= text.size())
      return {};
    char c = text[pos];
    if (c == '"') {
      for (++pos; pos < text.size() && text[pos] != '"'; ++pos)
        if (text[pos] == '\\')
          ++pos;
      pos = std::min(pos + 1, text.size());
    } else if (c == '-' && pos + 1 < text.size() && text[pos + 1] == '>') {
      pos += 2;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      // A number; `1.0e-3` keeps its exponent's sign.
      for (++pos; pos < text.size(); ++pos) {
        char d = text[pos];
        bool sign = (d == '-' || d == '+') &&
                    (text[pos - 1] == 'e' || text[pos - 1] == 'E');
        if (!sign && !std::isalnum(static_cast<unsigned char>(d)) && d != '.')
          break;
      }
    } else if (c == '!' || c == '#' || c == '%' || c == '^') {
      // `!`, `#`, `%`, `^` names: MLIR's suffix-id, whose punctuation
      // includes `-` (`!i-x`, `%a--b` are one name each).
      for (++pos; pos < text.size() && (isIdentifierChar(text[pos]) || text[pos] == '-');
           ++pos)
        ;
    } else if (isIdentifierChar(c) || c == '@') {
      // Bare identifiers and `@` names.
      for (++pos; pos < text.size() && isIdentifierChar(text[pos]); ++pos)
        ;
    } else {
      ++pos;
    }
    return text.slice(start, pos);
  }
};
} // namespace

/// An alias the text defines at its top level (`!name = ...`,
/// `#name = ...`): where, the first token of what it names (a type starts
/// with its name: `index`, `tuple`, `!other`), that definition's length in
/// tokens and the `!`/`#` names it uses.
struct AliasDefinition {
  size_t offset = 0;
  StringRef first;
  uint64_t tokens = 0;
  std::vector<StringRef> uses;
};

/// The text's top-level aliases. A definition is its first token and, when
/// a bracket follows it, everything up to the matching close.
static llvm::StringMap<AliasDefinition> aliasDefinitions(StringRef text) {
  auto opens = [](StringRef t) { return t == "(" || t == "[" || t == "{" || t == "<"; };
  auto closes = [](StringRef t) { return t == ")" || t == "]" || t == "}" || t == ">"; };
  llvm::StringMap<AliasDefinition> aliases;
  IrLexer lexer{text};
  size_t start;
  int depth = 0;
  StringRef token = lexer.next(start);
  while (!token.empty()) {
    size_t tokenStart = start;
    StringRef following = lexer.next(start);
    if (depth == 0 && (token.starts_with("!") || token.starts_with("#")) &&
        following == "=") {
      StringRef name = token;
      AliasDefinition alias;
      alias.offset = tokenStart;
      int inner = 0;
      StringRef t = lexer.next(start);
      alias.first = t;
      token = {};
      for (bool first = true; !t.empty(); first = false) {
        ++alias.tokens;
        if ((t.starts_with("!") || t.starts_with("#")) && t.size() > 1)
          alias.uses.push_back(t);
        if (opens(t))
          ++inner;
        else if (closes(t) && inner > 0)
          --inner;
        StringRef n = lexer.next(start);
        if (inner == 0 && !(first && opens(n))) {
          token = n;
          break;
        }
        t = n;
      }
      aliases.insert({name, std::move(alias)});
      continue;
    }
    if (opens(token))
      ++depth;
    else if (closes(token) && depth > 0)
      --depth;
    token = following;
  }
  return aliases;
}

/// The largest size, in tokens, that an alias may stand for once every
/// alias inside it is expanded. Aliases share what they name, so a few
/// lines can describe a type or a location of 2^60 tokens, which the
/// printer and the verifier's messages write out in full (an hour, or all
/// the memory, for 1.5 KB of text). Real IR stays orders of magnitude
/// below.
static constexpr uint64_t kMaxAliasExpansion = uint64_t(1) << 20;

/// The alias whose expansion exceeds kMaxAliasExpansion tokens: its offset,
/// or npos.
static size_t explosiveAlias(const llvm::StringMap<AliasDefinition> &aliases) {
  // Expanded sizes, memoized; a cycle (which the parser refuses) counts once.
  llvm::StringMap<uint64_t> size;
  std::function<uint64_t(StringRef, unsigned)> expand = [&](StringRef name,
                                                            unsigned hops) -> uint64_t {
    auto known = size.find(name);
    if (known != size.end())
      return known->second;
    auto it = aliases.find(name);
    if (it == aliases.end() || hops > aliases.size())
      return 1;
    size[name] = 1; // a cycle's back edge
    uint64_t total = it->second.tokens;
    for (StringRef use : it->second.uses) {
      total += expand(use, hops + 1);
      if (total > kMaxAliasExpansion)
        break;
    }
    size[name] = total;
    return total;
  };
  for (const auto &entry : aliases)
    if (expand(entry.getKey(), 0) > kMaxAliasExpansion)
      return entry.getValue().offset;
  return StringRef::npos;
}

std::optional<IrRefusal> fa4::refuseBeforeParsing(StringRef text) {
  if (text.size() > kMaxIrBytes)
    return IrRefusal{0, (Twine(text.size()) + " bytes of IR, more than the " +
                         Twine(kMaxIrBytes) + " accepted")
                            .str()};
  // The parser recurses once per bracket; the bracket's place makes the
  // clearest error for IR nested by hand or by a generator gone wrong.
  // The refusal is printed at the bracket, as the parser prints an error:
  // its message leaves out checkNestingDepth's line and column.
  size_t offset = 0;
  if (llvm::Error deep = checkNestingDepth(text, kMaxIrNesting,
                                           NestingSyntax::Mlir, &offset)) {
    llvm::consumeError(std::move(deep));
    return IrRefusal{offset, "nesting deeper than " +
                                 std::to_string(kMaxIrNesting) +
                                 " levels: refused before parsing (the parser "
                                 "would overflow its stack)"};
  }

  llvm::StringMap<AliasDefinition> aliases = aliasDefinitions(text);
  size_t explosive = explosiveAlias(aliases);
  if (explosive != StringRef::npos)
    return IrRefusal{explosive, "an alias that stands for more than " +
                                    std::to_string(kMaxAliasExpansion) +
                                    " tokens once the aliases inside it are "
                                    "expanded: refused before parsing (printing "
                                    "or verifying it would not end)"};

  // The type a token names, through chains of type aliases (a cycle, which
  // the parser refuses, ends the chain).
  auto resolve = [&](StringRef token) {
    for (size_t hops = 0; token.starts_with("!") && hops <= aliases.size();
         ++hops) {
      auto it = aliases.find(token);
      if (it == aliases.end())
        break;
      token = it->second.first;
    }
    return token;
  };
  IrLexer lexer{text};
  size_t start = 0, runStart = 0, previousStart = 0, arrayStart = 0;
  unsigned minusRun = 0;
  StringRef previous, beforePrevious;
  for (StringRef token = lexer.next(start); !token.empty();
       beforePrevious = previous, previous = token, arrayStart = previousStart,
                 previousStart = start, token = lexer.next(start)) {
    if (token == "-") {
      if (minusRun++ == 0)
        runStart = start;
      if (minusRun > kMaxUnaryMinusRun)
        return IrRefusal{runStart,
                         "more than " + std::to_string(kMaxUnaryMinusRun) +
                             " minus signs in a row: refused before parsing "
                             "(the parser would overflow its stack)"};
    } else {
      minusRun = 0;
    }
    // MLIR 22's parser crashes on a dense array of index elements
    // (`array<index>`, `array<index: ...>`; an upstream bug listed in
    // docs/Robustness.md).
    if (beforePrevious == "array" && previous == "<" &&
        resolve(token) == "index")
      return IrRefusal{arrayStart, "dense arrays of `index` are not accepted: MLIR "
                              "22's parser crashes on them (use i64)"};
  }
  return std::nullopt;
}

void fa4::printRefusal(const llvm::MemoryBuffer &buffer,
                       const IrRefusal &refusal) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(buffer.getMemBufferRef(),
                                       /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  sourceMgr.PrintMessage(
      llvm::errs(),
      llvm::SMLoc::getFromPointer(buffer.getBufferStart() + refusal.offset),
      llvm::SourceMgr::DK_Error, refusal.message);
}

namespace {
/// What the IR thread runs and, once it has, what that gave back.
struct IrThreadWork {
  function_ref<llvm::Error()> body;
  std::optional<llvm::Error> result;
};
} // namespace

static void *runIrThread(void *work) {
  auto *irWork = static_cast<IrThreadWork *>(work);
  irWork->result.emplace(irWork->body());
  return nullptr;
}

llvm::Error fa4::runOnIrStack(uint64_t bytes,
                              function_ref<llvm::Error()> body) {
  // pthreads rather than llvm::thread: a stack that cannot be had is an
  // error to report, not a fatal one.
  pthread_attr_t attributes;
  if (int code = pthread_attr_init(&attributes))
    return makeError(std::string("cannot start the IR thread: ") +
                     std::strerror(code));
  uint64_t stack = irStackBytes(bytes);
  pthread_t handle;
  IrThreadWork work{body};
  int code = pthread_attr_setstacksize(&attributes, stack);
  if (code == 0)
    code = pthread_create(&handle, &attributes, runIrThread, &work);
  pthread_attr_destroy(&attributes);
  if (code != 0)
    return makeError("cannot start a thread with a " +
                     std::to_string(stack >> 20) +
                     " MiB stack for the IR: " + std::strerror(code));
  pthread_join(handle, nullptr);
  return std::move(*work.result);
}

int fa4::runToolOnInput(
    StringRef tool, StringRef path,
    function_ref<int(std::unique_ptr<llvm::MemoryBuffer>)> body) {
  // A file-size limit (`ulimit -f`) would end the tool with SIGXFSZ in the
  // middle of a write; ignored, the write fails with EFBIG and the tool
  // reports it as any failed write (and removes its temporary files).
  std::signal(SIGXFSZ, SIG_IGN);
  std::unique_ptr<llvm::MemoryBuffer> input;
  if (!path.empty()) {
    // Read in pieces up to the bound: a device or a pipe that never ends
    // is refused, not read until memory runs out. A regular file's size
    // is known first, for the message that says how much larger it is.
    uint64_t size = 0;
    if (path != "-" && !llvm::sys::fs::file_size(path, size) &&
        llvm::sys::fs::is_regular_file(path) && size > kMaxIrBytes) {
      llvm::errs() << tool << ": error: " << path << " is " << size
                   << " bytes, more than the " << kMaxIrBytes
                   << " bytes of IR accepted\n";
      return 2;
    }
    llvm::Expected<std::string> read =
        readBoundedStream(path.str(), kMaxIrBytes);
    if (!read) {
      llvm::errs() << tool << ": " << llvm::toString(read.takeError())
                   << "\n";
      return 2;
    }
    input = llvm::MemoryBuffer::getMemBufferCopy(
        *read, path == "-" ? StringRef("<stdin>") : path);
  }
  uint64_t bytes = input ? input->getBufferSize() : 0;
  int result = 1;
  if (llvm::Error noThread = runOnIrStack(bytes, [&] {
        result = body(std::move(input));
        return llvm::Error::success();
      })) {
    llvm::errs() << tool << ": error: " << llvm::toString(std::move(noThread))
                 << "\n";
    return 2;
  }
  return result;
}
