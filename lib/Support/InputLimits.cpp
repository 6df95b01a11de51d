//===- InputLimits.cpp - bounds on what fa4 reads from outside ------------===//

#include "fa4/Support/InputLimits.h"
#include "fa4/Support/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace mlir::fa4 {

llvm::Error checkNestingDepth(std::string_view text, unsigned limit,
                              NestingSyntax syntax, size_t *offset) {
  bool mlir = syntax == NestingSyntax::Mlir;
  unsigned depth = 0;
  std::vector<char> stack; // the open brackets, innermost last
  size_t line = 1, lineStart = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      lineStart = i + 1;
      continue;
    }
    if (c == '"') {
      // A string: brackets inside do not nest; an unterminated one is the
      // parser's to report.
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (text[i] == '\n') {
          ++line;
          lineStart = i + 1;
        }
      }
      continue;
    }
    if (mlir && c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
      continue;
    }
    bool open = c == '[' || c == '{' || (mlir && (c == '(' || c == '<'));
    bool close = c == ']' || c == '}' || (mlir && (c == ')' || c == '>'));
    if (open && ++depth > limit) {
      if (offset)
        *offset = i;
      return makeError("line " + std::to_string(line) + ", column " +
                       std::to_string(i - lineStart + 1) +
                       ": nesting deeper than " + std::to_string(limit) +
                       " levels (refused before parsing: the parser would "
                       "overflow its stack)");
    }
    if (open) {
      stack.push_back(c);
      continue;
    }
    // A closer counts only against its own opener: `>` also ends `->` and
    // `>=` (an affine set's constraint), and a stray closer must not let
    // the count fall below the parser's own depth (a closer the parser
    // refuses comes after the nesting it recursed into). Unmatched closers
    // are the parser's to report.
    if (close && !stack.empty()) {
      char opener = c == ']' ? '[' : c == '}' ? '{' : c == ')' ? '(' : '<';
      bool arrowOrCompare = c == '>' && ((i > 0 && text[i - 1] == '-') ||
                                         (i + 1 < text.size() && text[i + 1] == '='));
      if (stack.back() == opener && !arrowOrCompare) {
        stack.pop_back();
        --depth;
      }
    }
  }
  return llvm::Error::success();
}

namespace {
enum class ReadEnd { Whole, TooLarge, Failed };
} // namespace

/// Appends what `fd` holds to `contents` until its end, stopping once it
/// would pass `maxBytes`; Failed leaves errno as the read set it.
static ReadEnd readAll(int fd, uint64_t maxBytes, std::string &contents) {
  char chunk[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return ReadEnd::Failed;
    }
    if (got == 0)
      return ReadEnd::Whole;
    if (contents.size() + static_cast<uint64_t>(got) > maxBytes)
      return ReadEnd::TooLarge;
    contents.append(chunk, static_cast<size_t>(got));
  }
}

llvm::Expected<std::string> readRegularFile(const std::string &path,
                                            uint64_t maxBytes, bool *missing) {
  if (missing)
    *missing = false;
  auto fail = [&](const std::string &why) {
    return makeError("cannot read " + path + ": " + why);
  };
  // Non-blocking: opening a FIFO for reading would wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int code = errno;
    if (missing)
      *missing = code == ENOENT;
    return fail(std::strerror(code));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat status;
  if (::fstat(fd, &status) != 0)
    return fail(std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    return fail("not a regular file");
  if (static_cast<uint64_t>(status.st_size) > maxBytes)
    return fail(std::to_string(status.st_size) + " bytes, more than the " +
                std::to_string(maxBytes) + " accepted");
  // The size as read, not as stated: a file may grow while it is read.
  std::string contents;
  contents.reserve(static_cast<size_t>(status.st_size));
  ReadEnd end = readAll(fd, maxBytes, contents);
  if (end == ReadEnd::Failed)
    return fail(std::strerror(errno));
  if (end == ReadEnd::TooLarge)
    return fail("more than the " + std::to_string(maxBytes) +
                " bytes accepted");
  return std::move(contents);
}

llvm::Expected<std::string> readBoundedStream(const std::string &path,
                                              uint64_t maxBytes) {
  bool standardInput = path == "-";
  int fd = standardInput ? STDIN_FILENO
                         : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return makeError("cannot open input file '" + path +
                     "': " + std::strerror(errno));
  struct Closer {
    int fd;
    bool owned;
    ~Closer() {
      if (owned)
        ::close(fd);
    }
  } closer{fd, !standardInput};
  std::string contents;
  ReadEnd end = readAll(fd, maxBytes, contents);
  if (end == ReadEnd::Failed)
    return makeError("cannot read input file '" + path +
                     "': " + std::strerror(errno));
  if (end == ReadEnd::TooLarge)
    return makeError((standardInput ? std::string("standard input") : path) +
                     " holds more than " + std::to_string(maxBytes) +
                     " bytes, the most accepted");
  return std::move(contents);
}

} // namespace mlir::fa4
