#!/usr/bin/env python3
"""The SASS instruction budget of fa4's kernels, per role and per KV tile.

For each cubin (or each variant it compiles with fa4c) this disassembles the
kernel with cuobjdump, rebuilds its control-flow graph, finds the loops, and
counts the SASS instructions one thread of each role executes per KV tile:
static counts along the tile loop's body, inner loops multiplied by their
trip counts, mbarrier spin loops counted once (the barrier is ready).
Softmax tiles are reported twice: unmasked (the path that skips every
masking block) and masked (the path through the masking block).

It then estimates, per SM sub-partition (SMSP), the issue slots one KV tile
costs: the 16 warps spread over 4 SMSPs (warp w on SMSP w % 4), so each SMSP
issues one warp of softmax0, one of softmax1, one of correction and one of
the single-warp roles; MUFU (4 lanes per SMSP: 8 cycles per warp instruction)
and the FMA pipe are checked as well. Beside it: the tensor core's cycles for
the same tile (4096 dense f16/bf16 FMAs per cycle per SM).

For Hopper kernels (--target sm_90a) the roles are the FA3-style ones: a
producer warpgroup (one elected thread issues TMA) and two consumer
warpgroups of 64 rows each, whose per-KV-tile loop holds the wgmma groups
and the softmax. Each SMSP issues one warp of each consumer and one of the
producer; MUFU (4 lanes per SMSP: 8 cycles per warp instruction) and the
FMA pipe (32 lanes per SMSP: a cycle per warp instruction) are checked as
well; beside them the tensor core's cycles for the CTA's 128 rows (2048
dense f16/bf16 FMAs per cycle per SM: 989 TFLOP/s on an H100 SXM's 132
SMs at 1.83 GHz). The consumers' longest path per tile includes O's
rescale, which the threshold makes rare; the shortest is the steady state.
Foreign cubins (FlashAttention-4's Hopper forward, built ahead of time by
bench/fa4_reference_backward.py --forward) name their roles' warps with
--roles (producer, consumer): their per-tile loops are the innermost loops
of each role (a non-persistent kernel has no task loop; masked tiles may
have loops of their own), the tile's M is 64 rows per consumer warpgroup,
the tensor core's cycles come from the HGMMA shapes, and each SMSP issues
every role's warps that sit on it.

For the backward (--backward, Blackwell) the roles are the grad warps
(MUFU.EX2: P from the LSE, dS), the dQ warps (dQ out of TMEM), the MMA warp
(UTCHMMA) and the load warp (UTMALDG); the per-tile loop is one K/V block's
step over 128 query rows. Beside the SASS per role and the per-SMSP issue
and MUFU cycles, it estimates the tile's shared-memory traffic, the bound
FlashAttention-4's backward is designed around: the MMAs' operand reads
(each UTCHMMA's instruction descriptor, from the UMOV that sets it, gives M
and N; K is 16; an operand from TMEM reads no SMEM), every role's LDS/STS
bytes, the TMA/bulk writes of the step's Q, dO, LSE and delta, and a bulk
reduction's read of what the dQ warps staged — at 128 bytes per cycle per
SM — against the tensor core's cycles (4096 dense f16/bf16 FMAs per cycle).
Foreign cubins (FlashAttention-4's, built ahead of time) name their roles'
warps with --roles.

Run by hand (it is a measurement, not a test):

  python3 bench/sass_budget.py --fa4c build/bin/fa4c --matrix
  python3 bench/sass_budget.py --fa4c build/bin/fa4c --matrix --target sm_90a
  python3 bench/sass_budget.py kernel.cubin --head-dim 128 [--target sm_90a]
  python3 bench/sass_budget.py --target sm_90a OUT/hd128-none/main.cubin \\
      --roles producer=0-3,consumer=4-11   # OUT from fa4_reference_backward.py --forward
  python3 bench/sass_budget.py --fa4c build/bin/fa4c --backward --matrix \
      [--reference OUT]   # OUT from bench/fa4_reference_backward.py
  python3 bench/sass_budget.py --backward main.cubin --head-dim 128 \
      --roles dq=0-3,grad=4-11,mma=12,load=13
"""

import argparse
import collections
import datetime
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

INSTRUCTION = re.compile(
    r"^\s+/\*([0-9a-f]+)\*/\s+(?:(@!?U?P[0-9T])\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")

# SASS opcodes by the unit that executes them (Blackwell; coarse).
UNITS = [
    ("MUFU", re.compile(r"^MUFU")),
    ("TMEM", re.compile(r"^(LDTM|STTM|UTC)")),
    ("FMA", re.compile(r"^(FFMA|FADD|FMUL|HFMA|HADD|HMUL|IMAD|IDP|FMNMX)")),
    ("SYNC", re.compile(r"^(SYNCS|BAR|MEMBAR|FENCE|WARPSYNC|NANOSLEEP|DEPBAR|"
                        r"ELECT|VOTE|UTMA|ERRBAR|CCTL|UCGABAR)")),
    ("MEM", re.compile(r"^(LD|ST|ATOM|RED|UBLKCP)")),
    ("CTRL", re.compile(r"^(BRA|BSSY|BSYNC|EXIT|RET|CALL|YIELD|NOP|BREAK|BPT|"
                        r"WARPSYNC|KILL|JMP)")),
]


def unit_of(opcode):
    for name, pattern in UNITS:
        if pattern.match(opcode):
            return name
    return "ALU"


class Inst:
    def __init__(self, addr, pred, opcode, operands):
        self.addr, self.pred, self.opcode, self.operands = addr, pred, opcode, operands

    def branch_target(self):
        if not self.opcode.startswith("BRA"):
            return None
        m = re.search(r"0x([0-9a-f]+)\s*$", self.operands)
        return int(m.group(1), 16) if m else None

    def conditional(self):
        if self.pred and self.pred not in ("@PT",):
            return True
        # BRA.U UP0, target: a uniform predicate operand.
        return bool(re.match(r"!?U?P[0-9]\s*,", self.operands))


def disassemble(cuobjdump, cubin):
    """The SASS of the cubin's largest function (the main kernel: a
    backward cubin also holds its two small ones, at overlapping
    addresses)."""
    if not os.path.isfile(cubin):
        sys.exit(f"sass_budget: no such file: {cubin}")
    done = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"sass_budget: cuobjdump cannot read {cubin}: "
                 f"{(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}")
    functions = [[]]
    for line in done.stdout.splitlines():
        if line.strip().startswith("Function :"):
            functions.append([])
            continue
        m = INSTRUCTION.match(line)
        if m:
            functions[-1].append(Inst(int(m.group(1), 16), m.group(2), m.group(3),
                                      m.group(4).strip()))
    insts = max(functions, key=len)
    if not insts:
        sys.exit(f"sass_budget: no SASS in {cubin}")
    return insts


class Cfg:
    """Basic blocks, edges, dominators and natural loops of the kernel."""

    def __init__(self, insts):
        self.insts = insts
        index = {inst.addr: i for i, inst in enumerate(insts)}
        leaders = {0}
        for i, inst in enumerate(insts):
            target = inst.branch_target()
            ends = target is not None or inst.opcode.startswith(("EXIT", "RET"))
            if target is not None and target in index:
                leaders.add(index[target])
            if ends and i + 1 < len(insts):
                leaders.add(i + 1)
        starts = sorted(leaders)
        self.blocks = []  # (first, last) instruction indices, inclusive
        for n, first in enumerate(starts):
            last = (starts[n + 1] if n + 1 < len(starts) else len(insts)) - 1
            self.blocks.append((first, last))
        block_of = {first: n for n, (first, _) in enumerate(self.blocks)}
        self.succ = [[] for _ in self.blocks]
        for n, (first, last) in enumerate(self.blocks):
            inst = insts[last]
            target = inst.branch_target()
            falls = n + 1 < len(self.blocks)
            if target is not None:
                if target in index:
                    self.succ[n].append(block_of[index[target]])
                falls = falls and inst.conditional()
            elif inst.opcode.startswith(("EXIT", "RET")):
                falls = falls and inst.pred is not None
            if falls:
                self.succ[n].append(n + 1)
        self.pred = [[] for _ in self.blocks]
        for n, targets in enumerate(self.succ):
            for t in targets:
                self.pred[t].append(n)
        self._dominators()
        self._loops()

    def _dominators(self):
        # Iterative data flow over reverse post order.
        order, seen = [], set()
        stack = [(0, iter(self.succ[0]))]
        seen.add(0)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(node)
                stack.pop()
            elif nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(self.succ[nxt])))
        rpo = list(reversed(order))
        position = {n: i for i, n in enumerate(rpo)}
        idom = {0: 0}

        def intersect(a, b):
            while a != b:
                while position[a] > position[b]:
                    a = idom[a]
                while position[b] > position[a]:
                    b = idom[b]
            return a
        changed = True
        while changed:
            changed = False
            for n in rpo[1:]:
                preds = [p for p in self.pred[n] if p in idom]
                if not preds:
                    continue
                new = preds[0]
                for p in preds[1:]:
                    new = intersect(p, new)
                if idom.get(n) != new:
                    idom[n] = new
                    changed = True
        self.idom = idom
        self.reachable = set(idom)

    def dominates(self, a, b):
        while True:
            if a == b:
                return True
            if b == 0 or b not in self.idom:
                return False
            b = self.idom[b]

    def _loops(self):
        bodies = collections.defaultdict(set)
        self.back_edges = set()
        for n in self.reachable:
            for h in self.succ[n]:
                if self.dominates(h, n):
                    self.back_edges.add((n, h))
                    body = {h}
                    work = [n]
                    while work:
                        x = work.pop()
                        if x not in body:
                            body.add(x)
                            work.extend(self.pred[x])
                    bodies[h] |= body
        self.loops = dict(bodies)  # header -> body

    def size(self, n):
        first, last = self.blocks[n]
        return last - first + 1

    def block_insts(self, n):
        first, last = self.blocks[n]
        return self.insts[first:last + 1]

    def loop_insts(self, header):
        for n in sorted(self.loops[header]):
            yield from self.block_insts(n)


def is_spin(cfg, header):
    """An mbarrier wait loop: small, polls a barrier."""
    insts = list(cfg.loop_insts(header))
    return len(insts) <= 24 and any(
        i.opcode.startswith("SYNCS.PHASECHK") or "TRYWAIT" in i.opcode for i in insts)


def has(insts, prefix):
    return any(i.opcode.startswith(prefix) for i in insts)


def trip_count(cfg, header):
    """An inner loop's trip count from its exit test: the latch branches on
    a predicate set by comparing a counter with an immediate K (ISETP /
    UISETP), the counter stepping by an immediate S; the counter starts at 0
    (fa4's loops do), so the loop runs K / S times. None when the pattern is
    not there."""
    body = cfg.loops[header]
    latches = [n for (n, h) in cfg.back_edges if h == header]
    if len(latches) != 1:
        return None
    branch = cfg.block_insts(latches[0])[-1]
    m = re.match(r"(!?)(U?P[0-9])\s*,", branch.operands)
    pred = m.group(2) if m else (branch.pred or "").lstrip("@!")
    if not pred:
        return None
    insts = [i for n in sorted(body) for i in cfg.block_insts(n)]
    compare = None
    for i in insts:
        if re.match(r"U?ISETP", i.opcode) and i.operands.startswith(pred + ","):
            compare = i
    if compare is None:
        return None
    parts = [x.strip() for x in compare.operands.split(",")]
    if len(parts) < 4 or not re.fullmatch(r"-?0x[0-9a-f]+|-?[0-9]+", parts[3]):
        return None
    counter, limit = parts[2], int(parts[3], 0)
    step = None
    for i in insts:
        ops = [x.strip() for x in i.operands.split(",")]
        if i.opcode.startswith(("UIADD3", "IADD3")) and len(ops) >= 5 and \
                ops[0] == counter and ops[3] == counter:
            step = int(ops[4], 0) if re.fullmatch(r"-?0x[0-9a-f]+|-?[0-9]+", ops[4]) else None
        elif i.opcode.startswith(("VIADD", "UIADD")) and len(ops) == 3 and \
                ops[0] == counter and ops[1] == counter:
            step = int(ops[2], 0) if re.fullmatch(r"-?0x[0-9a-f]+|-?[0-9]+", ops[2]) else None
    if not step or limit % step or limit // step <= 0:
        return None
    return limit // step


def is_mask_block(insts):
    """A block of the masked-tile branch: many selects of -inf."""
    return sum(1 for i in insts if i.opcode.startswith("FSEL") and "-INF" in i.operands) >= 16


unknown_trips = []


def tile_paths(cfg, header, trips):
    """Instruction counts along one iteration of the loop at `header`:
    (unmasked path, masked path or None), each a Counter of opcodes. Inner
    spin loops count once; other inner loops count trips[header] times."""
    body = cfg.loops[header]
    inner = [h for h in cfg.loops if h != header and h in body]
    # Collapse each outermost inner loop into its header.
    owner = {}
    for h in sorted(inner, key=lambda h: -len(cfg.loops[h])):
        for n in cfg.loops[h]:
            owner.setdefault(n, h)
    def node(n):
        return owner.get(n, n)
    def cost(n):
        if n in cfg.loops and n != header:
            insts = list(cfg.loop_insts(n))
            if is_spin(cfg, n):
                times = 1
            else:
                times = trip_count(cfg, n)
                if times is None:
                    unknown_trips.append(n)
                    times = 1
            counter = collections.Counter(i.opcode for i in insts)
            for k in counter:
                counter[k] *= times
            return counter
        return collections.Counter(i.opcode for i in cfg.block_insts(n))
    nodes = {node(n) for n in body}
    edges = collections.defaultdict(set)
    for n in body:
        for s in cfg.succ[n]:
            if s in body and (n, s) not in cfg.back_edges or \
                    (s in body and node(s) != s and node(s) != header):
                if node(s) != node(n) and s != header:
                    edges[node(n)].add(node(s))
    # Spin loops' out-of-line polls are not on the fast path.
    spin = {n for n in nodes if n in cfg.loops and n != header and is_spin(cfg, n)}
    inline_spin = {n for n in spin if any(p not in cfg.loops.get(n, ()) and
                                          cfg.succ and n in cfg.succ[p] and
                                          cfg.blocks[p][1] + 1 == cfg.blocks[n][0]
                                          for p in cfg.pred[n])}
    avoid = spin - inline_spin
    latches = {node(n) for (n, h) in cfg.back_edges if h == header}
    mask_nodes = {n for n in nodes if n not in cfg.loops and
                  is_mask_block(list(cfg.block_insts(n)))}
    # Topological order of the acyclic body.
    order, seen = [], set()
    def visit(n):
        if n in seen:
            return
        seen.add(n)
        for s in edges[n]:
            visit(s)
        order.append(n)
    visit(header)
    order.reverse()

    def extreme(allowed, must=None, shortest=False):
        """The longest (or shortest) path header -> latch through `allowed`,
        through a node of `must` when given."""
        sign = -1 if shortest else 1
        best = {header: (sum(cost(header).values()), cost(header),
                         header in (must or ()))}
        for n in order:
            if n not in best:
                continue
            total, counter, hit = best[n]
            for s in edges[n]:
                if s not in allowed:
                    continue
                c = cost(s)
                cand = (total + sum(c.values()), counter + c, hit or s in (must or ()))
                cur = best.get(s)
                key = lambda v: (v[2], sign * v[0]) if must else (0, sign * v[0])
                if cur is None or key(cand) > key(cur):
                    best[s] = cand
        results = [best[l] for l in latches if l in best]
        if must:
            results = [r for r in results if r[2]]
        return max(results, key=lambda r: sign * r[0])[1] if results else None

    allowed = nodes - avoid
    unmasked = extreme(allowed - mask_nodes)
    masked = extreme(allowed, must=mask_nodes) if mask_nodes else None
    shortest = extreme(allowed - mask_nodes, shortest=True)
    if unmasked is None:
        # Every path goes through a block the test calls masking (selects
        # of -inf with no branch around them, as a softcap's): there is one
        # kind of tile, not two.
        unmasked, masked = extreme(allowed), None
        shortest = extreme(allowed, shortest=True)
    return unmasked, masked, shortest


def role_classifier(rules):
    """A classifier of task loops: the first role whose opcode groups all
    occur in the loop's body (a group occurs when any of its opcode
    prefixes does), or None."""
    def classify(body):
        for name, groups in rules:
            if all(any(has(body, op) for op in group) for group in groups):
                return name
        return None
    return classify


MMA_OPCODES = ("UTCHMMA", "UTCQMMA", "UTCMMA")

# The Blackwell forward's roles.
blackwell_role = role_classifier([
    ("softmax", [("MUFU.EX2",), ("STTM",)]),
    ("mma", [MMA_OPCODES]),
    ("load", [("UTMALDG",)]),
    ("epilogue", [("UTMASTG",)]),
    ("correction", [("LDTM",)]),
])

# The Hopper warpgroup MMAs: HGMMA for 16-bit inputs, QGMMA for FP8.
HOPPER_MMA_OPCODES = ("HGMMA", "QGMMA")

# The Hopper forward's roles.
hopper_role = role_classifier([
    ("consumer", [HOPPER_MMA_OPCODES, ("MUFU.EX2",)]),
    ("producer", [("UTMALDG",)]),
])

# The Hopper forward's roles as --roles names them for a foreign cubin: the
# consumer warps all run one copy of the code (FlashAttention-4's
# warpgroups do), the producer's one elected thread issues TMA.
HOPPER_ROLE_NAMES = ("producer", "consumer")

# FlashAttention-4's Hopper forward (4.0.0b36, flash_fwd_sm90.py): the
# producer warpgroup, then the MMA warpgroups: two at head dim 128 (128 x 128
# tiles), three at 64 and 96 (tile_m 192: consumer=4-15).
FA4_FORWARD_ROLES = "producer=0-3,consumer=4-11"

# FlashAttention-4's 1-CTA Blackwell backward (4.0.0b36): four dQ reduction
# warps, two warpgroups computing the softmax gradient, the MMA warp, the
# load warp.
FA4_BACKWARD_ROLES = "dq=0-3,grad=4-11,mma=12,load=13"

# The Blackwell backward's roles (fa4's and FA4's).
backward_role = role_classifier([
    ("grad", [("MUFU.EX2",)]),
    ("mma", [MMA_OPCODES]),
    ("load", [("UTMALDG",)]),
    ("dq", [("LDTM",)]),
])


# Roles a target's kernel has more than one of, numbered in code order.
NUMBERED = {"softmax", "consumer"}


def _innermost_step_loop(cfg, task, classify, kind):
    """The backward's per-step loop of a role: the most deeply nested loop
    inside its task loop (not a spin loop) that still holds the role's
    instructions and waits on an mbarrier (a step waits for its inputs) —
    under the task loop the deterministic order nests a loop over K/V
    blocks, a GQA ratio packed in pieces one over head groups."""
    best, depth_of_best = None, -1
    for g in cfg.loops:
        if g == task or g not in cfg.loops[task] or is_spin(cfg, g):
            continue
        body = list(cfg.loop_insts(g))
        if classify(body) != kind or not has(body, "SYNCS.PHASECHK"):
            continue
        depth = sum(1 for k in cfg.loops if k != g and g in cfg.loops[k])
        if depth > depth_of_best:
            best, depth_of_best = g, depth
    return best


def analyse(cuobjdump, cubin, trips_hint=None, classify=blackwell_role,
            innermost=False):
    insts = disassemble(cuobjdump, cubin)
    cfg = Cfg(insts)
    loops = {h: list(cfg.loop_insts(h)) for h in cfg.loops}
    outer = [h for h in cfg.loops
             if not any(h != g and h in cfg.loops[g] for g in cfg.loops)]
    roles = []
    for h in sorted(outer):
        kind = classify(loops[h])
        if kind is None:
            continue
        roles.append((kind, h))
    # The per-tile loop of each role: its task loop's child loop (not a spin
    # loop) with the most instructions.
    results = collections.OrderedDict()
    counts = collections.Counter()
    for kind, h in roles:
        counts[kind] += 1
        name = kind + (str(counts[kind] - 1) if kind in NUMBERED else "")
        children = [g for g in cfg.loops if g != h and g in cfg.loops[h] and
                    not is_spin(cfg, g) and
                    not any(g in cfg.loops[k] and k != g and k != h and
                            k in cfg.loops[h] and not is_spin(cfg, k)
                            for k in cfg.loops)]
        if not children:
            results[name] = {"per": "task", "unmasked": _summary(
                tile_paths(cfg, h, {})[0])}
            continue
        tile = max(children, key=lambda g: len(loops[g]))
        if innermost:
            tile = _innermost_step_loop(cfg, h, classify, kind) or tile
        unmasked, masked, shortest = tile_paths(cfg, tile, {})
        results[name] = {"per": "kv tile", "unmasked": _summary(unmasked),
                         "masked": _summary(masked), "shortest": _summary(shortest)}
    return results, insts


def _summary(counter):
    if counter is None:
        return None
    by_unit = collections.Counter()
    for opcode, n in counter.items():
        by_unit[unit_of(opcode)] += n
    return {"total": sum(counter.values()),
            "opcodes": dict(counter),
            "mufu_ex2": sum(n for op, n in counter.items() if op.startswith("MUFU.EX2")),
            "mufu": sum(n for op, n in counter.items() if op.startswith("MUFU")),
            "ldtm": sum(n for op, n in counter.items() if op.startswith("LDTM")),
            "units": dict(sorted(by_unit.items())),
            "fma_pipe_cycles": sum(n * (2 if re.match(r"^(FFMA2|FADD2|FMUL2)", op) else 1)
                                   for op, n in counter.items()
                                   if unit_of(op) == "FMA")}


def estimate(roles, head_dim, value_head_dim=None, one_tile=False):
    """Cycles per KV tile on one SMSP, beside the tensor core's. A
    one-Q-tile kernel (head dim 256: 12 warps, one softmax warpgroup) is
    measured per pair of K/V blocks, the softmax's and the MMA warp's loop
    body, the same tensor-core work as two Q tiles' one block; its
    correction loop, one block a trip, counts twice."""
    issue = mufu = fma = 0
    for name in ("softmax0", "softmax1", "correction", "mma", "load"):
        role = roles.get(name)
        if not role or not role.get("unmasked"):
            continue
        # Correction's longest path rescales O, which the threshold makes
        # rare: the steady state is its shortest path.
        u = role["shortest"] if name == "correction" and role.get("shortest") else role["unmasked"]
        times = 2 if one_tile and name == "correction" else 1
        # FlashAttention-4's two softmax warpgroups run one loop (the Q
        # stage from the warp index): a two-tile kernel without a softmax1
        # of its own issues it twice per SMSP.
        if name == "softmax0" and "softmax1" not in roles and not one_tile:
            times = 2
        issue += times * u["total"]
        mufu += times * 8 * u["mufu_ex2"]
        fma += times * u["fma_pipe_cycles"]
    # Two Q tiles per KV tile, each S = Q·Kᵀ (128×128×D) and O += P·V
    # (128×N×128, N = 128 at head dim 96). FP8's MMAs (UTCQMMA,
    # kind::f8f6f4) take 8192 multiply-adds a cycle, twice 16-bit's, and
    # their 8-bit V's N is whole 128-column atoms.
    mma = roles.get("mma") or {}
    fp8 = any(op.startswith("UTCQMMA")
              for op in (mma.get("unmasked") or {}).get("opcodes", {}))
    value_head_dim = value_head_dim or head_dim
    n_value = (128 if value_head_dim == 96 or (fp8 and value_head_dim < 128)
               else value_head_dim)
    tensor = 2 * (128 * 128 * head_dim + 128 * n_value * 128) // (
        8192 if fp8 else 4096)
    # Shared-memory traffic per KV tile of one CTA at 128 bytes a cycle: the
    # MMAs' operands (S reads Q and K, P·V reads V; P comes from TMEM), the
    # TMA writes of K and V, and the softmax and correction warps' LDS/STS
    # (the statistics they hand over). A CTA pair's MMAs (UTCHMMA.2CTA,
    # tcgen05.mma.cta_group::2) read each CTA's Q but only its half of K
    # and V, which its TMA alone writes: what pairs are for. (A one-Q-tile
    # kernel's unit is two K/V blocks for one Q tile: the same operand
    # reads, twice the copies.)
    pair = any(".2CTA" in op for op in (mma.get("unmasked") or {}).get("opcodes", {}))
    ctas = 2 if pair else 1
    element = 1 if fp8 else 2
    q_bytes = 128 * head_dim * element
    k_bytes = 128 * head_dim * element
    v_bytes = 128 * value_head_dim * element
    smem = {"mma operands": (2 * (q_bytes + k_bytes // ctas) + 2 * v_bytes // ctas) // 128,
            "tma in": (2 if one_tile else 1) * (k_bytes + v_bytes) // ctas // 128,
            "lds/sts": 0}
    for name in ("softmax0", "softmax1", "correction"):
        role = roles.get(name) or {}
        u = (role.get("shortest") if name == "correction" else None) or role.get("unmasked")
        # A softmax loop both warpgroups run (FlashAttention-4's) stores
        # each warpgroup's statistics: twice a KV tile, as the issue count.
        times = 2 if name == "softmax0" and "softmax1" not in roles and not one_tile else 1
        if u:
            smem["lds/sts"] += times * 4 * sum(n * _wavefronts(op) for op, n in u["opcodes"].items()
                                               if op.startswith(("LDS", "STS")))
    return {"issue": issue, "mufu": mufu, "fma": fma,
            "smsp_cycles": max(issue, mufu, fma), "tensor_core_cycles": tensor,
            "cta_pair": pair, "smem_cycles_by_use": smem,
            "smem_cycles": sum(smem.values())}


def estimate_hopper(roles, head_dim):
    """Cycles per KV tile on one SMSP (a warp of each consumer and of the
    producer), beside the tensor core's for the CTA's 128 rows."""
    issue = mufu = fma = 0
    for name in ("consumer0", "consumer1", "producer"):
        role = roles.get(name)
        if not role or not role.get("unmasked"):
            continue
        # The steady state: no mask, no rescale of O.
        u = role.get("shortest") or role["unmasked"]
        issue += u["total"]
        mufu += 8 * u["mufu_ex2"]
        fma += u["fma_pipe_cycles"]
    # S = Q·Kᵀ (128×128×D) and O += P·V (128×D×128) per KV tile: 2048
    # multiply-adds a cycle on 16-bit inputs, twice that on FP8 (QGMMA).
    consumer = (roles.get("consumer0") or {}).get("unmasked") or {}
    fp8 = any(op.startswith("QGMMA") for op in consumer.get("opcodes", {}))
    tensor = 2 * 128 * 128 * head_dim // (4096 if fp8 else 2048)
    return {"issue": issue, "mufu": mufu, "fma": fma,
            "smsp_cycles": max(issue, mufu, fma), "tensor_core_cycles": tensor}


def report_hopper(jobs, cuobjdump, roles_spec=""):
    print("| variant | consumer tile (steady / rescale / masked) | MUFU.EX2 | "
          "HGMMA | consumer FMA/ALU/MEM/SYNC/CTRL | producer | SMSP issue | "
          "MUFU cyc | FMA cyc | tensor core | regs | spills |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for job in jobs:
        cubin, head_dim, label = job[:3]
        spec = job[3] if len(job) > 3 else roles_spec
        if spec and not os.path.isfile(cubin):
            sys.exit(f"sass_budget: no such file: {cubin}")
        if spec and _manifest(cubin) is not None:
            sys.exit(f"sass_budget: {cubin}'s manifest names its roles; --roles is "
                     "for cubins without one")
        if spec:
            # A foreign cubin (FlashAttention-4's, built by
            # bench/fa4_reference_backward.py --forward): its roles' warps
            # from --roles, its tile from its HGMMAs.
            warps = _role_warps(spec, HOPPER_ROLE_NAMES)
            if "consumer" not in warps:
                sys.exit("sass_budget: --roles: the Hopper forward needs the consumer's "
                         f"warps (FlashAttention-4's at head dim 128: {FA4_FORWARD_ROLES})")
            roles, est, maxreg = analyse_hopper_foreign(cuobjdump, cubin, warps)
            ptxas = {"registers": _registers(cuobjdump, cubin), "setmaxnreg": maxreg}
            label = f"{label} ({est['tile'][0]}x{est['tile'][1]})"
            c = roles["consumer"]
        else:
            roles, _ = analyse(cuobjdump, cubin, classify=hopper_role)
            est = estimate_hopper(roles, head_dim)
            ptxas = _ptxas(cubin)
            warps = None
            c = roles.get("consumer0", {})
        steady = c.get("shortest") or {}
        longest = c.get("unmasked") or {}
        masked = c.get("masked") or {}
        units = steady.get("units", {})
        producer = roles.get("producer", {}).get("unmasked") or {}
        hgmma = sum(n for op, n in steady.get("opcodes", {}).items()
                    if op.startswith(HOPPER_MMA_OPCODES))
        print(f"| {label} | {steady.get('total', '-')} / "
              f"{longest.get('total', '-')} / {masked.get('total', '-')} | "
              f"{steady.get('mufu_ex2', '-')} | {hgmma} | "
              f"{units.get('FMA', 0)}/{units.get('ALU', 0)}/{units.get('MEM', 0)}/"
              f"{units.get('SYNC', 0)}/{units.get('CTRL', 0)} | "
              f"{producer.get('total', '-')} | {est['issue']} | {est['mufu']} | "
              f"{est['fma']} | {est['tensor_core_cycles']} | "
              f"{ptxas.get('registers', '-')} | "
              f"{ptxas.get('spill_store_bytes', '-')}/{ptxas.get('spill_load_bytes', '-')} |")
        row = {"variant": label, "roles": roles, "estimate": est, "ptxas": ptxas}
        if warps is not None:
            row["warps"] = warps
        rows.append(row)
    return rows


def _hopper_tile_loops(cfg, kind):
    """The innermost loops (not spin loops) of a role of the Hopper forward:
    a consumer's or producer's per-KV-tile loops. A non-persistent kernel
    (FlashAttention-4's) has no task loop around them, and puts its masked
    tiles in loops of their own."""
    found = []
    for h in cfg.loops:
        if is_spin(cfg, h) or hopper_role(list(cfg.loop_insts(h))) != kind:
            continue
        if any(g != h and g in cfg.loops[h] and not is_spin(cfg, g) and
               hopper_role(list(cfg.loop_insts(g))) == kind for g in cfg.loops):
            continue
        found.append(h)
    return sorted(found)


def _hgmma_shape(inst):
    """(M, N, K) of an HGMMA ('HGMMA.64x128x16.F32.BF16': the opcode pattern
    stops at the lowercase x, the rest is in the operands), else None."""
    m = re.match(r"^[HQ]GMMA\.(\d+)x(\d+)x(\d+)", inst.opcode + inst.operands)
    return tuple(int(x) for x in m.groups()) if m else None


def analyse_hopper_foreign(cuobjdump, cubin, warps):
    """A Hopper forward without an fa4 manifest, its roles' warps from
    --roles: per KV tile, the consumer's steady state (the shortest path
    through a tile loop without masking blocks), its longest path there and
    the longest through a masked tile (its own loop or a branch); the
    producer's loop; the tensor core's cycles from the HGMMA shapes of the
    steady loop times the consumer warpgroups; issue and MUFU cycles of the
    busiest SMSP from the warps each role has there."""
    insts = disassemble(cuobjdump, cubin)
    cfg = Cfg(insts)
    consumer_loops = _hopper_tile_loops(cfg, "consumer")
    if not consumer_loops:
        sys.exit(f"sass_budget: {cubin}: no consumer loop (HGMMA and MUFU.EX2 in a "
                 "loop): not a Hopper forward")
    loops = []
    for h in consumer_loops:
        blocks = cfg.loops[h]
        masking = any(is_mask_block(list(cfg.block_insts(n))) for n in blocks)
        loops.append((h, masking, tile_paths(cfg, h, {})))
    plain = [l for l in loops if not l[1]] or loops
    # The steady loop: the unmasked one with the most instructions (the
    # interior tiles'; others are peeled first or last tiles).
    steady_h, _, (unmasked, masked, shortest) = max(
        plain, key=lambda l: len(list(cfg.loop_insts(l[0]))))
    worst_masked = None
    for h, masking, (u, m, _) in loops:
        for c in ((m,) if not masking else (m, u)):
            if c is not None and (worst_masked is None or
                                  sum(c.values()) > sum(worst_masked.values())):
                worst_masked = c
    roles = collections.OrderedDict()
    roles["consumer"] = {"per": "kv tile", "unmasked": _summary(unmasked),
                         "masked": _summary(worst_masked),
                         "shortest": _summary(shortest or unmasked),
                         "tile_loops": len(loops)}
    producer_loops = _hopper_tile_loops(cfg, "producer")
    if producer_loops:
        h = max(producer_loops, key=lambda h: len(list(cfg.loop_insts(h))))
        roles["producer"] = {"per": "kv tile", "unmasked": _summary(tile_paths(cfg, h, {})[0])}
    # The tensor core: each consumer warpgroup's HGMMAs of a steady tile
    # (the steady loop's, scaled to the number on its steady path).
    shapes = [_hgmma_shape(i) for i in cfg.loop_insts(steady_h)]
    shapes = [x for x in shapes if x]
    on_path = sum(n for op, n in (roles["consumer"]["shortest"] or {}).get(
        "opcodes", {}).items() if op.startswith(HOPPER_MMA_OPCODES))
    fmas = sum(m * n * k for m, n, k in shapes) * on_path // max(len(shapes), 1)
    groups = len(warps.get("consumer", ())) // 4
    # The tile: M from the consumer warpgroups (64 rows each), N from the
    # S GEMM's shape (its HGMMAs read no register A operand).
    tile_n = None
    for inst in cfg.loop_insts(steady_h):
        shape = _hgmma_shape(inst)
        if shape and inst.operands.split(",")[1].strip().startswith("gdesc"):
            tile_n = shape[1]
            break
    issue, mufu, fma = [0] * 4, [0] * 4, [0] * 4
    for name, role in roles.items():
        u = role.get("shortest") or role.get("unmasked")
        if not u:
            continue
        for w in warps.get(name, ()):
            issue[w % 4] += u["total"]
            mufu[w % 4] += 8 * u["mufu_ex2"]
            fma[w % 4] += u["fma_pipe_cycles"]
    est = {"issue": max(issue), "mufu": max(mufu), "fma": max(fma),
           "issue_by_smsp": issue, "smsp_cycles": max(max(issue), max(mufu), max(fma)),
           "tensor_core_cycles": groups * fmas // 2048,
           "tile": [64 * groups, tile_n]}
    maxreg = [int(m.group(1), 16) for m in
              (re.match(r"^.*?(0x[0-9a-f]+)\s*$", i.operands) for i in insts
               if i.opcode.startswith("USETMAXREG")) if m]
    return roles, est, maxreg


def _registers(cuobjdump, cubin):
    """The kernel's registers per thread at launch, from cuobjdump."""
    done = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True)
    counts = [int(x) for x in re.findall(r"REG:(\d+)", done.stdout)]
    return max(counts) if counts else None


def _wavefronts(opcode):
    """128-byte shared-memory wavefronts of one warp's LDS/STS. Stores move
    each lane's own bytes (a 16-byte store: four wavefronts). Loads in the
    backward's per-tile loops are the statistics' reads (the LSE and delta
    of the step's columns), which every lane of a warp makes at the same
    address: a broadcast, one wavefront."""
    if opcode.startswith("LDS"):
        return 1
    for suffix, size in ((".128", 4), (".64", 2)):
        if suffix in opcode:
            return size
    return 1


def _mma_shapes(insts, tile_insts):
    """(M, N, A from SMEM) of each UTCHMMA among `tile_insts`, its
    instruction descriptor read from the last UMOV of an immediate into the
    descriptor's uniform register before it."""
    position = {id(i): n for n, i in enumerate(insts)}
    shapes = []
    for inst in tile_insts:
        if not inst.opcode.startswith("UTCHMMA"):
            continue
        m = re.search(r"idesc\[(UR[0-9]+)\]", inst.operands)
        if not m:
            continue
        value = None
        for prev in reversed(insts[:position[id(inst)]]):
            if prev.opcode == "UMOV" and prev.operands.startswith(m.group(1) + ","):
                imm = prev.operands.split(",")[1].strip()
                if re.fullmatch(r"0x[0-9a-f]+", imm):
                    value = int(imm, 16)
                break
        if value is None:
            continue
        rows = ((value >> 24) & 0x1F) * 16
        cols = ((value >> 17) & 0x3F) * 8
        shapes.append((rows, cols, inst.operands.startswith("gdesc")))
    return shapes


def mufu_cycles_per_warp_instruction(target):
    """A warp's MUFU instruction on one SMSP: 4 lanes a cycle (sm_100a), 8
    on sm_103a (the B300's MUFU is twice as fast)."""
    return 4 if target == "sm_103a" else 8


def estimate_backward(roles, warps, shapes, head_dim, step_rows=128, target="sm_100a"):
    """Per K/V tile (one step of `step_rows` query rows): issue and MUFU
    cycles of the busiest SMSP (every MUFU op: the exponentials, a
    softcap's reciprocals), tensor-core cycles and shared-memory bytes."""
    per_mufu = mufu_cycles_per_warp_instruction(target)
    issue = [0] * 4
    mufu = [0] * 4
    # Shared-memory cycles at 128 bytes (one wavefront) per cycle.
    smem = {"mma operands": 0, "lds/sts": 0, "tma/bulk in": 0, "bulk out": 0}
    for name, role in roles.items():
        u = role.get("unmasked")
        if not u:
            continue
        for w in warps.get(name, ()):
            issue[w % 4] += u["total"]
            mufu[w % 4] += per_mufu * u["mufu"]
        count = len(warps.get(name, ()))
        smem["lds/sts"] += count * sum(n * _wavefronts(op) for op, n in u["opcodes"].items()
                                       if op.startswith(("LDS", "STS")))
        if any(op.startswith("UBLKRED") for op in u["opcodes"]):
            # The bulk reduction reads back what the role staged.
            smem["bulk out"] += count * sum(n * _wavefronts(op)
                                            for op, n in u["opcodes"].items()
                                            if op.startswith("STS"))
    mma = roles.get("mma", {}).get("unmasked") or {}
    issued = sum(n for op, n in mma.get("opcodes", {}).items() if op.startswith("UTCHMMA"))
    fmas = a_bytes = b_bytes = 0
    if shapes and issued:
        scale = issued / len(shapes)
        for rows, cols, a_smem in shapes:
            fmas += scale * rows * cols * 16
            a_bytes += scale * (rows * 16 * 2 if a_smem else 0)
            b_bytes += scale * cols * 16 * 2
    smem["mma operands"] = int(a_bytes + b_bytes) // 128
    # Q and dO by TMA, the LSE and delta (f32) for the step.
    smem["tma/bulk in"] = (2 * step_rows * head_dim * 2 + 2 * step_rows * 4) // 128
    return {"issue": max(issue), "mufu": max(mufu), "issue_by_smsp": issue,
            "mma_instructions": issued, "tensor_core_cycles": int(fmas // 4096),
            "smem_cycles_by_use": smem, "smem_cycles": sum(smem.values())}


BACKWARD_ROLE_NAMES = ("grad", "dq", "mma", "load")


def _role_warps(spec, names=BACKWARD_ROLE_NAMES):
    """--roles 'dq=0-3,grad=4-11,mma=12,load=13' -> {role: [warps]}."""
    warps = {}
    for item in filter(None, spec.split(",")):
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([0-9]+)(?:\s*-\s*([0-9]+))?\s*", item)
        if not m:
            sys.exit(f"sass_budget: --roles: '{item}' is not ROLE=WARP or "
                     "ROLE=FIRST-LAST (e.g. dq=0-3,grad=4-11,mma=12,load=13)")
        name, first = m.group(1), int(m.group(2))
        last = int(m.group(3)) if m.group(3) is not None else first
        if name not in names:
            kind = "backward" if names == BACKWARD_ROLE_NAMES else "Hopper forward"
            sys.exit(f"sass_budget: --roles: unknown role '{name}' "
                     f"(the {kind}'s: {', '.join(names)})")
        if last < first or last >= 32:
            sys.exit(f"sass_budget: --roles: {item} is no range of warps "
                     "(first <= last < 32)")
        warps[name] = list(range(first, last + 1))
    return warps


def _manifest(cubin):
    """fa4c's manifest beside the cubin, or None for a foreign cubin."""
    if not os.path.exists(cubin + ".json"):
        return None
    try:
        with open(cubin + ".json") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"sass_budget: {cubin}.json is not a manifest: {e}")


def _backward_job(cubin, head_dim, roles_spec):
    """(warps by role, head dim, target) of a backward cubin: from fa4's
    manifest, else from --roles and --head-dim."""
    if not os.path.isfile(cubin):
        sys.exit(f"sass_budget: no such file: {cubin}")
    manifest = _manifest(cubin)
    if manifest is None:
        if not roles_spec:
            sys.exit(f"sass_budget: {cubin} has no fa4 manifest; give its roles' "
                     "warps with --roles (FlashAttention-4's 1-CTA backward: "
                     f"{FA4_BACKWARD_ROLES})")
        return _role_warps(roles_spec), head_dim, None
    if manifest.get("kind") != "backward":
        sys.exit(f"sass_budget: {cubin} is a {manifest.get('kind', 'forward')} kernel; "
                 "--backward measures fa4c --backward's")
    target = manifest.get("target")
    if target not in ("sm_100a", "sm_103a"):
        sys.exit(f"sass_budget: {cubin} is for {target}; --backward measures the "
                 "Blackwell backward (sm_100a, sm_103a)")
    if roles_spec:
        sys.exit(f"sass_budget: {cubin}'s manifest names its roles; --roles is "
                 "for cubins without one")
    attention = manifest.get("attention", {})
    if attention.get("deterministic"):
        print(f"note: {cubin} is the deterministic order; its steps are counted, "
              "not the K/V blocks around them", file=sys.stderr)
    roles = manifest.get("kernels", {}).get("main", {}).get("roles", [])
    warps = {r["name"]: list(range(r["first_warp"], r["first_warp"] + r["num_warps"]))
             for r in roles}
    return warps, attention.get("head_dim", head_dim), target


def report_backward(jobs, cuobjdump, roles_spec):
    print("| kernel | grad (warps) unmasked / masked | MUFU.EX2 | grad FMA/ALU/MEM/TMEM | "
          "dq | mma | load | SMSP issue | MUFU cyc | tensor core | SMEM cyc "
          "(MMA operands + LDS/STS + TMA/bulk in + bulk out) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for job in jobs:
        cubin, head_dim, label = job[:3]
        spec = job[3] if len(job) > 3 else roles_spec
        warps, head_dim, target = _backward_job(cubin, head_dim, spec)
        roles, insts = analyse(cuobjdump, cubin, classify=backward_role, innermost=True)
        missing = [r for r in roles if r not in warps]
        if missing or not roles.get("grad"):
            sys.exit(f"sass_budget: {cubin}: " +
                     (f"no warps for role(s) {missing} (give --roles)" if missing else
                      "no grad role (MUFU.EX2 in a task loop): not a Blackwell backward"))
        mma_loop = _tile_loop_insts(cuobjdump, insts, "mma")
        shapes = _mma_shapes(insts, mma_loop)
        est = estimate_backward(roles, warps, shapes, head_dim, target=target or "sm_100a")
        g = roles.get("grad", {})
        gu, gm = g.get("unmasked") or {}, g.get("masked") or {}
        units = gu.get("units", {})
        def total(name):
            r = roles.get(name, {}).get("unmasked")
            return r["total"] if r else "-"
        sm = est["smem_cycles_by_use"]
        print(f"| {label} | {gu.get('total', '-')} ({len(warps.get('grad', []))}) / "
              f"{gm.get('total', '-') if gm else '-'} | {gu.get('mufu_ex2', '-')} | "
              f"{units.get('FMA', 0)}/{units.get('ALU', 0)}/{units.get('MEM', 0)}/"
              f"{units.get('TMEM', 0)} | {total('dq')} | {total('mma')} | {total('load')} | "
              f"{est['issue']} | {est['mufu']} | {est['tensor_core_cycles']} | "
              f"{est['smem_cycles']} ({sm['mma operands']} + {sm['lds/sts']} + "
              f"{sm['tma/bulk in']} + {sm['bulk out']}) |")
        rows.append({"variant": label, "roles": roles, "warps": warps, "estimate": est,
                     "ptxas": _ptxas(cubin)})
    return rows


def _tile_loop_insts(cuobjdump, insts, role_name):
    """The instructions of `role_name`'s per-tile loop (the backward's
    classification), each once."""
    cfg = Cfg(insts)
    outer = [h for h in cfg.loops
             if not any(h != g and h in cfg.loops[g] for g in cfg.loops)]
    for h in sorted(outer):
        body = list(cfg.loop_insts(h))
        if backward_role(body) != role_name:
            continue
        tile = _innermost_step_loop(cfg, h, backward_role, role_name)
        return list(cfg.loop_insts(tile)) if tile is not None else body
    return []


def _ptxas(cubin):
    """ptxas's figures from the cubin's manifest, when fa4c wrote one."""
    if os.path.exists(cubin + ".json"):
        with open(cubin + ".json") as f:
            return json.load(f).get("ptxas", {})
    return {}


def find_cuobjdump(explicit):
    if explicit:
        return explicit
    env = os.environ.get("FA4_CUDA_TOOLS_BIN")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = ([os.path.join(env, "cuobjdump")] if env else []) + \
        glob.glob(os.path.join(root, "build/cuda-tools/lib/python3*/site-packages/nvidia/cu13/bin/cuobjdump"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    sys.exit("sass_budget: no cuobjdump (run ./scripts/test.sh once, or pass --cuobjdump)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cubins", nargs="*", help="cubins to measure")
    parser.add_argument("--head-dim", type=int, default=128,
                        help="head dim of the given cubins without an fa4 manifest (the "
                             "forward's tensor-core cycles; the backward's TMA bytes)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--fa4c", default=os.path.join(root, "build/bin/fa4c"),
                        help="fa4c to compile the matrix with")
    parser.add_argument("--matrix", action="store_true",
                        help="compile and measure hd 64/96/128 x fp16/bf16 x none/causal/window")
    parser.add_argument("--fa4c-args", default="", help="extra fa4c flags for the matrix")
    parser.add_argument("--cuobjdump", default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--target", default="sm_100a", choices=("sm_100a", "sm_103a", "sm_90a"),
                        help="the chip the cubins are for (the matrix is compiled for it)")
    parser.add_argument("--backward", action="store_true",
                        help="the backward's main kernels (Blackwell): per K/V tile (a step "
                             "of 128 query rows) per role, with the SMEM traffic model; "
                             "the matrix is hd 64/96/128 bf16 none/causal plus hd128 "
                             "causal GQA 4")
    parser.add_argument("--reference", default=None,
                        help="with --backward --matrix, the output directory of "
                             "bench/fa4_reference_backward.py: FlashAttention-4's 1-CTA "
                             "backward kernels join the table")
    parser.add_argument("--roles", default="",
                        help="the warps of each role of a cubin without an fa4 manifest: "
                             "with --backward e.g. dq=0-3,grad=4-11,mma=12,load=13; with "
                             "--target sm_90a (the forward) e.g. producer=0-3,consumer=4-11")
    args = parser.parse_args()
    if args.backward and args.target == "sm_90a":
        parser.error("--backward measures the Blackwell backward (sm_100a/sm_103a)")
    if args.reference and not (args.backward and args.matrix):
        parser.error("--reference joins FA4's kernels to --backward --matrix")
    if args.reference and not os.path.isdir(args.reference):
        parser.error(f"--reference: no directory {args.reference}")
    hopper = args.target == "sm_90a"
    if args.roles and not (args.backward or hopper):
        parser.error("--roles names the warps of --backward's or --target sm_90a's roles")
    cuobjdump = find_cuobjdump(args.cuobjdump)

    def label(cubin):
        # FA4's files are all main.cubin: name them by their directory.
        name = os.path.basename(cubin)
        parent = os.path.basename(os.path.dirname(os.path.abspath(cubin)))
        return f"{parent}/{name}" if name == "main.cubin" else name

    jobs = [(c, args.head_dim, label(c)) for c in args.cubins]
    tmp = tempfile.mkdtemp(prefix="fa4-sass-") if args.matrix else None

    def compile_with_fa4c(cmd):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            sys.exit(f"sass_budget: cannot run {cmd[0]}: {e}")
        if done.returncode != 0:
            sys.exit(f"sass_budget: {' '.join(cmd)} failed:\n{done.stderr.strip()}")

    def write_json(payload):
        if not args.json:
            return
        try:
            with open(args.json, "w") as f:
                json.dump(payload, f, indent=1)
        except OSError as e:
            sys.exit(f"sass_budget: cannot write {args.json}: {e}")
    if args.matrix and args.backward:
        # (The deterministic order's roles loop over a K/V head's blocks
        # around the steps; this per-step count does not apply to it.)
        variants = [(d, m, []) for d in (64, 96, 128) for m in ("none", "causal")]
        variants += [(128, "causal", ["--q-heads", "16", "--kv-heads", "4"])]
        for d, mask, extra in variants:
            tag = "".join(x.strip("-")[0] for x in extra if x.startswith("--"))
            out = os.path.join(tmp, f"bwd-d{d}-{mask}{tag}.cubin")
            cmd = [args.fa4c, "--backward", "--head-dim", str(d), "--q-heads", "16",
                   "--kv-heads", "16", "--mask", mask, "--dtype", "bf16",
                   "--target", args.target, "-o", out] + extra + args.fa4c_args.split()
            compile_with_fa4c(cmd)
            name = f"fa4 hd{d} {mask}" + (" GQA 4" if "--kv-heads" in extra else "")
            jobs.append((out, d, name))
        # FlashAttention-4's own 1-CTA backward, built ahead of time by
        # bench/fa4_reference_backward.py, in the same table.
        if args.reference:
            for d in (64, 128):
                for mask in ("none", "causal"):
                    cubin = os.path.join(args.reference, f"hd{d}-{mask}-1cta", "main.cubin")
                    if os.path.exists(cubin):
                        jobs.append((cubin, d, f"FA4 hd{d} {mask} (1-CTA)",
                                     FA4_BACKWARD_ROLES))
    elif args.matrix:
        for d in (64, 96, 128):
            for dtype in ("fp16", "bf16"):
                for mask in ("none", "causal", "window"):
                    out = os.path.join(tmp, f"d{d}-{dtype}-{mask}.cubin")
                    cmd = [args.fa4c, "--head-dim", str(d), "--q-heads", "16",
                           "--kv-heads", "16", "--mask", mask, "--dtype", dtype,
                           "--target", args.target, "-o", out] + args.fa4c_args.split()
                    if mask == "window":
                        cmd += ["--window-left", "256", "--window-right", "0"]
                    compile_with_fa4c(cmd)
                    jobs.append((out, d, f"hd{d} {dtype} {mask}"))
    if not jobs:
        parser.error("give cubins or --matrix")

    if args.backward:
        rows = report_backward(jobs, cuobjdump, args.roles)
        if unknown_trips:
            print(f"\nnote: {len(set(unknown_trips))} inner loop(s) without a recognisable "
                  "trip count were counted once")
        write_json({"date": datetime.date.today().isoformat(),
                    "target": args.target, "backward": True, "rows": rows})
        return

    if hopper:
        rows = report_hopper(jobs, cuobjdump, args.roles)
        write_json({"date": datetime.date.today().isoformat(),
                    "target": args.target, "rows": rows})
        return

    rows = []
    print("| variant | softmax unmasked | softmax masked | MUFU.EX2 | LDTM | "
          "softmax FMA/ALU/TMEM/SYNC | correction (no rescale/rescale) | mma | load | "
          "SMSP issue | MUFU cyc | tensor core | SMEM cyc (MMA operands + TMA in + LDS/STS) | "
          "regs | spills |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cubin, head_dim, label in jobs:
        roles, _ = analyse(cuobjdump, cubin)
        # fa4c's manifest says the head dims and the rows of a task.
        attention = (_manifest(cubin) or {}).get("attention", {})
        est = estimate(roles, attention.get("head_dim", head_dim),
                       attention.get("v_head_dim"),
                       attention.get("rows_per_task") == 128)
        ptxas = _ptxas(cubin)
        s = roles.get("softmax0", {})
        um = s.get("unmasked") or {}
        mk = s.get("masked") or {}
        units = um.get("units", {})
        def total(name):
            r = roles.get(name, {}).get("unmasked")
            if name == "correction" and r:
                steady = roles[name].get("shortest") or r
                return f"{steady['total']}/{r['total']}"
            return r["total"] if r else "-"
        print(f"| {label} | {um.get('total', '-')} | {mk.get('total', '-') if mk else '-'} | "
              f"{um.get('mufu_ex2', '-')} | {um.get('ldtm', '-')} | "
              f"{units.get('FMA', 0)}/{units.get('ALU', 0)}/{units.get('TMEM', 0)}/"
              f"{units.get('SYNC', 0)} | {total('correction')} | {total('mma')} | "
              f"{total('load')} | {est['issue']} | {est['mufu']} | "
              f"{est['tensor_core_cycles']} | {est['smem_cycles']} "
              f"({est['smem_cycles_by_use']['mma operands']} + "
              f"{est['smem_cycles_by_use']['tma in']} + "
              f"{est['smem_cycles_by_use']['lds/sts']}) | {ptxas.get('registers', '-')} | "
              f"{ptxas.get('spill_store_bytes', '-')}/{ptxas.get('spill_load_bytes', '-')} |")
        rows.append({"variant": label, "roles": roles, "estimate": est, "ptxas": ptxas})
    if unknown_trips:
        print(f"\nnote: {len(set(unknown_trips))} inner loop(s) without a recognisable "
              "trip count were counted once")
    write_json({"date": datetime.date.today().isoformat(), "rows": rows})


if __name__ == "__main__":
    main()
