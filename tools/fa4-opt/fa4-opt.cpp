//===- fa4-opt.cpp - mlir-opt with the fa4 dialect and passes -------------===//
//
// Registers fa4, its passes and pipelines, and the upstream dialects and
// passes that the fa4 pipeline lowers through.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/Passes.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Transforms/Passes.h"
#include "TestPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "fa4/Support/InputLimits.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::fa4::registerPipelineDialects(registry);

  mlir::registerTransformsPasses();
  mlir::registerSCFPasses();
  mlir::registerGPUPasses();
  mlir::registerConversionPasses();
  mlir::bufferization::registerBufferizationPasses();
  mlir::fa4::registerFA4Passes();
  mlir::fa4::registerFA4ConversionPasses();
  mlir::fa4::registerFA4Pipelines();
  // For the tests only: fa4-test-mutate-protocol.
  mlir::fa4::test::registerTestPasses();

  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "fa4 optimizer: the fa4 dialect, passes and pipelines\n",
      registry);
  // IR nested deeper than the parser's stack allows is refused before
  // upstream's parser sees it (docs/Robustness.md); stdin is read once, by
  // MlirOptMain, and is not checked.
  if (inputFilename != "-") {
    std::string error;
    std::unique_ptr<llvm::MemoryBuffer> input =
        mlir::openInputFile(inputFilename, &error);
    if (input && !mlir::fa4::checkNestingDepth(input->getBuffer(),
                                               mlir::fa4::kMaxIrNesting,
                                               mlir::fa4::NestingSyntax::Mlir,
                                               error)) {
      llvm::errs() << inputFilename << ": error: " << error << "\n";
      return 1;
    }
  }
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}
