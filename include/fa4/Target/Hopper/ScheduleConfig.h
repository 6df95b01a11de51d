//===- ScheduleConfig.h - the Hopper schedule's configuration --*- C++ -*-===//
//
// Decided once, from the head dim and element type: the warpgroup roles and
// their register budgets, and the K/V stages that fit in shared memory.
// fa4-hopper-warpgroup-roles reads it; the unit tests pin it.
//
//===----------------------------------------------------------------------===//

#ifndef FA4_TARGET_HOPPER_SCHEDULECONFIG_H
#define FA4_TARGET_HOPPER_SCHEDULECONFIG_H

#include "fa4/Target/Target.h"
#include "fa4/Transforms/RoleSpec.h"

#include <algorithm>

namespace mlir::fa4::hopper {

namespace role {
constexpr llvm::StringLiteral kProducer = "producer";
constexpr llvm::StringLiteral kConsumer0 = "consumer0";
constexpr llvm::StringLiteral kConsumer1 = "consumer1";
constexpr llvm::StringLiteral kConsumer2 = "consumer2";
} // namespace role

struct ScheduleConfig {
  /// Consumer warpgroups, each with 64 rows of the task's Q tile (one
  /// wgmma row block): two of a 128-row tile (the backward's always), or
  /// three of a 192-row one (`consumers`).
  static constexpr int64_t kConsumers = 2;
  static constexpr int64_t kMaxConsumers = 3;
  static constexpr int64_t kRowsPerConsumer = 64;
  /// The forward's consumers: the task's Q tile rows / 64.
  int64_t consumers = kConsumers;
  int64_t qRows() const { return consumers * kRowsPerConsumer; }
  /// Shared memory a Hopper CTA may use, and what the barriers keep.
  static constexpr int64_t kSmemLimit =
      target::info(target::Chip::Sm90a).smemBytesPerCta;
  static constexpr int64_t kBarrierBytes = 1024;
  /// Deeper K/V rings than this buy nothing once loads run ahead.
  static constexpr int64_t kMaxKvStages = 4;

  /// Q and K's head dim, and V and O's.
  int64_t headDim = 128;
  int64_t valueHeadDim = 128;
  /// Bytes of Q, K and V's elements (1 for FP8), and of O's (its
  /// staging's).
  int64_t elementBytes = 2;
  int64_t outElementBytes = 2;
  /// Keys of a K/V block (level B's `block_n`; defaultBlockN's unless the
  /// tile pass was told otherwise).
  int64_t blockN = 128;
  int64_t kvStagesOverride = 0;
  /// O goes out through 64-row staging parts (a consumer's each) and TMA
  /// stores; without
  /// them each consumer writes its O tile from registers, row by row (the
  /// schedule of head dims (192, 128), whose staging would leave the K/V
  /// ring one stage).
  bool oStaged = true;
  /// The consumers' intra-warpgroup overlap (FlashAttention-3's): S of the
  /// next block and O += P·V of the last run on the tensor core during the
  /// softmax. It keeps S, the previous P and O live at once, and fits the
  /// consumers' 232 registers in every variant of two consumers, so `auto`
  /// turns it on (three consumers' 160 spill in a few corners:
  /// docs/Hopper.md, "Three consumer warpgroups").
  /// Windows at head dim 128 and (192, 128) beside a paged cache or a
  /// split-KV part were the last exception (ptxas spilled 8-24 bytes while
  /// a window's masked blocks shared the loop of the whole ones). With loops
  /// of their own the consumers store nothing to local memory in any of 192
  /// such variants (pages 16, 64, 256, 2, 4 and 16 parts, GQA 1 and 4, both
  /// dtypes, windows (256, 0), (1024, 0), (1000, 200); CUDA 13's ptxas);
  /// page-16 kernels spill 16-52 bytes in the producer under either loop.
  /// On the H200 the overlapped loop is 0.99-1.17x the sequential one's
  /// speed there (14 pairs, decode 1 x 1..128 x 16k and prefill 4 x 4k;
  /// run 43, docs/Hopper.md "Sliding windows").
  bool overlap = true;
  /// The consumers take turns issuing their MMAs (FlashAttention-3's
  /// ping-pong, a named barrier each, round robin); with the overlapped
  /// loop only.
  bool pingpong = true;
  static constexpr int64_t kThreadsPerRole = 128;

  /// The FA3 cast: a producer warpgroup (its elected thread issues TMA)
  /// giving its registers to two consumer warpgroups (three below). setmaxnreg only moves
  /// registers within what the CTA was given at launch, 168 per thread of
  /// 384 (64 512): 40 + 2 · 232 per thread of 128 is exactly that (a
  /// consumer asking for more would wait forever). FA3's producer keeps 24
  /// for consumers of 240, but this one also walks the LPT order and the
  /// window's block range (24 spills there). Three consumers (a 192-row
  /// tile, 512 threads, 128 registers each at launch) get FlashAttention-3's
  /// 160 beside a producer of 32: 32 + 3 · 160 is the 512. At 152 beside 40
  /// the overlapped hd64 consumer spilled 240 bytes (128-key blocks, causal
  /// GQA 2 with the LSE); at 160 none does, nor the producer at 32.
  llvm::ArrayRef<RoleSpec> roles() const {
    static const RoleSpec kTwo[] = {
        {role::kProducer, 0, 4, 40},
        {role::kConsumer0, 4, 4, 232},
        {role::kConsumer1, 8, 4, 232},
    };
    static const RoleSpec kThree[] = {
        {role::kProducer, 0, 4, 32},
        {role::kConsumer0, 4, 4, 160},
        {role::kConsumer1, 8, 4, 160},
        {role::kConsumer2, 12, 4, 160},
    };
    if (consumers == 3)
      return kThree;
    return kTwo;
  }
  /// Which consumer (0, 1, 2) a role of roles() is, -1 for the producer.
  static int64_t consumerIndex(const RoleSpec &role) {
    return role.name == role::kProducer ? -1 : role.firstWarp / 4 - 1;
  }
  /// The backward's cast: its producer only loads (no LPT order, no key
  /// range), so it keeps FA3's 24 registers and the consumers, which hold
  /// dK and dV beside the step's tiles, get 240 (24 + 2 · 240 per thread of
  /// 128 is the launch's 64 512 again).
  static llvm::ArrayRef<RoleSpec> backwardRoles() {
    static const RoleSpec kRoles[] = {
        {role::kProducer, 0, 4, 24},
        {role::kConsumer0, 4, 4, 240},
        {role::kConsumer1, 8, 4, 240},
    };
    return kRoles;
  }

  /// One [rows, cols] tile (128 rows: Q's, O's), rows padded to whole
  /// 128-byte swizzle lines.
  int64_t tileBytes(int64_t cols, int64_t bytes = 0, int64_t rows = 128) const {
    return rows * ((cols * (bytes ? bytes : elementBytes) + 127) / 128 * 128);
  }
  /// A stage of the K ring and of the V ring: block_n keys each. An 8-bit
  /// V stage is V transposed, V's head dim in rows of block_n keys padded
  /// to whole 128-key lines (192 keys take the room of 256).
  int64_t kvPairBytes() const {
    int64_t v = elementBytes == 1 ? tileBytes(blockN, 1, valueHeadDim)
                                  : tileBytes(valueHeadDim, 0, blockN);
    return tileBytes(headDim, 0, blockN) + v;
  }
  /// Q (one stage) and the consumers' 64-row O staging parts.
  int64_t fixedSmemBytes() const {
    return tileBytes(headDim, 0, qRows()) +
           (oStaged ? tileBytes(valueHeadDim, outElementBytes, qRows()) : 0) +
           kBarrierBytes;
  }
  /// O is staged unless the staging leaves the K/V ring a single stage and
  /// more are wanted (`requested`, or as many as fit when 0): then each
  /// consumer writes O by address. So (192, 128) writes O by address with
  /// two stages, and with kv-stages=1 stages it; head dims whose staged
  /// ring already has two stages always stage.
  void chooseOStaging(int64_t requested = 0) {
    oStaged = true;
    if (maxKvStages() >= 2 || (requested > 0 && requested <= maxKvStages()))
      return;
    oStaged = false;
  }
  /// K and V stages that fit beside them (one at head dims (192, 128)).
  int64_t maxKvStages() const {
    return std::min(kMaxKvStages,
                    (kSmemLimit - fixedSmemBytes()) / kvPairBytes());
  }
  int64_t kvStages() const {
    return kvStagesOverride > 0 ? kvStagesOverride : maxKvStages();
  }

  /// The K/V block a schedule at these head dims takes by default: the
  /// widest multiple of 16 keys up to 128 whose ring holds two stages (O
  /// staged if it still does, else by address). 128 for every head dim but
  /// 256: 80 there ((256, 256): Q 64 KB and two 80 KB pairs; 96 at (256,
  /// 128)) — FlashAttention-3's hd256 block is 80 keys too, and a
  /// consumer's O of 128 registers leaves room for S of 80 and its P.
  /// FP8 with V's head dim 256: 64, where shared memory would hold 128 —
  /// a consumer's O (128 registers) beside S of more keys spills (16 bytes
  /// causal at 96, 96-244 at 128; CUDA 13's ptxas); (256, 128) and
  /// (256, 64) take 128 without a spill.
  /// FP8 at head dim 128: 192 keys. Per tile its MMAs take half of
  /// bf16's time while the softmax's steps stay as many; 1.5 × the scores
  /// per tile for the same per-tile steps gained 6–15 % at 4k–16k tokens on
  /// the H200 and lost 6–9 % at 16 × 1k (run 47; 160 and 224 did no
  /// better; FlashAttention-3's FP8 tile is 224 keys).
  static int64_t defaultBlockN(int64_t headDim, int64_t valueHeadDim,
                               int64_t elementBytes) {
    if (elementBytes == 1 && valueHeadDim > 128)
      return 64;
    if (elementBytes == 1 && headDim == 128 && valueHeadDim == 128)
      return 192;
    return std::max<int64_t>(
        16, widestBlockN(headDim, valueHeadDim, elementBytes, 2, 128));
  }
  /// The widest multiple of 16 keys up to `limit` whose ring holds
  /// `stages` K/V stages (O staged if it still does), 0 if none.
  static int64_t widestBlockN(int64_t headDim, int64_t valueHeadDim,
                              int64_t elementBytes, int64_t stages,
                              int64_t limit) {
    for (int64_t blockN = limit; blockN >= 16; blockN -= 16) {
      ScheduleConfig config = get(headDim, elementBytes, valueHeadDim, blockN);
      config.chooseOStaging();
      if (config.maxKvStages() >= stages)
        return blockN;
    }
    return 0;
  }

  static ScheduleConfig get(int64_t headDim, int64_t elementBytes,
                            int64_t valueHeadDim = 0, int64_t blockN = 128) {
    ScheduleConfig config;
    config.blockN = blockN;
    config.headDim = headDim;
    config.valueHeadDim = valueHeadDim > 0 ? valueHeadDim : headDim;
    config.elementBytes = elementBytes;
    return config;
  }
};

} // namespace mlir::fa4::hopper

#endif // FA4_TARGET_HOPPER_SCHEDULECONFIG_H
