//===- Fields.h - reading a manifest's JSON objects --------------*- C++ -*-===//
//
// Internal to lib/Runtime: the manifests' readers (Launch.cpp's forward,
// Backward.cpp's) read each JSON object through Fields, which keeps the
// first missing or mistyped field as the error.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_LIB_RUNTIME_FIELDS_H
#define FA4_LIB_RUNTIME_FIELDS_H

#include "fa4/Runtime/Launch.h"

#include "llvm/Support/JSON.h"

#include <cmath>
#include <string>
#include <vector>

namespace mlir::fa4::runtime {

/// A manifest's JSON, parsed once it is known to be of a bounded size and
/// nesting (Launch.cpp); the error names what was wrong.
llvm::Expected<llvm::json::Value> parseManifestJson(const std::string &json);

class Fields;
/// "extras" (optional) of a manifest's top level: each one's element type
/// and shape (-1 where the launch gives the size), appended to `into`;
/// false (with `error` set) when one is malformed.
bool readExtras(Fields &top, std::vector<Manifest::Extra> &into,
                std::string &error);

/// Reads the fields of one JSON object, remembering the first missing or
/// mistyped one.
class Fields {
public:
  Fields(const llvm::json::Object *object, std::string where, std::string &error)
      : object(object), where(std::move(where)), error(error) {
    if (!object)
      fail("is not an object");
  }
  bool ok() const { return error.empty(); }
  void fail(const std::string &what) {
    if (error.empty())
      error = "manifest: " + where + " " + what;
  }
  std::string string(const char *name) {
    auto value = object ? object->getString(name) : std::nullopt;
    if (!value) {
      fail("has no string \"" + std::string(name) + "\"");
      return "";
    }
    return value->str();
  }
  int64_t integer(const char *name) {
    auto value = object ? object->getInteger(name) : std::nullopt;
    if (!value) {
      // A number that is not a 64-bit integer is said as such.
      if (object && object->getNumber(name))
        fail("has \"" + std::string(name) +
             "\" that is not an integer in the 64-bit range");
      else
        fail("has no integer \"" + std::string(name) + "\"");
      return 0;
    }
    return *value;
  }
  /// A finite number: JSON has no infinity (a literal past the double range
  /// reads as one) and the manifest must be written back as JSON.
  double number(const char *name) {
    auto value = object ? object->getNumber(name) : std::nullopt;
    if (!value) {
      fail("has no number \"" + std::string(name) + "\"");
      return 0;
    }
    if (!std::isfinite(*value)) {
      fail("has \"" + std::string(name) + "\" that is not a finite number");
      return 0;
    }
    return *value;
  }
  bool boolean(const char *name) {
    auto value = object ? object->getBoolean(name) : std::nullopt;
    if (!value) {
      fail("has no boolean \"" + std::string(name) + "\"");
      return false;
    }
    return *value;
  }
  const llvm::json::Array *array(const char *name) {
    auto *value = object ? object->getArray(name) : nullptr;
    if (!value)
      fail("has no array \"" + std::string(name) + "\"");
    return value;
  }
  /// A member that may be absent (null then, and no failure).
  const llvm::json::Value *optional(const char *name) {
    return object ? object->get(name) : nullptr;
  }
  const llvm::json::Object *child(const char *name) {
    auto *value = object ? object->getObject(name) : nullptr;
    if (!value)
      fail("has no object \"" + std::string(name) + "\"");
    return value;
  }

private:
  const llvm::json::Object *object;
  std::string where;
  std::string &error;
};

} // namespace mlir::fa4::runtime

#endif // FA4_LIB_RUNTIME_FIELDS_H
