//===- fa4-fuzz.cpp - mutate fa4 IR and look for crashes and hangs --------===//
//
// A mutation fuzzer for every level of fa4's IR. Seeds are IR files (entry
// IR, and fa4c's output after each stage); each input is a seed with a few
// random mutations — numbers turned into boundary values, SSA operands
// swapped, lines dropped, duplicated or exchanged, keywords exchanged — fed,
// in a forked child, to parse -> verify -> the pipeline up to a random stage
// (every pass also sees input of the wrong level) and, for scheduled or tiled
// IR, to the simulator at small sizes. A child that dies of a signal is a
// crash, one that outlives the timeout a hang; both are saved for replay
// (`fa4-fuzz --replay FILE`). Diagnostics are the expected outcome and are
// silenced. With --mode manifest, cache, capi or cubin it mutates the runtime's
// other input surfaces instead (Surfaces.h), many inputs to a child: a child
// that dies has each of its inputs run again alone, to name the one. Test-only.
//
//===----------------------------------------------------------------------===//

#include "Surfaces.h"

#include "fa4/Dialect/FA4/IR/FA4Dialect.h"
#include "fa4/Pipeline/Pipeline.h"
#include "fa4/Sim/Simulator.h"
#include "fa4/Conversion/Passes.h"
#include "fa4/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>
#include <csignal>
#include <random>
#include <regex>
#include <sys/wait.h>
#include <unistd.h>

using namespace mlir;
using namespace llvm;

static cl::OptionCategory fuzzCategory("fa4-fuzz");
static cl::list<std::string> seedPaths(cl::Positional,
                                       cl::desc("<seed IR files or directories>"),
                                       cl::cat(fuzzCategory));
static cl::opt<double> seconds("seconds", cl::desc("How long to run"),
                               cl::init(60.0), cl::cat(fuzzCategory));
static cl::opt<uint64_t> maxRuns("runs", cl::desc("Stop after this many inputs (0: no limit)"),
                                 cl::init(0), cl::cat(fuzzCategory));
static cl::opt<uint64_t> seed("seed", cl::desc("Seed of the mutations"), cl::init(1), cl::cat(fuzzCategory));
static cl::opt<unsigned> timeout("timeout",
                                 cl::desc("Seconds an input may run before it "
                                          "counts as a hang"),
                                 cl::init(20), cl::cat(fuzzCategory));
static cl::opt<std::string> crashDir("crash-dir",
                                     cl::desc("Where crashing and hanging inputs go"),
                                     cl::init("fa4-fuzz-crashes"), cl::cat(fuzzCategory));
static cl::opt<unsigned> simulateEvery(
    "simulate-every",
    cl::desc("One input in this many goes to the simulator instead of the "
             "pipeline (0: none)"),
    cl::init(4), cl::cat(fuzzCategory));
static cl::opt<unsigned> jobs("jobs", cl::desc("Inputs run at once"),
                              cl::init(2), cl::cat(fuzzCategory));
static cl::opt<std::string> mode(
    "mode",
    cl::desc("What to mutate: ir (IR of every level; seeds are .mlir files), "
             "manifest, cache, capi or cubin (launch manifests, compile-cache "
             "entries, the C API's tensor descriptions, cubins' ELF and "
             "contract; seeds are .cubin.json manifests "
             "with their cubin and PTX)"),
    cl::init("ir"), cl::cat(fuzzCategory));
static cl::opt<unsigned> perChild(
    "per-child",
    cl::desc("Inputs one child runs (0: 1 for ir, 256 for the other modes)"),
    cl::init(0), cl::cat(fuzzCategory));
static cl::opt<std::string> replay("replay",
                                   cl::desc("Run one input in this process (to "
                                            "debug a saved crash)"),
                                   cl::init(""), cl::cat(fuzzCategory));

namespace {

/// What one input exercises, chosen by the parent so that a saved input
/// replays the same way.
struct Plan {
  std::string stopAfter;
  bool simulate = false;
  int64_t seqQ = 1, seqK = 1, batch = 1;
};

void runInput(MLIRContext &context, const std::string &text, const Plan &plan) {
  ScopedDiagnosticHandler silence(&context, [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module || failed(verify(*module)))
    return;
  if (plan.simulate) {
    SmallVector<func::FuncOp> kernels;
    module->walk([&](func::FuncOp func) {
      if (fa4::getKernelSpec(func))
        kernels.push_back(func);
    });
    if (kernels.size() == 1) {
      fa4::sim::RunOptions options;
      options.batch = plan.batch;
      options.seqQ = plan.seqQ;
      options.seqK = plan.seqK;
      llvm::consumeError(
          fa4::sim::simulate(kernels.front(), options).takeError());
    }
    return;
  }
  fa4::PipelineOptions options;
  options.stopAfter = plan.stopAfter;
  PassManager pm(&context);
  // Linalg seeds (the raise tests' inputs) are raised first.
  bool linalg = false;
  module->walk([&](Operation *op) {
    linalg |= op->getDialect() && op->getDialect()->getNamespace() == "linalg";
  });
  if (linalg)
    pm.addNestedPass<func::FuncOp>(fa4::createFA4RaiseAttention());
  if (llvm::Error refused = fa4::buildPipeline(pm, options))
    llvm::consumeError(std::move(refused));
  else
    (void)pm.run(*module);
}

class Mutator {
public:
  explicit Mutator(uint64_t seed) : rng(seed) {}

  std::string mutate(std::string text) {
    int count = 1 + rng() % 3;
    for (int i = 0; i < count; ++i)
      text = mutateOnce(text);
    return text;
  }

  uint64_t next() { return rng(); }

private:
  std::string mutateOnce(const std::string &text) {
    switch (rng() % 6) {
    case 0: case 1: return replaceNumber(text);
    case 2: return swapOperand(text);
    case 3: return editLines(text);
    case 4: return swapKeyword(text);
    default: return replaceNumber(text);
    }
  }

  /// A number becomes a boundary value.
  std::string replaceNumber(const std::string &text) {
    static const char *values[] = {
        "0", "1", "-1", "2", "3", "7", "16", "64", "127", "128", "129",
        "255", "256", "4096", "65536", "2147483647", "2147483648",
        "-2147483648", "4294967296", "9223372036854775807",
        "-9223372036854775808", "1.0e+38", "-0.0", "1.0e-45"};
    static const std::regex number(R"((^|[^%\w.#])(-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?)\b)");
    return replaceMatch(text, number, 2, values[rng() % std::size(values)]);
  }

  /// An SSA use becomes another value of the input.
  std::string swapOperand(const std::string &text) {
    static const std::regex ssa(R"(%[A-Za-z0-9_]+)");
    std::vector<std::string> names;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), ssa);
         it != std::sregex_iterator() && names.size() < 4096; ++it)
      names.push_back(it->str());
    if (names.size() < 2)
      return text;
    return replaceMatch(text, ssa, 0, names[rng() % names.size()]);
  }

  std::string editLines(const std::string &text) {
    std::vector<std::string> lines;
    size_t from = 0;
    while (from < text.size()) {
      size_t end = text.find('\n', from);
      if (end == std::string::npos)
        end = text.size();
      lines.push_back(text.substr(from, end - from));
      from = end + 1;
    }
    if (lines.size() < 2)
      return text;
    size_t a = rng() % lines.size(), b = rng() % lines.size();
    switch (rng() % 3) {
    case 0: lines.erase(lines.begin() + a); break;
    case 1: lines.insert(lines.begin() + a, lines[b]); break;
    default: std::swap(lines[a], lines[b]); break;
    }
    std::string out;
    for (const std::string &line : lines)
      out += line + "\n";
    return out;
  }

  /// A word of fa4's vocabulary becomes another of its kind.
  std::string swapKeyword(const std::string &text) {
    static const std::vector<std::vector<const char *>> kinds = {
        {"none", "causal", "window"},
        {"tma", "threads", "tcgen05"},
        {"f16", "bf16", "f32"},
        {"prior", ""},
        {"softmax0", "softmax1", "correction", "mma", "epilogue", "load"},
        {"arith.addi", "arith.subi", "arith.muli", "arith.divui"},
        {"lpt", "static"}};
    const std::vector<const char *> &kind = kinds[rng() % kinds.size()];
    const char *from = kind[rng() % kind.size()];
    if (!*from)
      return text;
    std::regex word(std::string("\\b") + from + "\\b");
    return replaceMatch(text, word, 0, kind[rng() % kind.size()]);
  }

  /// Replaces group `group` of a random match of `pattern` with `with`.
  std::string replaceMatch(const std::string &text, const std::regex &pattern,
                           int group, const std::string &with) {
    std::vector<std::pair<size_t, size_t>> spans;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
         it != std::sregex_iterator() && spans.size() < 100000; ++it)
      spans.push_back({size_t(it->position(group)), size_t(it->length(group))});
    if (spans.empty())
      return text;
    auto [at, length] = spans[rng() % spans.size()];
    return text.substr(0, at) + with + text.substr(at + length);
  }

  std::mt19937_64 rng;
};

std::vector<std::string> seedFiles(StringRef suffix) {
  std::vector<std::string> found;
  for (const std::string &path : seedPaths) {
    if (!sys::fs::is_directory(path)) {
      found.push_back(path);
      continue;
    }
    std::error_code ec;
    std::vector<std::string> files;
    for (sys::fs::directory_iterator it(path, ec), end; it != end && !ec;
         it.increment(ec))
      if (StringRef(it->path()).ends_with(suffix))
        files.push_back(it->path());
    std::sort(files.begin(), files.end()); // a fixed order for a fixed seed
    found.insert(found.end(), files.begin(), files.end());
  }
  return found;
}

std::vector<std::string> loadSeeds() {
  std::vector<std::string> seeds;
  for (const std::string &path : seedFiles(".mlir"))
    if (auto file = MemoryBuffer::getFile(path))
      seeds.push_back((*file)->getBuffer().str());
  return seeds;
}

} // namespace

int main(int argc, char **argv) {
  cl::HideUnrelatedOptions(fuzzCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "fa4-fuzz: mutate fa4 IR (every level) and run it through parse, verify, "
      "the pipeline and the simulator, looking for crashes and hangs\n\n"
      "  fa4-fuzz SEEDS_DIR --seconds 60 --crash-dir crashes\n"
      "  fa4-fuzz --replay crashes/crash-17.mlir\n");
  DialectRegistry registry;
  fa4::registerPipelineDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Children are forked from this process: no thread pool may exist.
  context.disableMultithreading();

  std::optional<fuzz::Surface> surface;
  if (mode != "ir") {
    surface = fuzz::surfaceNamed(mode);
    if (!surface) {
      errs() << "fa4-fuzz: --mode must be ir, manifest, cache, capi or cubin\n";
      return 2;
    }
  }
  fuzz::Corpus corpus;
  if (surface) {
    std::string error;
    if (!fuzz::loadCorpus(*surface, seedFiles(".cubin.json"), corpus, error)) {
      errs() << "fa4-fuzz: " << error << "\n";
      return 2;
    }
  }

  if (!replay.empty()) {
    sys::PrintStackTraceOnErrorSignal(argv[0]);
    auto file = MemoryBuffer::getFile(replay);
    if (!file) {
      errs() << "fa4-fuzz: cannot read " << replay << "\n";
      return 2;
    }
    StringRef text = (*file)->getBuffer();
    if (surface) {
      fuzz::runInput(*surface, text.str(), corpus);
      outs() << "fa4-fuzz: " << replay << " ran to completion\n";
      return 0;
    }
    // The plan rides in the first line of a saved input.
    Plan plan;
    StringRef header = text.take_until([](char c) { return c == '\n'; });
    SmallVector<StringRef> fields;
    header.split(fields, ' ');
    if (fields.size() == 6 && fields[0] == "//") {
      plan.stopAfter = fields[1].str();
      plan.simulate = fields[2] == "simulate";
      fields[3].getAsInteger(10, plan.batch);
      fields[4].getAsInteger(10, plan.seqQ);
      fields[5].getAsInteger(10, plan.seqK);
    }
    runInput(context, text.str(), plan);
    outs() << "fa4-fuzz: " << replay << " ran to completion\n";
    return 0;
  }

  std::vector<std::string> seeds;
  if (!surface) {
    seeds = loadSeeds();
    if (seeds.empty()) {
      errs() << "fa4-fuzz: no seed IR (give .mlir files or directories)\n";
      return 2;
    }
  }
  ArrayRef<StringRef> stages = fa4::getPipelineStages();
  Mutator mutator(seed);
  std::mt19937_64 surfaceRng(seed);
  unsigned batchSize = perChild ? perChild.getValue() : surface ? 256 : 1;
  uint64_t runs = 0, crashes = 0, hangs = 0;
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  struct Input {
    uint64_t index;
    std::string text;
    Plan plan;
  };
  // A child runs a batch of inputs; one that dies with more than one has
  // each run again alone (`retry`), so that a crash names its input.
  std::map<pid_t, std::vector<Input>> running;
  std::vector<Input> retry;
  auto save = [&](const Input &done, bool hang, int signal) {
    (hang ? hangs : crashes) += 1;
    sys::fs::create_directories(crashDir);
    SmallString<128> path(crashDir);
    sys::path::append(path, (hang ? "hang-" : "crash-") + std::to_string(done.index) +
                                (surface ? "." + mode : std::string(".mlir")));
    std::error_code ec;
    raw_fd_ostream out(path, ec);
    if (!surface)
      out << "// " << done.plan.stopAfter << " "
          << (done.plan.simulate ? "simulate" : "pipeline") << " " << done.plan.batch
          << " " << done.plan.seqQ << " " << done.plan.seqK << "\n";
    out << done.text;
    errs() << "fa4-fuzz: "
           << (hang ? std::string("hang") : "crash (signal " + std::to_string(signal) + ")")
           << " on input " << done.index << ", saved to " << path << "\n";
  };
  // Reaps one child; a signal is a crash (SIGALRM: a hang), saved for replay.
  // A child runs `inputs` under the time limit; the parent keeps them to
  // judge how it ended.
  auto spawn = [&](std::vector<Input> inputs) {
    fflush(nullptr);
    pid_t child = fork();
    if (child < 0) {
      errs() << "fa4-fuzz: fork failed\n";
      return false;
    }
    if (child == 0) {
      alarm(timeout);
      for (const Input &input : inputs) {
        if (surface)
          fuzz::runInput(*surface, input.text, corpus);
        else
          runInput(context, input.text, input.plan);
      }
      _exit(0);
    }
    running.emplace(child, std::move(inputs));
    return true;
  };
  auto reap = [&]() {
    int status = 0;
    pid_t child = wait(&status);
    auto it = running.find(child);
    if (it == running.end())
      return;
    std::vector<Input> done = std::move(it->second);
    running.erase(it);
    if (!WIFSIGNALED(status))
      return;
    if (done.size() > 1) {
      for (Input &input : done)
        retry.push_back(std::move(input));
      return;
    }
    save(done.front(), WTERMSIG(status) == SIGALRM, WTERMSIG(status));
  };
  unsigned parallel = std::max(1u, jobs.getValue());
  double nextProgress = 600;
  auto more = [&] { return elapsed() < seconds && (!maxRuns || runs < maxRuns); };
  while (more() || !retry.empty()) {
    // A long run says every ten minutes how far it got.
    if (elapsed() >= nextProgress) {
      outs() << "fa4-fuzz: " << runs << " inputs after " << format("%.0f", elapsed())
             << " s, " << crashes << " crashes, " << hangs << " hangs\n";
      outs().flush();
      nextProgress += 600;
    }
    while (running.size() >= parallel)
      reap();
    // A retried input runs alone; new ones in batches.
    std::vector<Input> batch;
    bool retried = !retry.empty();
    if (retried) {
      batch.push_back(std::move(retry.back()));
      retry.pop_back();
    }
    while (!retried && batch.size() < batchSize && more()) {
      Input next;
      if (surface) {
        next.text = fuzz::mutateInput(*surface, corpus, surfaceRng);
      } else {
        next.text = mutator.mutate(seeds[mutator.next() % seeds.size()]);
        // The binary stage runs ptxas: every stage before it.
        next.plan.stopAfter = stages[mutator.next() % (stages.size() - 1)].str();
        uint64_t draw = mutator.next();
        next.plan.simulate = simulateEvery && draw % simulateEvery == 0;
        next.plan.batch = 1 + mutator.next() % 2;
        next.plan.seqQ = 1 + mutator.next() % 300;
        next.plan.seqK = 1 + mutator.next() % 300;
      }
      next.index = ++runs;
      batch.push_back(std::move(next));
    }
    if (batch.empty())
      break;
    if (!spawn(std::move(batch)))
      return 2;
  }
  // The last batches, and their inputs run alone if one died.
  while (!running.empty()) {
    reap();
    while (!retry.empty()) {
      std::vector<Input> one = {std::move(retry.back())};
      retry.pop_back();
      if (!spawn(std::move(one)))
        return 2;
    }
  }
  double took = elapsed();
  outs() << "fa4-fuzz: " << runs << " inputs in " << format("%.1f", took) << " s ("
         << format("%.0f", runs / std::max(took, 1e-9)) << " per second), "
         << crashes << " crashes, " << hangs << " hangs\n";
  return crashes || hangs ? 1 : 0;
}
