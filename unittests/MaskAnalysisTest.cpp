//===- MaskAnalysisTest.cpp - mask_mod bounds against brute force ---------===//
//
// Each mask_mod below is parsed, analysed, and turned into KV block ranges the
// way the kernel computes them; every block of every task is then checked by
// enumerating the predicate itself (written again here in C++): a block with
// a visible key is visited, a block called whole is visible to every row, and
// where the analysis claims exactness, nothing else is visited and every
// whole block is called whole.
//
//===----------------------------------------------------------------------===//

#include "fa4/Dialect/FA4/IR/FA4Ops.h"
#include "fa4/InitFA4.h"
#include "fa4/Transforms/MaskAnalysis.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include <functional>
#include <limits>
#include <random>

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::fa4;

namespace {

using Predicate = std::function<bool(int64_t q, int64_t kv)>;

class MaskAnalysisTest : public ::testing::Test {
protected:
  MaskAnalysisTest() {
    DialectRegistry registry;
    registerTileLevelDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// Analyses a mask_mod body whose arguments are %b, %h, %i (q_idx), %j
  /// (kv_idx) and %doc (an extra of document ids).
  MaskModBounds analyze(const std::string &body) {
    std::string text = R"(
      func.func @f(%q: memref<?x?x4x64xf16>, %k: memref<?x?x2x64xf16>,
                   %v: memref<?x?x2x64xf16>, %o: memref<?x?x4x64xf16>,
                   %docs: memref<?xi32>) {
        fa4.attention %q, %k, %v -> %o extras(%docs : memref<?xi32>)
            : memref<?x?x4x64xf16>, memref<?x?x2x64xf16>,
              memref<?x?x2x64xf16> -> memref<?x?x4x64xf16>
        mask_mod {
        ^bb0(%b: index, %h: index, %i: index, %j: index, %doc: memref<?xi32>):
          %true = arith.constant true
    )" + body + R"(
        }
        return
      })";
    module = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(module) << text;
    if (!module)
      return {};
    AttentionOp op;
    module->walk([&](AttentionOp found) { op = found; });
    return analyzeMaskMod(op.getMaskMod());
  }

  /// Checks every block of every task at many sizes against `visible`.
  void check(const MaskModBounds &analysis, const Predicate &visible,
             bool expectExact) {
    EXPECT_EQ(analysis.exact, expectExact);
    for (int64_t seqQ : {1, 7, 40, 97})
      for (int64_t seqK : {1, 9, 40, 101})
        for (int64_t ratio : {1, 2, 4})
          for (int64_t blockN : {4, 16})
            for (int64_t rows : {8, 32})
              for (int64_t rowBegin = 0; rowBegin < seqQ * ratio; rowBegin += rows)
                checkTask(analysis, visible, seqQ, seqK, ratio, blockN, rows,
                          rowBegin);
  }

  void checkTask(const MaskModBounds &analysis, const Predicate &visible,
                 int64_t seqQ, int64_t seqK, int64_t ratio, int64_t blockN,
                 int64_t rows, int64_t rowBegin) {
    KvBlockRange range = kvBlockRange(analysis.bounds, rowBegin, rows, ratio,
                                      blockN, seqQ, seqK, analysis.exact);
    ASSERT_LE(range.begin, range.fullBegin);
    ASSERT_LE(range.fullBegin, range.fullEnd);
    ASSERT_LE(range.fullEnd, range.end);
    int64_t firstPos = rowBegin / ratio;
    int64_t lastPos = std::min(seqQ - 1, (rowBegin + rows - 1) / ratio);
    int64_t firstVisible = std::numeric_limits<int64_t>::max(), lastVisible = -1;
    for (int64_t q = firstPos; q <= lastPos; ++q)
      for (int64_t kv = 0; kv < seqK; ++kv)
        if (visible(q, kv)) {
          firstVisible = std::min(firstVisible, kv / blockN);
          lastVisible = std::max(lastVisible, kv / blockN);
        }
    for (int64_t block = 0; block * blockN < seqK; ++block) {
      bool any = false, all = true;
      for (int64_t q = firstPos; q <= lastPos; ++q)
        for (int64_t kv = block * blockN; kv < (block + 1) * blockN; ++kv) {
          bool sees = kv < seqK && visible(q, kv);
          any |= sees;
          all &= sees;
        }
      bool visited = block >= range.begin && block < range.end;
      bool whole = block >= range.fullBegin && block < range.fullEnd;
      std::string where = "seq_q " + std::to_string(seqQ) + " seq_k " +
                          std::to_string(seqK) + " ratio " +
                          std::to_string(ratio) + " block_n " +
                          std::to_string(blockN) + " rows [" +
                          std::to_string(rowBegin) + ", +" +
                          std::to_string(rows) + ") block " +
                          std::to_string(block);
      ASSERT_TRUE(!any || visited) << "a visible block is skipped: " << where;
      ASSERT_TRUE(!whole || all) << "a partial block is called whole: " << where;
      if (analysis.exact) {
        // The loop visits one contiguous range: exact means the hull of the
        // blocks holding a visible key. The first/last-row formulas reach it
        // unless a row's own bounds cross (lower > upper before clamping to
        // the sequence), which no named mask does; random formulas may.
        bool inHull = block >= firstVisible && block <= lastVisible;
        if (!crossedRow(analysis, firstPos, lastPos, seqQ, seqK) ||
            strictRows) {
          ASSERT_EQ(visited, inHull) << "the range is not the hull of the "
                                        "visible blocks: " << where;
          ASSERT_EQ(whole, all) << "a whole block is masked: " << where;
        }
      }
    }
  }

  /// Whether some row's bounds cross before clamping (it sees nothing for a
  /// reason the monotone bounds cannot trim).
  static bool crossedRow(const MaskModBounds &analysis, int64_t firstPos,
                         int64_t lastPos, int64_t seqQ, int64_t seqK) {
    if (!analysis.bounds.lower || !analysis.bounds.upper)
      return false;
    for (int64_t q = firstPos; q <= lastPos; ++q)
      if (analysis.bounds.lower->evaluate(q, seqQ, seqK) >
          analysis.bounds.upper->evaluate(q, seqQ, seqK))
        return true;
    return false;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  /// The named masks never cross a row: hold them to the hull whatever the
  /// bounds say.
  bool strictRows = true;
};

TEST_F(MaskAnalysisTest, Causal) {
  check(analyze(R"(%m = arith.cmpi ule, %j, %i : index
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q; }, true);
  // The same written the other way round, and as a negation.
  check(analyze(R"(%m = arith.cmpi sge, %i, %j : index
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q; }, true);
  check(analyze(R"(%f = arith.cmpi sgt, %j, %i : index
                   %m = arith.xori %f, %true : i1
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q; }, true);
}

TEST_F(MaskAnalysisTest, SlidingWindow) {
  check(analyze(R"(%c = arith.cmpi ule, %j, %i : index
                   %d = arith.subi %i, %j : index
                   %w = arith.constant 13 : index
                   %n = arith.cmpi slt, %d, %w : index
                   %m = arith.andi %c, %n : i1
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q && q - kv < 13; }, true);
  // Both sides, offset: q - 5 <= kv <= q + 3.
  check(analyze(R"(%c5 = arith.constant 5 : index
                   %c3 = arith.constant 3 : index
                   %lo = arith.subi %i, %c5 : index
                   %hi = arith.addi %i, %c3 : index
                   %a = arith.cmpi sle, %lo, %j : index
                   %b2 = arith.cmpi sle, %j, %hi : index
                   %m = arith.andi %a, %b2 : i1
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return q - 5 <= kv && kv <= q + 3; }, true);
}

TEST_F(MaskAnalysisTest, PrefixLm) {
  check(analyze(R"(%c = arith.cmpi sle, %j, %i : index
                   %p = arith.constant 21 : index
                   %in = arith.cmpi slt, %j, %p : index
                   %m = arith.ori %c, %in : i1
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q || kv < 21; }, true);
}

TEST_F(MaskAnalysisTest, Chunked) {
  check(analyze(R"(%c = arith.constant 12 : index
                   %qc = arith.divui %i, %c : index
                   %kc = arith.divui %j, %c : index
                   %m = arith.cmpi eq, %qc, %kc : index
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return q / 12 == kv / 12; }, true);
  // Chunked and causal (local attention), with the chunk's start multiplied
  // out.
  check(analyze(R"(%c = arith.constant 16 : index
                   %qc = arith.divsi %i, %c : index
                   %start = arith.muli %qc, %c : index
                   %a = arith.cmpi sge, %j, %start : index
                   %b2 = arith.cmpi sle, %j, %i : index
                   %m = arith.andi %a, %b2 : i1
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv >= q / 16 * 16 && kv <= q; },
        true);
}

TEST_F(MaskAnalysisTest, DataDependent) {
  // Document masking: not affine, evaluated per element, never skipped.
  check(analyze(R"(%qd = memref.load %doc[%i] : memref<?xi32>
                   %kd = memref.load %doc[%j] : memref<?xi32>
                   %m = arith.cmpi eq, %qd, %kd : i32
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return q / 10 == kv / 10; }, false);
  // Anded with causal: the causal part still skips blocks.
  MaskModBounds documentCausal =
      analyze(R"(%qd = memref.load %doc[%i] : memref<?xi32>
                 %kd = memref.load %doc[%j] : memref<?xi32>
                 %same = arith.cmpi eq, %qd, %kd : i32
                 %c = arith.cmpi ule, %j, %i : index
                 %m = arith.andi %same, %c : i1
                 fa4.yield %m : i1)");
  ASSERT_TRUE(documentCausal.bounds.upper.has_value());
  check(documentCausal,
        [](int64_t q, int64_t kv) { return kv <= q && q / 7 == kv / 7; },
        false);
  // A predicate on the head, and an unsigned difference that can wrap.
  check(analyze(R"(%c = arith.constant 1 : index
                   %m = arith.cmpi eq, %h, %c : index
                   fa4.yield %m : i1)"),
        [](int64_t, int64_t) { return true; }, false);
  check(analyze(R"(%d = arith.subi %i, %j : index
                   %w = arith.constant 9 : index
                   %m = arith.cmpi ult, %d, %w : index
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return q - kv >= 0 && q - kv < 9; }, false);
}

// Widths: a zero-extended i1 is +1, a narrow type wraps positions, and a
// zero-extended difference is not the difference. The analysis must not
// read any of them as a plain affine form.
TEST_F(MaskAnalysisTest, IntegerWidths) {
  // kv <= q + 1 written with an unsigned cast of true: bounds may over-
  // approximate, but never drop a key.
  check(analyze(R"(%one = arith.index_castui %true : i1 to index
                   %hi = arith.addi %i, %one : index
                   %m = arith.cmpi sle, %j, %hi : index
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return kv <= q + 1; }, false);
  // Comparing positions truncated to i8.
  check(analyze(R"(%q8 = arith.index_cast %i : index to i8
                   %k8 = arith.index_cast %j : index to i8
                   %m = arith.cmpi sle, %k8, %q8 : i8
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) { return int8_t(kv) <= int8_t(q); }, false);
  // The unsigned-window idiom: (q - kv) as unsigned < 4 is 0 <= q - kv < 4.
  check(analyze(R"(%d = arith.subi %i, %j : index
                   %d32 = arith.index_cast %d : index to i32
                   %du = arith.extui %d32 : i32 to i64
                   %c4 = arith.constant 4 : i64
                   %m = arith.cmpi slt, %du, %c4 : i64
                   fa4.yield %m : i1)"),
        [](int64_t q, int64_t kv) {
          return uint64_t(uint32_t(int32_t(q - kv))) < 4;
        },
        false);
}

// Shared subexpressions are analysed once: 48 doublings of one comparison
// would take 2^48 steps otherwise.
TEST_F(MaskAnalysisTest, SharedSubexpressions) {
  std::string body = "%p0 = arith.cmpi ule, %j, %i : index\n";
  for (int n = 0; n < 48; ++n)
    body += "%p" + std::to_string(n + 1) + " = arith.andi %p" +
            std::to_string(n) + ", %p" + std::to_string(n) + " : i1\n";
  body += "fa4.yield %p48 : i1";
  check(analyze(body), [](int64_t q, int64_t kv) { return kv <= q; }, true);
}

TEST_F(MaskAnalysisTest, Constants) {
  check(analyze("fa4.yield %true : i1"),
        [](int64_t, int64_t) { return true; }, true);
  check(analyze(R"(%false = arith.constant false
                   fa4.yield %false : i1)"),
        [](int64_t, int64_t) { return false; }, true);
}

/// Random formulas over the atoms the analysis reads: every block decision
/// stays sound, and where the analysis claims exactness, exact.
TEST_F(MaskAnalysisTest, RandomFormulas) {
  std::mt19937 random(7);
  struct Formula {
    std::string ir;
    std::string value;
    Predicate eval;
  };
  int counter = 0;
  auto fresh = [&]() { return "%v" + std::to_string(counter++); };
  std::function<Formula(int)> make = [&](int depth) -> Formula {
    int kind = depth == 0 ? random() % 3 : random() % 6;
    if (kind < 3) {
      // An atom: kv ⋈ q + c, kv ⋈ c, or kv / C ⋈ q / C + c.
      static const char *names[] = {"slt", "sle", "sgt", "sge", "eq"};
      int predicate = random() % 5;
      int64_t c = static_cast<int64_t>(random() % 21) - 10;
      int64_t chunk = 3 + random() % 9;
      std::string cv = fresh(), rhs = fresh(), lhs = "%j", cmp = fresh();
      std::string ir = cv + " = arith.constant " + std::to_string(c) + " : index\n";
      std::function<int64_t(int64_t)> right;
      std::function<int64_t(int64_t)> left = [](int64_t kv) { return kv; };
      if (kind == 0) {
        ir += rhs + " = arith.addi %i, " + cv + " : index\n";
        right = [c](int64_t q) { return q + c; };
      } else if (kind == 1) {
        rhs = cv;
        right = [c](int64_t) { return c; };
      } else {
        std::string chunkValue = fresh(), qc = fresh(), kc = fresh();
        ir += chunkValue + " = arith.constant " + std::to_string(chunk) + " : index\n" +
              qc + " = arith.divui %i, " + chunkValue + " : index\n" +
              kc + " = arith.divui %j, " + chunkValue + " : index\n" +
              rhs + " = arith.addi " + qc + ", " + cv + " : index\n";
        lhs = kc;
        right = [c, chunk](int64_t q) { return q / chunk + c; };
        left = [chunk](int64_t kv) { return kv / chunk; };
      }
      ir += cmp + " = arith.cmpi " + names[predicate] + ", " + lhs + ", " + rhs +
            " : index\n";
      Predicate eval = [=](int64_t q, int64_t kv) {
        int64_t a = left(kv), b = right(q);
        switch (predicate) {
        case 0: return a < b;
        case 1: return a <= b;
        case 2: return a > b;
        case 3: return a >= b;
        default: return a == b;
        }
      };
      return {ir, cmp, eval};
    }
    Formula a = make(depth - 1);
    if (kind == 5) {
      std::string value = fresh();
      Predicate inner = a.eval;
      return {a.ir + value + " = arith.xori " + a.value + ", %true : i1\n",
              value, [inner](int64_t q, int64_t kv) { return !inner(q, kv); }};
    }
    Formula b = make(depth - 1);
    std::string value = fresh();
    bool conjunction = kind == 3;
    Predicate x = a.eval, y = b.eval;
    return {a.ir + b.ir + value + (conjunction ? " = arith.andi " : " = arith.ori ") +
                a.value + ", " + b.value + " : i1\n",
            value, [=](int64_t q, int64_t kv) {
              return conjunction ? x(q, kv) && y(q, kv) : x(q, kv) || y(q, kv);
            }};
  };
  int exact = 0;
  strictRows = false;
  for (int trial = 0; trial < 60; ++trial) {
    Formula formula = make(2);
    MaskModBounds analysis =
        analyze(formula.ir + "fa4.yield " + formula.value + " : i1");
    exact += analysis.exact;
    SCOPED_TRACE(formula.ir);
    for (int64_t seqQ : {5, 40})
      for (int64_t seqK : {9, 40})
        for (int64_t ratio : {1, 2})
          for (int64_t rowBegin = 0; rowBegin < seqQ * ratio; rowBegin += 8)
            checkTask(analysis, formula.eval, seqQ, seqK, ratio, 4, 8, rowBegin);
  }
  // The formulas are not all unreadable: some are exact.
  EXPECT_GT(exact, 5);
}

} // namespace
