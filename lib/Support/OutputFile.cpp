//===- OutputFile.cpp - output written whole or not at all ----------------===//

#include "fa4/Support/OutputFile.h"
#include "fa4/Support/Error.h"

#include "llvm/Support/Errc.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Path.h"

#include <vector>

using namespace mlir;
using namespace mlir::fa4;

llvm::Expected<std::unique_ptr<OutputFile>> OutputFile::open(StringRef path) {
  std::unique_ptr<OutputFile> file(new OutputFile);
  file->path = path.str();
  auto fail = [&](const Twine &cause) {
    return makeError("cannot write " + path + ": " + cause);
  };
  if (path == "-") {
    file->stream = &llvm::outs();
    return std::move(file);
  }
  // Through a symbolic link to the file it names: the rename replaces that
  // file, not the link.
  SmallString<256> target(path);
  if (llvm::sys::fs::is_symlink_file(path)) {
    if (std::error_code code = llvm::sys::fs::real_path(path, target))
      return fail(code.message());
  }
  llvm::sys::fs::file_status status;
  bool exists = !llvm::sys::fs::status(target, status);
  if (exists && status.type() != llvm::sys::fs::file_type::regular_file) {
    if (status.type() == llvm::sys::fs::file_type::directory_file)
      return fail("is a directory");
    std::error_code code;
    file->owned = std::make_unique<llvm::raw_fd_ostream>(
        target, code, llvm::sys::fs::OF_None);
    if (code)
      return fail(code.message());
    file->stream = file->owned.get();
    return std::move(file);
  }
  file->path = target.str().str();
  llvm::Expected<llvm::sys::fs::TempFile> temporary =
      llvm::sys::fs::TempFile::create(target + "-%%%%%%.tmp");
  if (!temporary)
    return fail(llvm::toString(temporary.takeError()));
  file->temporary.emplace(std::move(*temporary));
  // The file it replaces keeps its permissions (a 0600 output stays
  // private); a new one gets the process's defaults.
  if (exists)
    (void)llvm::sys::fs::setPermissions(file->temporary->FD, status.permissions());
  file->owned = std::make_unique<llvm::raw_fd_ostream>(
      file->temporary->FD, /*shouldClose=*/false);
  file->stream = file->owned.get();
  return std::move(file);
}

OutputFile::~OutputFile() {
  // A stream with an unreported error would end the process at its
  // destruction, and so would the flush of what it still buffers: flushed
  // here and the error dropped (commit reported it, or nothing was
  // committed and the temporary file goes).
  if (stream) {
    stream->flush();
    stream->clear_error();
  }
  owned.reset();
  if (temporary)
    llvm::consumeError(temporary->discard());
}

llvm::Error OutputFile::finish() {
  if (!stream)
    return llvm::Error::success(); // finished already
  auto fail = [&](const Twine &cause) {
    llvm::Error error = makeError(
        "cannot write " + (path == "-" ? "stdout" : path) + ": " + cause);
    stream->clear_error();
    owned.reset();
    stream = nullptr;
    if (temporary)
      llvm::consumeError(temporary->discard());
    temporary.reset();
    failed = true;
    return error;
  };
  stream->flush();
  if (owned && !temporary)
    owned->close(); // a device; a temporary file's descriptor is its own
  if (stream->has_error())
    return fail(stream->error().message());
  owned.reset();
  stream = nullptr;
  return llvm::Error::success();
}

llvm::Error OutputFile::commit() {
  if (llvm::Error unfinished = finish())
    return unfinished;
  if (failed)
    return makeError("cannot write " + path + ": an earlier write failed");
  if (!temporary)
    return llvm::Error::success();
  llvm::Error kept = temporary->keep(path);
  temporary.reset();
  return prefixError("cannot write " + path + ": ", std::move(kept));
}

llvm::Error fa4::writeFileSet(ArrayRef<std::pair<StringRef, StringRef>> files) {
  std::vector<std::unique_ptr<OutputFile>> outputs;
  for (auto [path, text] : files) {
    llvm::Expected<std::unique_ptr<OutputFile>> output = OutputFile::open(path);
    if (!output)
      return output.takeError();
    outputs.push_back(std::move(*output));
    outputs.back()->os() << text;
  }
  for (std::unique_ptr<OutputFile> &output : outputs)
    if (llvm::Error unfinished = output->finish())
      return unfinished;
  for (std::unique_ptr<OutputFile> &output : outputs)
    if (llvm::Error uncommitted = output->commit())
      return uncommitted;
  return llvm::Error::success();
}

llvm::Error fa4::flushStdout() {
  llvm::outs().flush();
  if (!llvm::outs().has_error())
    return llvm::Error::success();
  llvm::Error error =
      makeError("cannot write stdout: " + llvm::outs().error().message());
  llvm::outs().clear_error();
  return error;
}
