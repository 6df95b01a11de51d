//===- OutputFile.h - output written whole or not at all --------*- C++ -*-===//
//
// LLVM's ToolOutputFile ends the process with a fatal "IO failure on output
// stream" when a write fails (a full disk) and leaves what was written. A
// tool's output goes through OutputFile instead: every write is checked, a
// failure is an error naming the file and the cause, and a regular file is
// written beside its name and renamed over it only when whole.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_SUPPORT_OUTPUTFILE_H
#define FA4_SUPPORT_OUTPUTFILE_H

#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>

namespace mlir::fa4 {

class OutputFile {
public:
  /// Opens `path` ('-' is stdout) for writing; an error ("cannot write PATH:
  /// cause") when it cannot be. A regular file, or a new one, is written
  /// to a temporary file in its directory that commit renames over it.
  /// Anything else (a device such as /dev/null or /dev/full, a FIFO) is
  /// written in place: a rename would replace the device, not write to it;
  /// a failed write there leaves what the device took.
  static llvm::Expected<std::unique_ptr<OutputFile>> open(StringRef path);
  /// Removes the temporary file when commit did not keep it.
  ~OutputFile();

  raw_ostream &os() { return *stream; }
  /// Flushes and closes the output without renaming it into place: an
  /// error when a write or the close failed (then the temporary file is
  /// gone). A set of files is finished, each, before any is committed.
  llvm::Error finish();
  /// Flushes and closes the output and, for a regular file, renames it into
  /// place. An error ("cannot write PATH: cause") when any write, the close
  /// or the rename failed; then the temporary file is gone and `path` is as
  /// it was.
  llvm::Error commit();

private:
  OutputFile() = default;
  std::string path;
  std::optional<llvm::sys::fs::TempFile> temporary;
  std::unique_ptr<llvm::raw_fd_ostream> owned;
  llvm::raw_fd_ostream *stream = nullptr;
  bool failed = false;
};

/// Writes each (path, text) as one set: every file is written to its
/// temporary file and finished before any is renamed into place, in the
/// given order (put the file readers look for first, a cubin, last). An
/// error when one cannot be written; then no file of the set has changed
/// unless a rename itself failed midway (the earlier ones renamed).
llvm::Error writeFileSet(ArrayRef<std::pair<StringRef, StringRef>> files);

/// Flushes stdout; an error ("cannot write stdout: cause") when a write to
/// it failed (`> /dev/full`), which LLVM would otherwise report as a fatal
/// error at exit.
llvm::Error flushStdout();

} // namespace mlir::fa4

#endif // FA4_SUPPORT_OUTPUTFILE_H
