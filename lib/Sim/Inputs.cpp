//===- Inputs.cpp - fa4-sim's inputs and expected O from files -----------===//

#include "Inputs.h"

#include "Interpreter.h"
#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/Sim/Mods.h"
#include "fa4/Support/InputLimits.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::fa4;
using namespace mlir::fa4::sim;

BlockArgument mlir::fa4::sim::entryArgument(Value value, func::FuncOp func) {
  while (Operation *producer = value.getDefiningOp()) {
    if (auto toBuffer = dyn_cast<bufferization::ToBufferOp>(producer))
      value = toBuffer.getTensor();
    else if (auto toTensor = dyn_cast<bufferization::ToTensorOp>(producer))
      value = toTensor.getBuffer();
    // The raise's view of a collapsed [batch·heads, seq, head_dim] tensor
    // with one head: the same elements in the same order.
    else if (auto expand = dyn_cast<tensor::ExpandShapeOp>(producer))
      value = expand.getSrc();
    else
      return nullptr;
  }
  auto argument = dyn_cast<BlockArgument>(value);
  if (!argument || argument.getOwner() != &func.getBody().front())
    return nullptr;
  return argument;
}

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text;
  for (auto [i, size] : llvm::enumerate(shape))
    text += (i ? "x" : "") + std::to_string(size);
  return text;
}

/// Reads `path`, which must hold exactly one float32 per element of `shape`;
/// `what` names the value in messages.
static bool readFloats(StringRef path, ArrayRef<int64_t> shape,
                       const std::string &what, std::vector<float> &values,
                       std::string &error) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  // A regular file of exactly the expected size: a FIFO is refused rather
  // than waited on, and nothing larger is read.
  uint64_t expected = static_cast<uint64_t>(count) * 4;
  llvm::Expected<std::string> file = readRegularFile(path.str(), expected);
  if (!file) {
    // "cannot read PATH: why" as "cannot read PATH (what): why".
    std::string why = llvm::toString(file.takeError());
    std::string prefix = "cannot read " + path.str() + ": ";
    if (StringRef(why).starts_with(prefix))
      why = why.substr(prefix.size());
    error = prefix.substr(0, prefix.size() - 2) + " (" + what + "): " + why;
    return false;
  }
  uint64_t bytes = file->size();
  if (bytes != expected) {
    error = path.str() + " has " + std::to_string(bytes) + " bytes; expected " +
            std::to_string(expected) + " (" + what + " as " +
            shapeString(shape) + " float32)";
    return false;
  }
  const char *data = file->data();
  values.resize(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = llvm::support::endian::read<float, llvm::endianness::little>(
        data + 4 * i);
  return true;
}

namespace {
/// Q, K, V or O: sized as the run asks, declared as the attention declares.
struct AttentionTensor {
  const char *name;
  Value operand;
  /// [batch, seq, heads, head_dim], the simulator's order.
  SmallVector<int64_t, 4> logical;
  bool headsFirst;

  /// The order the entry function declares: [batch, heads, seq, head_dim]
  /// under heads_first.
  SmallVector<int64_t, 4> declared() const {
    SmallVector<int64_t, 4> shape(logical);
    if (headsFirst)
      std::swap(shape[1], shape[2]);
    return shape;
  }

  /// Whether `type`'s static sizes agree with the declared shape.
  bool fits(Type type) const {
    auto shaped = dyn_cast<ShapedType>(type);
    SmallVector<int64_t, 4> shape = declared();
    // A collapsed [batch·heads, seq, head_dim] argument of one head per
    // batch entry holds the declared elements in the declared order.
    if (shaped && shaped.hasRank() && shaped.getRank() == 3 && !headsFirst &&
        shape[2] == 1)
      shape.erase(shape.begin() + 2);
    if (!shaped || !shaped.hasRank() ||
        shaped.getRank() != static_cast<int64_t>(shape.size()))
      return false;
    for (auto [dim, size] : llvm::enumerate(shape))
      if (!shaped.isDynamicDim(dim) && shaped.getDimSize(dim) != size)
        return false;
    return true;
  }

  /// `values` in the declared order, permuted to the logical order.
  void toLogical(ArrayRef<float> values, std::vector<float> &out) const {
    int64_t batch = logical[0], seq = logical[1], heads = logical[2],
            dim = logical[3];
    out.resize(values.size());
    if (!headsFirst) {
      llvm::copy(values, out.begin());
      return;
    }
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t s = 0; s < seq; ++s)
          for (int64_t d = 0; d < dim; ++d)
            out[((b * seq + s) * heads + h) * dim + d] =
                values[((b * heads + h) * seq + s) * dim + d];
  }
};
} // namespace

static std::string mismatch(const AttentionTensor &tensor, Type type) {
  return "fa4.attention's " + std::string(tensor.name) + " is " + str(type) +
         ", but the run asks for " + shapeString(tensor.declared()) +
         " (check --batch, --seq-q and --seq-k)";
}

static std::string argumentFile(StringRef directory, unsigned number) {
  SmallString<128> path(directory);
  llvm::sys::path::append(path, "arg" + std::to_string(number) + ".bin");
  return path.str().str();
}

bool mlir::fa4::sim::readInputs(AttentionOp op, const Problem &p,
                                StringRef directory, std::vector<float> &q,
                                std::vector<float> &k, std::vector<float> &v,
                                Mods &mods, std::string &error) {
  auto func = op->getParentOfType<func::FuncOp>();
  bool headsFirst = op.getHeadsFirst();
  AttentionTensor tensors[] = {
      {"q", op.getQ(), {p.batch, p.seqQ, p.qHeads, p.headDim}, headsFirst},
      {"k", op.getK(), {p.batch, p.seqK, p.kvHeads, p.headDim}, headsFirst},
      {"v", op.getV(), {p.batch, p.seqK, p.kvHeads, p.vDim()}, headsFirst}};
  std::vector<float> *buffers[] = {&q, &k, &v};
  std::vector<float> values;
  for (auto [tensor, buffer] : llvm::zip_equal(tensors, buffers)) {
    BlockArgument argument = entryArgument(tensor.operand, func);
    if (!argument) {
      error = "--inputs: fa4.attention's " + std::string(tensor.name) +
              " operand is not an argument of @" + func.getName().str() +
              " (directly or through bufferization.to_buffer / to_tensor)";
      return false;
    }
    if (!tensor.fits(argument.getType())) {
      error = "--inputs: " + mismatch(tensor, argument.getType());
      return false;
    }
    std::string what = "argument #" + std::to_string(argument.getArgNumber()) +
                       ", fa4.attention's " + tensor.name;
    if (!readFloats(argumentFile(directory, argument.getArgNumber()),
                    tensor.declared(), what, values, error)) {
      error = "--inputs: " + error;
      return false;
    }
    Type element = cast<ShapedType>(tensor.operand.getType()).getElementType();
    for (float &value : values)
      value = roundTo(element, value);
    tensor.toLogical(values, *buffer);
  }
  for (auto [index, number] : llvm::enumerate(mods.argumentNumbers())) {
    // The split-KV workspace is the kernel's scratch, not an input: it
    // stays as fillExtras drew it (zero), with no file.
    if (mods.splitWorkspace() == index)
      continue;
    const ModBuffer &extra = mods.buffers()[index];
    std::string path = argumentFile(directory, number);
    if (!readFloats(path, extra.shape,
                    "argument #" + std::to_string(number) +
                        ", fa4.attention's extra #" + std::to_string(index),
                    values, error)) {
      error = "--inputs: " + error;
      return false;
    }
    if (llvm::Error refused = mods.setExtra(index, values)) {
      error = "--inputs: " + path + ": " + llvm::toString(std::move(refused));
      return false;
    }
  }
  return true;
}

bool mlir::fa4::sim::readExpectedOutput(AttentionOp op, const Problem &p,
                                        StringRef path, std::vector<float> &out,
                                        std::string &error) {
  AttentionTensor tensor{"out",
                         op.getOut(),
                         {p.batch, p.seqQ, p.qHeads, p.vDim()},
                         op.getHeadsFirst()};
  if (!tensor.fits(tensor.operand.getType())) {
    error = "--expect: " + mismatch(tensor, tensor.operand.getType());
    return false;
  }
  std::vector<float> values;
  if (!readFloats(path, tensor.declared(), "fa4.attention's out", values,
                  error)) {
    error = "--expect: " + error;
    return false;
  }
  tensor.toLogical(values, out);
  return true;
}
