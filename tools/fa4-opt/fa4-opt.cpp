//===- fa4-opt.cpp - mlir-opt with the fa4 dialect and passes -------------===//
//
// Registers fa4, its passes and pipelines, and the upstream dialects and
// passes that the fa4 pipeline lowers through.
//
//===----------------------------------------------------------------------===//

#include "fa4/Conversion/Passes.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Target/Blackwell/Passes.h"
#include "fa4/Target/Hopper/Passes.h"
#include "fa4/Transforms/Passes.h"
#include "TestPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "fa4/Support/IrInput.h"
#include "fa4/Support/OutputFile.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  // LLVM's signal handlers, and the alternate signal stack they use, are
  // installed here on the main thread, not lazily by the first thread that
  // needs them (the big-stack parse thread, fa4/Support/IrInput.h, whose
  // exit must not tear down a stack it does not own: AddressSanitizer's
  // thread exit fails on it).
  llvm::sys::PrintStackTraceOnErrorSignal(argv[0]);
  mlir::DialectRegistry registry;
  mlir::fa4::registerPipelineDialects(registry);

  mlir::registerTransformsPasses();
  mlir::registerSCFPasses();
  mlir::registerGPUPasses();
  mlir::registerConversionPasses();
  mlir::bufferization::registerBufferizationPasses();
  mlir::fa4::registerFA4Passes();
  mlir::fa4::registerFA4BlackwellPasses();
  mlir::fa4::registerFA4HopperPasses();
  mlir::fa4::registerFA4ConversionPasses();
  mlir::fa4::registerFA4Pipelines();
  // For the tests only: fa4-test-mutate-protocol.
  mlir::fa4::test::registerTestPasses();

  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "fa4 optimizer: the fa4 dialect, passes and pipelines\n",
      registry);
  // Passes walk the IR on this tool's thread, whose stack is sized to the
  // input, never on a thread pool's workers with their default stacks (as
  // --mlir-disable-threading; the option is MLIRContext's cl::opt<bool>).
  auto &options = llvm::cl::getRegisteredOptions();
  if (auto it = options.find("mlir-disable-threading"); it != options.end())
    static_cast<llvm::cl::opt<bool> *>(it->second)->setValue(true);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  // Listing dialects or passes reads no input: upstream's driver does it.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(
        argc, argv, inputFilename, outputFilename, registry));
  // The input, file or stdin, is refused before upstream's parser sees it
  // when the parser would crash on it, and is parsed, transformed and printed
  // on a stack sized to it (fa4/Support/IrInput.h); the output is written
  // whole or not at all (fa4/Support/OutputFile.h).
  return mlir::fa4::runToolOnInput(
      "fa4-opt", inputFilename,
      [&](std::unique_ptr<llvm::MemoryBuffer> input) {
        if (std::optional<mlir::fa4::IrRefusal> refusal =
                mlir::fa4::refuseBeforeParsing(input->getBuffer())) {
          mlir::fa4::printRefusal(*input, *refusal);
          return 1;
        }
        llvm::Expected<std::unique_ptr<mlir::fa4::OutputFile>> output =
            mlir::fa4::OutputFile::open(outputFilename);
        if (!output) {
          llvm::errs() << "fa4-opt: error: "
                       << llvm::toString(output.takeError()) << "\n";
          return 1;
        }
        if (failed(mlir::MlirOptMain((*output)->os(), std::move(input),
                                     registry, config)))
          return 1;
        if (llvm::Error unwritten = (*output)->commit()) {
          llvm::errs() << "fa4-opt: error: "
                       << llvm::toString(std::move(unwritten)) << "\n";
          return 1;
        }
        return 0;
      });
}
