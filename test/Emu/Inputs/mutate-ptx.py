#!/usr/bin/env python3
"""Breaks fa4's PTX in one named way, for the level-D mutation tests.

usage: mutate-ptx.py MUTATION IN.ptx OUT.ptx

Each mutation is a defect the lowering could plausibly have; fa4-emu must
catch every one with its own report. Test-only: nothing here is part of fa4.
"""
import re
import sys


def nth(pattern, text, n):
    matches = list(re.finditer(pattern, text))
    if len(matches) < n:
        sys.exit("mutate-ptx: fewer than %d matches of %s" % (n, pattern))
    return matches[n - 1]


def scoped(text, match, statement):
    """Replaces one instruction by a `{ }` scope holding `statement`."""
    return text[:match.start()] + statement + text[match.end():]


def mutate(name, text):
    kind, _, arg = name.partition(":")
    n = int(arg) if arg.isdigit() else 1
    if kind == "parity":
        # The n-th mbarrier wait waits for the other phase.
        m = nth(r"mbarrier\.try_wait\.parity\.shared::cta\.b64 done, \[(%r\d+)\], (%r\d+),", text, n)
        return scoped(text, m, ".reg .b32 flipped; xor.b32 flipped, %s, 1; "
                      "mbarrier.try_wait.parity.shared::cta.b64 done, [%s], flipped,"
                      % (m.group(2), m.group(1)))
    if kind == "no-wait-ld":
        m = nth(r"tcgen05\.wait::ld\.sync\.aligned;", text, n)
        return text[:m.start()] + text[m.end():]
    if kind == "no-expect-tx":
        m = nth(r"mbarrier\.arrive\.expect_tx\.shared\.b64 (%rd\d+), (\[[^\]]+\]), %r\d+;", text, n)
        return scoped(text, m, "mbarrier.arrive.shared.b64 %s, %s;" % (m.group(1), m.group(2)))
    if kind in ("tmem-column", "quadrant"):
        # The n-th tcgen05.ld reads 16 columns further on, or the next
        # warp's lanes (32 lanes up, in the address's upper half).
        m = nth(r"(tcgen05\.ld\.sync\.aligned\.32x32b\.x\d+\.b32 \{[^}]*\}), \[(%r\d+)\];", text, n)
        offset = 16 if kind == "tmem-column" else 32 << 16
        return scoped(text, m, "{ .reg .b32 moved; add.s32 moved, %s, %d; %s, [moved]; }"
                      % (m.group(2), offset, m.group(1)))
    if kind == "sbo":
        # Every shared-memory descriptor template strides 8-row groups by
        # 2048 bytes instead of 1024.
        def wrong(m):
            value = int(m.group(1))
            if (value >> 46) & 7 == 1 and ((value >> 32) & 0x3FFF) == 64:
                value = (value & ~(0x3FFF << 32)) | (128 << 32)
            return str(value)
        mutated = re.sub(r"(?<![\w%])(\d{15,20})(?!\w)", wrong, text)
        if mutated == text:
            sys.exit("mutate-ptx: no descriptor with SBO 1024 found")
        return mutated
    if kind == "tmem-alias":
        # From the n-th tcgen05.mma on, the MMAs that write its accumulator
        # write 128 columns further on instead: over another live buffer
        # (the backward's dQ over dV).
        m = nth(r"tcgen05\.mma\.cta_group::1\.kind::f16[.\w:]* \[(%r\d+)\],", text, n)
        dest = m.group(1)
        head, tail = text[:m.start()], text[m.start():]
        pattern = re.compile(r"(tcgen05\.mma\.cta_group::1\.kind::f16[.\w:]*) \[" +
                             re.escape(dest) + r"\],([^;]*;)")
        tail, count = pattern.subn(
            lambda k: "{ .reg .b32 moved; add.s32 moved, %s, 128; %s [moved],%s }"
            % (dest, k.group(1), k.group(2)), tail)
        return head + tail
    if kind == "no-proxy-fence":
        mutated = text.replace("fence.proxy.async.shared::cta;", "")
        if mutated == text:
            sys.exit("mutate-ptx: no fence.proxy.async found")
        return mutated
    if kind == "late-store-wait":
        # The n-th hand-off of TMEM stores (wait::st, fence, arrive) arrives
        # before it waits for its stores: the fence orders them, but they
        # need not be done when the consumer's tcgen05 operation reads them.
        m = nth(r"tcgen05\.wait::st\.sync\.aligned;(\s*)tcgen05\.fence::before_thread_sync;"
                r"\s*(mbarrier\.arrive\.shared\.b64\s+%rd\d+, \[%rd\d+\];)", text, n)
        gap = m.group(1)
        return (text[:m.start()] + "tcgen05.fence::before_thread_sync;" + gap +
                m.group(2) + gap + "tcgen05.wait::st.sync.aligned;" + text[m.end():])
    if kind == "no-store-wait":
        # The epilogue hands the O staging buffer back without waiting for
        # its TMA stores to finish reading it.
        mutated = re.sub(r"cp\.async\.bulk\.wait_group\.read\s+0;", "", text)
        if mutated == text:
            sys.exit("mutate-ptx: no cp.async.bulk.wait_group.read found")
        return mutated
    if kind == "no-bar-sync":
        # Named barrier n is never met: the threads it holds back run on
        # (the Hopper backward's dQ staging writes before the elected thread
        # knows the previous reduction has read the stage).
        mutated = re.sub(r"bar\.sync\s+%d,\s*\d+;" % n, "", text)
        if mutated == text:
            sys.exit("mutate-ptx: no bar.sync %d found" % n)
        return mutated
    if kind == "no-warp-sync":
        # The n-th bar.warp.sync is gone: the lanes of a single-warp role
        # no longer meet before (1) their stores or (2) the elected
        # thread's arrival that hands the stores over.
        m = nth(r"bar\.warp\.sync\s+-?\w+;", text, n)
        return text[:m.start()] + text[m.end():]
    if kind == "align1":
        # The tensor-map parameters lose their 64-byte alignment.
        mutated = text.replace(".param .align 64 .b8", ".param .align 1 .b8")
        if mutated == text:
            sys.exit("mutate-ptx: no 64-byte aligned parameter found")
        return mutated
    if kind == "no-mbarrier-fence":
        mutated = text.replace("fence.mbarrier_init.release.cluster;", "")
        if mutated == text:
            sys.exit("mutate-ptx: no fence.mbarrier_init found")
        return mutated
    # sm_90a.
    if kind == "no-wgmma-wait":
        # The n-th wgmma.wait_group is gone: the accumulators are read while
        # the tensor core still writes them.
        m = nth(r"wgmma\.wait_group\.sync\.aligned \d+;", text, n)
        return text[:m.start()] + text[m.end():]
    if kind == "no-bar-arrive":
        # The n-th ping-pong hand-over (bar.arrive on a named barrier other
        # than 0) is gone: the other consumer waits for its turn forever.
        m = nth(r"bar\.arrive\s+[1-9]\d*, \d+;", text, n)
        return text[:m.start()] + text[m.end():]
    if kind == "early-release":
        # The consumer's release that follows the n-th wgmma.wait_group
        # comes before it: the producer may load the next tile into the
        # stage an MMA of the group still reads.
        waits = list(re.finditer(r"wgmma\.wait_group\.sync\.aligned \d+;", text))
        if len(waits) < n:
            sys.exit("mutate-ptx: fewer than %d wgmma.wait_group" % n)
        wait = waits[n - 1]
        arrive = re.compile(r"mbarrier\.arrive\.shared\.b64\s+%rd\d+, \[%rd\d+\];").search(text, wait.end())
        if not arrive:
            sys.exit("mutate-ptx: no release after the wait")
        return (text[:wait.start()] + text[wait.end():arrive.end()] + "\n\t" +
                wait.group(0) + text[arrive.end():])
    if kind == "no-multicast":
        # CTA pairs: the n-th tcgen05.commit arrives on the issuing CTA's
        # barrier only, not on both CTAs' (its multicast mask dropped).
        m = nth(r"tcgen05\.commit\.cta_group::2\.mbarrier::arrive::one\.shared::cluster"
                r"\.multicast::cluster\.b64\s+(\[[^\]]+\]), %rs\d+;", text, n)
        return scoped(text, m, "tcgen05.commit.cta_group::2.mbarrier::arrive::one."
                      "shared::cluster.b64 %s;" % m.group(1))
    if kind == "no-cluster-sync":
        # CTA pairs: the n-th cluster barrier (arrive and wait) deleted: the
        # first is the prologue's, after the mbarrier inits; the others
        # precede a role's exit.
        pattern = r"barrier\.cluster\.arrive(\.aligned)?;\s*barrier\.cluster\.wait(\.aligned)?;"
        if arg == "exits":
            # Every one but the prologue's: no CTA waits for its peer to be
            # done before it leaves.
            first = nth(pattern, text, 1)
            return text[:first.end()] + re.sub(pattern, "", text[first.end():])
        m = nth(pattern, text, n)
        return text[:m.start()] + text[m.end():]
    if kind == "mirror-own":
        # CTA pairs: every arrival meant for the peer CTA's copy of a
        # mirrored barrier (the TMEM release both MMA warps wait on) made on
        # the arriving CTA's own copy instead: its peer rank, rank ^ 1, made
        # a move, so each CTA's copy counts its own warps twice.
        out, count = text, 0
        for m in re.finditer(r"xor\.b32\s+(%r\d+), (%r\d+), 1;", text):
            after = text[m.end():m.end() + 400]
            if re.search(r"mapa\.shared::cluster\.u32 %r\d+, %r\d+, " +
                         re.escape(m.group(1)) + ";", after):
                out = out.replace(m.group(0), "mov.b32 %s, %s;" % (m.group(1), m.group(2)), 1)
                count += 1
        if not count:
            sys.exit("mutate-ptx: no peer rank feeds a mapa")
        return out
    if kind == "tma-own-barrier":
        # CTA pairs: the n-th TMA copy completes on its own CTA's barrier
        # instead of the even CTA's (its mapa to rank 0 made a move): the
        # peer's half lands unannounced to the pair's MMA warp.
        copy = nth(r"cp\.async\.bulk\.tensor\.[^;]*\.cta_group::2 [^;]*\], "
                   r"\[(%rd?\d+)\](, %rd\d+)?;", text, n)
        register = copy.group(1)
        # The barrier's register, through a widening move, back to its mapa.
        widen = None
        for m in re.finditer(r"cvt\.u64\.u32\s+(%rd\d+), (%r\d+);", text[:copy.start()]):
            if m.group(1) == register:
                widen = m
        if widen:
            register = widen.group(2)
        mapa = None
        for m in re.finditer(r"mapa\.shared::cluster\.u32\s+(%r\d+), (%r\d+), 0;", text):
            if m.group(1) == register and m.start() < copy.start():
                mapa = m
        if not mapa:
            sys.exit("mutate-ptx: no mapa defines the copy's barrier")
        return scoped(text, mapa, "mov.b32 %s, %s;" % (mapa.group(1), mapa.group(2)))
    sys.exit("mutate-ptx: unknown mutation " + name)


if __name__ == "__main__":
    name, source, target = sys.argv[1:4]
    with open(source) as f:
        ptx = f.read()
    with open(target, "w") as f:
        f.write(mutate(name, ptx))
