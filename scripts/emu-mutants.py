#!/usr/bin/env python3
"""Single-site synchronization mutants of a kernel's PTX, run in fa4-emu.

Every synchronization site of the PTX that fa4c wrote (a manifest's "ptx") is
broken one way at a time: each mbarrier arrive, wait, init count and
expect-tx, each tcgen05.commit, each fence (tcgen05.fence, fence.proxy.async,
fence.mbarrier_init), each named barrier and its thread count, each
tcgen05.wait::ld/st, each bulk-group commit and wait, each wgmma fence,
commit and wait, and each barrier address moved to the next stage's. Each
mutant runs in fa4-emu; one the emulator reports (a wrong result, an error, a
hazard, misuse, a deadlock, a time-out) is killed. A survivor must be listed,
with the reason it is harmless per the PTX ISA, in the harmless list (one
mutant name, a tab, the reason, per line; a line starting with '#' is a
comment); any other
survivor fails the run.

usage:
  emu-mutants.py MANIFEST --emu fa4-emu [--list] [--sample N] [--seed S]
      [--harmless FILE] [--interleavings 4] [--jobs 2] [--timeout 120]
      [--also "FA4-EMU FLAGS"]... [--json OUT] [--min-kill-rate R]
      -- [fa4-emu flags: --seq-q 300 ...]

Each `--also` is another launch (a shape, a CTA count) a survivor of the
first runs under in turn: a ring that does not wrap within one task at one
shape wraps at another.

Besides the list, a survivor is harmless when the PTX's control flow proves
it (a tcgen05 fence with nothing to order on any path; a wait in an elected
block whose election is the constant false). The kill rate is killed /
(killed + unexplained survivors).

Exit status: 0 when every survivor is harmless (or, with --min-kill-rate,
when the kill rate reaches R) and the unmutated kernel runs clean, 1
otherwise, 2 on bad usage.
"""
import argparse
import fnmatch
import shutil
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile

# (kind, regex over one line, what the mutant does). The regex's groups feed
# the rewrite in mutate().
SITES = [
    ("del-arrive", r"^\s*(@%?!?\w+\s+)?mbarrier\.arrive[\w.:]*\s"),
    ("arrive-count", r"^\s*(@%?!?\w+\s+)?mbarrier\.arrive(?!\.expect_tx)[\w.:]*\s+[^,]+,\s*\[[^\]]+\],\s*(%r\d+|\d+);"),
    ("expect-tx", r"^\s*(@%?!?\w+\s+)?mbarrier\.(arrive\.)?expect_tx[\w.:]*\s"),
    ("del-wait", r"^\s*mbarrier\.try_wait\.parity"),
    ("flip-parity", r"^\s*mbarrier\.try_wait\.parity"),
    ("stage", r"^\s*(@%?!?\w+\s+)?mbarrier\.(arrive|try_wait)[\w.:]*\s"),
    ("init-count", r"^\s*(@%?!?\w+\s+)?mbarrier\.init[\w.:]*\s+\[[^\]]+\],\s*(%r\d+|\d+);"),
    ("del-commit", r"^\s*(@%?!?\w+\s+)?tcgen05\.commit"),
    ("del-fence", r"^\s*(@%?!?\w+\s+)?(tcgen05\.fence::\w+|fence\.proxy\.async[\w.:]*|fence\.mbarrier_init[\w.:]*);"),
    ("del-bar", r"^\s*(@%?!?\w+\s+)?(bar|barrier)\.(sync|arrive|warp\.sync)[\w.]*\s"),
    ("bar-count", r"^\s*(@%?!?\w+\s+)?(bar|barrier)\.(sync|arrive)[\w.]*\s+\S+,\s*\d+;"),
    ("del-tc-wait", r"^\s*tcgen05\.wait::(ld|st)"),
    ("del-bulk", r"^\s*(@%?!?\w+\s+)?cp\.async\.bulk\.(commit_group|wait_group)"),
    ("bulk-count", r"^\s*(@%?!?\w+\s+)?cp\.async\.bulk\.wait_group[\w.]*\s+\d+;"),
    ("del-wgmma-sync", r"^\s*(@%?!?\w+\s+)?wgmma\.(fence|commit_group|wait_group)"),
    ("wgmma-count", r"^\s*(@%?!?\w+\s+)?wgmma\.wait_group[\w.]*\s+\d+;"),
]


def sites(lines):
    """Every (name, kind, line index) of the PTX; the name is the kind, the
    instruction's mnemonic and its ordinal among the kind's sites, so that
    it stays put while the PTX does."""
    found = []
    counts = {}
    for i, line in enumerate(lines):
        for kind, pattern in SITES:
            if not re.search(pattern, line):
                continue
            mnemonic = re.sub(r"^\s*(@%?!?\w+\s+)?", "", line).split()[0].rstrip(";")
            key = (kind, mnemonic)
            counts[key] = counts.get(key, 0) + 1
            found.append(("%s:%s#%d" % (kind, mnemonic, counts[key]), kind, i))
    return found


def mutate(lines, kind, i):
    out = list(lines)
    line = lines[i]
    if kind in ("del-arrive", "del-commit", "del-fence", "del-bar", "del-tc-wait",
                "del-bulk", "del-wgmma-sync"):
        out[i] = ""
    elif kind == "del-wait":
        # The wait and its retry branch.
        out[i] = ""
        if i + 1 < len(lines) and re.match(r"^\s*@!?\w+ bra", lines[i + 1]):
            out[i + 1] = ""
    elif kind == "flip-parity":
        m = re.match(r"^(\s*)(mbarrier\.try_wait\.parity[\w.:]*)\s+(\w+),\s*(\[[^\]]+\]),\s*(%r\d+|\d+)(.*)$", line)
        if not m:
            return None
        parity = m.group(5)
        if parity.startswith("%"):
            out[i] = ("%s{ .reg .b32 flipped; xor.b32 flipped, %s, 1; %s %s, %s, flipped%s }"
                      % (m.group(1), parity, m.group(2), m.group(3), m.group(4), m.group(6)))
        else:
            out[i] = "%s%s %s, %s, %d%s" % (m.group(1), m.group(2), m.group(3), m.group(4),
                                           int(parity) ^ 1, m.group(6))
    elif kind == "stage":
        # The next stage's barrier: eight bytes on.
        m = re.search(r"\[([%\w]+)(\+(-?\d+))?\]", line)
        if not m:
            return None
        offset = int(m.group(3) or 0) + 8
        out[i] = line[:m.start()] + "[%s+%d]" % (m.group(1), offset) + line[m.end():]
    elif kind in ("arrive-count", "expect-tx", "init-count"):
        # The last operand moved by a count: arrivals one fewer, 16
        # transaction bytes fewer, an init count one more.
        delta = {"arrive-count": -1, "expect-tx": -16, "init-count": 1}[kind]
        m = re.search(r",\s*(%r\d+|\d+);\s*$", line)
        if not m:
            return None
        if m.group(1).startswith("%"):
            body = line[:m.start()] + ", moved;"
            out[i] = "{ .reg .b32 moved; add.s32 moved, %s, %d; %s }" % (m.group(1), delta,
                                                                      body.strip())
        elif int(m.group(1)) + delta < 1:
            return None
        else:
            out[i] = line[:m.start()] + ", %d;" % (int(m.group(1)) + delta)
    elif kind == "bar-count":
        m = re.search(r",\s*(\d+);", line)
        count = int(m.group(1))
        out[i] = line[:m.start()] + ", %d;" % (count - 32 if count > 32 else count + 32)
    elif kind in ("bulk-count", "wgmma-count"):
        m = re.search(r"\s(\d+);", line)
        out[i] = line[:m.start()] + " %d;" % (int(m.group(1)) + 1)
    else:
        return None
    return out


def run_emu(emu, manifest, ptx, flags, timeout):
    cmd = [emu, manifest] + (["--ptx", ptx] if ptx else []) + flags
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed", "time-out after %d s" % timeout
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    if proc.returncode == 2 or report is None:
        # The launch could not be made: ptxas would refuse such PTX too, or
        # the emulator refused it; either way not a survivor.
        return "refused", (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
    if proc.returncode == 0 and report.get("ok"):
        return "survived", ""
    why = (report.get("errors") or report.get("hazards") or report.get("barrier_misuse") or
           [report.get("deadlock") or "result outside tolerance"])[0]
    return "killed", str(why)[:300]


# --- Harmless by the PTX ISA, proved from the PTX's control flow ---------
#
# A fence orders tcgen05 operations across a thread synchronization (PTX
# ISA, tcgen05 memory consistency): tcgen05.fence::after_thread_sync orders
# the thread's later tcgen05 operations after its earlier synchronization,
# tcgen05.fence::before_thread_sync its earlier ones before its later
# synchronization. One with nothing to order on any path can go.

# The asynchronous tcgen05 operations the fences order (PTX ISA, tcgen05
# memory consistency: "orders all the prior asynchronous tcgen05
# operations"); dealloc too, conservatively. tcgen05.alloc and
# relinquish_alloc_permit are not asynchronous: the thread synchronization
# after them orders them as any instruction.
TC_ACCESS = re.compile(r"\btcgen05\.(ld|st|mma|cp|dealloc|shift)\b")
# What a before_thread_sync orders: those, and a tcgen05.wait::st, which
# completes the thread's stores: they are handed on only by a fence after
# it (a fence between a tcgen05.st and its wait orders the store without
# completing it; fa4-emu holds a store unreleased until its wait).
TC_BEFORE = re.compile(r"\btcgen05\.(ld|st|mma|cp|dealloc|shift|wait::st)\b")
# What another thread can see a thread do: writes of any space, arrives and
# barriers, asynchronous work it starts, and the register pool it shares.
SIDE_EFFECT = re.compile(r"\b(st|stmatrix|atom|red|cp|tcgen05|wgmma|bar|barrier|setmaxnreg|"
                         r"tensormap)\.|\bmbarrier\.(?!(try_wait|test_wait)\b)")
WAIT = re.compile(r"\bmbarrier\.try_wait")
RELEASE = re.compile(r"\bmbarrier\.arrive|\bbar(rier)?\.(sync|arrive)\b|\btcgen05\.commit")


class Flow:
    """The kernel's instructions as a control-flow graph: an inline-asm
    block (a wait loop, an elected arrive) is one node."""

    def __init__(self, lines):
        self.nodes = []  # (first line, last line, text)
        self.node_of_line = {}
        labels = {}
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith("// begin inline asm"):
                j = i + 1
                while j < len(lines) and not lines[j].strip().startswith("// end inline asm"):
                    j += 1
                self._add(i, j, "\n".join(lines[i:j + 1]))
                i = j + 1
                continue
            m = re.match(r"^(\$?[\w$]+):$", line)
            if m:
                labels[m.group(1)] = len(self.nodes)
            elif line and not line.startswith(("//", ".", "{", "}")) and line.endswith(";"):
                self._add(i, i, line)
            i += 1
        # Predicates every definition of which is the constant false. A
        # definition is any instruction whose first operand is the register
        # (setp, mov, and, selp, ...); one inside an inline-asm block counts
        # too, so a register written there is never taken for a constant.
        defs = {}
        for line in lines:
            # The destination operand, `%p1` or `%r1|%p1` (elect.sync, setp
            # with two predicates): each predicate in it is defined here.
            d = re.match(r"^\s*(@%?!?\w+\s+)?[a-z][\w.:]*\s+([%\w]+(\|[%\w]+)?)\s*[,;]", line)
            if d:
                for register in re.findall(r"%p\d+", d.group(2)):
                    defs.setdefault(register, []).append(line.strip())
        # TMEM addresses as (base register, column offset): a register
        # defined once, by `add.s32 %r, %base, imm` (or nothing else).
        adds, counts = {}, {}
        for line in lines:
            d = re.match(r"^\s*[a-z][\w.:]*\s+(%r\d+)\s*[,;]", line)
            if d:
                counts[d.group(1)] = counts.get(d.group(1), 0) + 1
            a = re.match(r"^\s*add\.s32\s+(%r\d+),\s*(%r\d+),\s*(-?\d+);", line)
            if a:
                adds[a.group(1)] = (a.group(2), int(a.group(3)))
        self.tmem_addresses = {}
        for register, count in counts.items():
            if count == 1 and register in adds and counts.get(adds[register][0]) == 1:
                self.tmem_addresses[register] = adds[register]
        self.false_predicates = {
            p for p, ds in defs.items()
            if all(re.match(r"^mov\.pred\s+%s,\s*0;$" % re.escape(p), x) for x in ds)}
        self.succ = []
        for n, (_, _, text) in enumerate(self.nodes):
            nxt = [n + 1] if n + 1 < len(self.nodes) else []
            m = re.match(r"^(@%?!?\w+\s+)?bra(\.uni)?\s+([\w$]+);", text)
            if m and "\n" not in text:
                target = labels.get(m.group(3))
                targets = [target] if target is not None else []
                nxt = targets + (nxt if m.group(1) else [])
            elif re.match(r"^(ret|exit);", text) or re.search(r"^\s*exit;", text, re.M):
                nxt = []
            self.succ.append(nxt)
        self.pred = [[] for _ in self.nodes]
        for n, ss in enumerate(self.succ):
            for t in ss:
                self.pred[t].append(n)

    def _add(self, first, last, text):
        for k in range(first, last + 1):
            self.node_of_line[k] = len(self.nodes)
        self.nodes.append((first, last, text))

    def all_paths_reach(self, start, edges, good, bad):
        """Whether every path from `start` along `edges` meets a node that
        is `good` before one that is `bad` (a path that ends is good)."""
        seen, stack = set(), list(edges[start])
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            text = self.nodes[n][2]
            if good(text):
                continue
            if bad(text):
                return False
            stack.extend(edges[n])
        return True


def proved_harmless(lines, flow, kind, i):
    """The reason a mutant cannot change what the kernel does, or None."""
    line = lines[i]
    node = flow.node_of_line.get(i)
    if node is None:
        return None
    text = flow.nodes[node][2]
    # Dead code: an elected block whose election is the constant false
    # (every definition of its predicate in the kernel is `mov.pred %p, 0`;
    # the lanes that do not issue an elected operation get such a copy).
    m = re.search(r"@!(%p\d+) bra skip;", text)
    if m and m.group(1) in flow.false_predicates:
        return "dead code: the block's election predicate is the constant false"
    # A wait after which the thread does nothing another thread can see
    # before it exits (a producer draining its ring at the end): whether,
    # and on which phase, it returns changes nothing but when the warp exits,
    # and a CTA's shared memory and mbarriers outlive its warps. (A wait
    # that then never returns is a deadlock, which is reported.)
    if kind in ("del-wait", "flip-parity", "stage") and WAIT.search(line) and \
            flow.all_paths_reach(node, flow.succ, lambda t: False,
                                 lambda t: bool(SIDE_EFFECT.search(t))):
        return "only waits and exit follow it: it orders nothing another thread sees"
    # bar.warp.sync before a .sync.aligned instruction the whole warp
    # executes next: that instruction waits for every lane of the warp
    # itself (PTX ISA, .sync: the thread waits until all threads of the
    # warp execute it), and nothing between them is shared (a tcgen05
    # fence between them orders the thread's own tensor-core operations:
    # fa4c puts the after fence just before the tcgen05.dealloc that ends
    # the MMA warp).
    if kind == "del-bar" and "bar.warp.sync" in line and flow.all_paths_reach(
            node, flow.succ, lambda t: ".sync.aligned" in t,
            lambda t: bool((SIDE_EFFECT.search(t) and "tcgen05.fence" not in t)
                           or re.search(r"\bld\.|\bmbarrier\.", t))):
        return ("the .sync.aligned instruction that follows gathers the warp's "
                "lanes itself, with nothing shared between them")
    # tcgen05.wait::st waits for every earlier tcgen05.st of the thread
    # (PTX ISA, tcgen05.wait): one with another wait::st after it on every
    # path, before the thread synchronizes, fences, exits or touches TMEM
    # again, leaves nothing unwaited (a rescale loop unrolled into chunks,
    # each with its wait).
    if kind == "del-tc-wait" and "tcgen05.wait::st" in line:
        return tc_wait_st_covered(lines, flow, node)
    if kind == "del-wgmma-sync" and "wgmma.fence" in line:
        return wgmma_fence_redundant(lines, flow, node, i)
    if kind != "del-fence":
        return None
    # (the fence, the direction searched, what it orders, the reason): the
    # same fence met first on every path, or the kernel's end, means the
    # deleted one ordered nothing.
    rules = [
        ("fence::after_thread_sync", flow.succ, TC_ACCESS,
         "no tcgen05 operation follows it before the next after_thread_sync "
         "or the exit on any path: it orders nothing"),
        ("fence::before_thread_sync", flow.pred, TC_BEFORE,
         "no tcgen05 operation (nor a wait::st) precedes it since the last "
         "before_thread_sync (or the entry) on any path: it orders nothing"),
        ("fence::before_thread_sync", flow.succ, RELEASE,
         "another before_thread_sync comes before any synchronization on "
         "every path"),
    ]
    for fence, edges, orders, reason in rules:
        if fence in line and flow.all_paths_reach(node, edges, lambda t: fence in t,
                                                  lambda t: bool(orders.search(t))):
            return reason
    return None


REGISTER = re.compile(r"%[a-z]+\d+")


def tmem_access(text):
    """(address register, columns) of a tcgen05.ld/st, or None: the shapes
    whose columns are the .num (32x32b, 16x64b)."""
    m = re.search(r"\btcgen05\.(ld|st)\.sync\.aligned\.(32x32b|16x64b)\.x(\d+)\b.*\[(%r\d+)\]",
                  text)
    return (m.group(4), int(m.group(3))) if m else None


def tc_wait_st_covered(lines, flow, node):
    """Why a tcgen05.wait::st can go, or None: on every path another
    wait::st follows (it waits for every earlier tcgen05.st of the thread,
    PTX ISA tcgen05.wait) before the thread synchronizes, fences, exits or
    touches TMEM other than with a tcgen05.ld/st of columns disjoint from
    every store since the last wait (a rescale loop unrolled into 16-column
    chunks, each with its wait)."""
    # The stores this wait covers: back to the previous wait::st.
    pending = []
    n = node
    while n > 0:
        n -= 1
        text = flow.nodes[n][2]
        if "tcgen05.wait::st" in text or flow.pred[n + 1] != [n] or len(flow.succ[n]) != 1:
            break
        if re.search(r"\btcgen05\.st\b", text):
            access = tmem_access(text)
            if access is None:
                return None
            pending.append(access)
    if not pending:
        return None
    where = flow.tmem_addresses
    for register, _ in pending:
        if register not in where:
            return None

    def disjoint(text):
        access = tmem_access(text)
        if access is None or access[0] not in where:
            return False
        base, offset = where[access[0]]
        for register, columns in pending:
            other_base, other_offset = where[register]
            delta = abs(offset - other_offset)
            if base != other_base or not (max(columns, access[1]) <= delta < 65536):
                return False
        return True

    # The addresses are compared as the same base plus constants: a path
    # that defines the base or a stored-to address again (a loop around to
    # the next iteration's values) compares other values, and is refused.
    held = {register for register, _ in pending} | {where[r][0] for r, _ in pending}

    def redefines(text):
        return any(re.match(r"^\s*(@%?!?\w+\s+)?[a-z][\w.:]*\s+" + re.escape(r) + r"\s*[,;]",
                            line) for line in text.split("\n") for r in held)

    def bad(text):
        if redefines(text):
            return True
        if re.search(r"\btcgen05\.(ld|st)\b", text):
            return not disjoint(text)
        return bool(RELEASE.search(text) or TC_ACCESS.search(text) or
                    re.search(r"\b(exit|ret)\b|\bfence\b|\bmbarrier\.", text))

    if flow.all_paths_reach(node, flow.succ, lambda t: "tcgen05.wait::st" in t, bad):
        return ("another tcgen05.wait::st follows on every path before the thread "
                "synchronizes or touches the stored TMEM columns again: it waits "
                "for this store too")
    return None


def wgmma_fence_redundant(lines, flow, node, line_index):
    """A wgmma.fence orders the thread's accesses of registers before the
    wgmmas after it that use them as accumulator or A fragment (PTX ISA,
    wgmma.fence). Deleting it changes nothing when, on every path back to
    the previous wgmma.fence, no instruction but a wgmma touches those
    registers; a path back to the entry makes it the warpgroup's first
    fence, which is required. (An inline-asm node holds several
    instructions: the walk goes line by line.)"""
    def node_lines(n):
        first, last, _ = flow.nodes[n]
        return [l.strip() for l in lines[first:last + 1]]

    def walk(start_lines, edges, visit):
        """visit(line) -> 'stop' (this path is done), 'fail' or None."""
        for l in start_lines:
            r = visit(l)
            if r:
                return r != "fail"
        seen, stack = set(), list(edges[node])
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            ordered = node_lines(n) if edges is flow.succ else node_lines(n)[::-1]
            verdict = None
            for l in ordered:
                verdict = visit(l)
                if verdict:
                    break
            if verdict == "fail":
                return False
            if verdict != "stop":
                if not edges[n] and edges is flow.pred:
                    return False  # the entry: this may be the first fence
                stack.extend(edges[n])
        return True

    first, _, _ = flow.nodes[node]
    own = [l.strip() for l in lines[first:]][:flow.nodes[node][1] - first + 1]
    offset = line_index - first
    used = set()

    def forward(l):
        if "wgmma.fence" in l:
            return "stop"
        if "wgmma.mma_async" in l:
            for group in re.findall(r"\{([^}]*)\}", l)[:2]:
                used.update(REGISTER.findall(group))
        return None

    walk(own[offset + 1:], flow.succ, forward)
    if not used:
        return "no wgmma follows it before the next wgmma.fence: it orders nothing"

    def backward(l):
        if "wgmma.fence" in l:
            return "stop"
        if "wgmma.mma_async" not in l and used & set(REGISTER.findall(l)):
            return "fail"
        return None

    if not flow.pred[node] or not walk(own[:offset][::-1], flow.pred, backward):
        return None
    return ("the registers of the wgmmas it guards are untouched since the "
            "previous wgmma.fence on every path: that fence orders them")


def read_harmless(path):
    harmless = {}
    if not path:
        return harmless
    with open(path) as f:
        for line in f:
            # A comment is a line that starts with '#' (names hold one).
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, _, reason = line.partition("\t")
            if not reason.strip():
                sys.exit("emu-mutants: %s: '%s' has no reason" % (path, name.strip()))
            harmless[name.strip()] = reason.strip()
    return harmless


def main():
    argv = sys.argv[1:]
    emu_flags = []
    if "--" in argv:
        cut = argv.index("--")
        argv, emu_flags = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--emu", default="fa4-emu")
    ap.add_argument("--list", action="store_true", help="print the mutants and stop")
    ap.add_argument("--sample", type=int, default=0, help="run N mutants drawn by --seed (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", action="append", default=[],
                    help="run the mutant of this name, or those a shell pattern "
                         "matches ('del-wait:*'); repeatable")
    ap.add_argument("--harmless", default="")
    ap.add_argument("--interleavings", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--json", default="")
    ap.add_argument("--rescore", default="",
                    help="take the results of an earlier --json run instead of running "
                         "the mutants (to apply a new harmless list or proof)")
    ap.add_argument("--also", action="append", default=[],
                    help="another set of fa4-emu flags a survivor runs under")
    ap.add_argument("--min-kill-rate", type=float, default=None,
                    help="pass when the kill rate reaches this, listing the unexplained "
                         "survivors, instead of failing on any of them")
    args = ap.parse_args(argv)

    with open(args.manifest) as f:
        manifest = json.load(f)
    ptx_path = os.path.join(os.path.dirname(os.path.abspath(args.manifest)), manifest["ptx"])
    with open(ptx_path) as f:
        lines = f.read().split("\n")
    mutants = sites(lines)
    flow = Flow(lines)
    proved = {name: proved_harmless(lines, flow, kind, i) for name, kind, i in mutants}
    harmless = read_harmless(args.harmless)
    # A list entry must name a site of this kernel: a list written for
    # another kernel, or before its code changed, is refused here.
    known = {name for name, _, _ in mutants}
    strangers = sorted(n for n in harmless if n not in known)
    if strangers:
        sys.exit("emu-mutants: %s names %d site(s) this kernel does not have "
                 "(a list of another kernel, or a stale one): %s"
                 % (args.harmless, len(strangers), ", ".join(strangers[:5])))
    listed = set(harmless)
    if args.only:
        mutants = [m for m in mutants
                   if any(fnmatch.fnmatchcase(m[0], o) for o in args.only)]
        if not mutants:
            sys.exit("emu-mutants: --only %s names no mutant of this kernel (--list "
                     "shows them)" % " ".join(args.only))
    if args.list:
        for name, _, i in mutants:
            print("%s\tline %d\t%s%s" % (name, i + 1, lines[i].strip(),
                                         "\tharmless: " + proved[name] if proved[name] else ""))
        return 0
    if args.sample and args.sample < len(mutants):
        mutants = random.Random(args.seed).sample(mutants, args.sample)
    for name, reason in proved.items():
        if reason and name not in harmless:
            harmless[name] = "proved: " + reason
    if args.rescore:
        with open(args.rescore) as f:
            results = json.load(f)["results"]
        if args.only:
            chosen = {name for name, _, _ in mutants}
            results = {n: r for n, r in results.items() if n in chosen}
        return report(args, results, harmless, listed)

    if not shutil.which(args.emu):
        sys.exit("emu-mutants: --emu %s: no such program" % args.emu)

    launches = [emu_flags] + [a.split() for a in args.also]
    launches = [l + ["--interleavings", str(args.interleavings)] for l in launches]

    for flags in launches:
        status, why = run_emu(args.emu, args.manifest, None, flags, args.timeout)
        if status != "survived":
            print("emu-mutants: the unmutated kernel does not run clean (%s): %s"
                  % (" ".join(flags), why))
            return 1

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        def one(mutant):
            name, kind, i = mutant
            out = mutate(lines, kind, i)
            if out is None:
                return name, "skipped", "no such form here"
            path = os.path.join(tmp, re.sub(r"[^\w.-]", "_", name) + ".ptx")
            with open(path, "w") as f:
                f.write("\n".join(out))
            for flags in launches:
                status, why = run_emu(args.emu, args.manifest, path, flags, args.timeout)
                if status != "survived":
                    break
            return name, status, why
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for name, status, why in pool.map(one, mutants):
                results[name] = {"status": status, "why": why}

    return report(args, results, harmless, listed)


def report(args, results, harmless, listed_in_file=()):
    killed = sum(r["status"] == "killed" for r in results.values())
    survivors = sorted(n for n, r in results.items() if r["status"] == "survived")
    listed = [n for n in survivors if n in harmless]
    unexplained = [n for n in survivors if n not in harmless]
    real = killed + len(unexplained)
    summary = {
        "manifest": args.manifest, "mutants": len(results), "killed": killed,
        "survived_harmless": len(listed), "survived_unexplained": len(unexplained),
        "refused": sum(r["status"] == "refused" for r in results.values()),
        "skipped": sum(r["status"] == "skipped" for r in results.values()),
        "kill_rate": round(killed / real, 4) if real else 1.0,
        "unexplained": unexplained,
    }
    # A list entry whose mutant is killed is a wrong or stale claim.
    stale = sorted(n for n in listed_in_file if results.get(n, {}).get("status") == "killed")
    if stale:
        summary["listed_but_killed"] = stale
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "results": results}, f, indent=1)
    print(json.dumps(summary))
    if stale:
        print("emu-mutants: the list calls %d killed mutant(s) harmless: %s"
              % (len(stale), ", ".join(stale)), file=sys.stderr)
        return 1
    if args.min_kill_rate is not None:
        return 0 if summary["kill_rate"] >= args.min_kill_rate else 1
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
