"""fa4 under ``torch.compile``: SDPA calls replaced by ``torch.ops.fa4.attention``.

Models written with ``F.scaled_dot_product_attention`` run fa4's kernels
without an edit::

    import fa4.torch
    compiled = torch.compile(model, backend=fa4.torch.backend)   # or:
    fa4.torch.enable()              # inductor, for every later compilation
    compiled = torch.compile(model)

The rewrite walks the FX graph and replaces each SDPA call that fa4
computes exactly — fp16/bf16, head dim 32/64/96/128, no ``attn_mask``, no
dropout, ``is_causal`` (SDPA's causal mask is aligned top-left: fa4's causal
where seq_q == seq_k, a window where seq_q > seq_k), any ``scale``, and
grouped-query heads (``enable_gqa``) — by transposed views of q, k and v
into fa4's (batch, seq, heads, head_dim) layout, ``torch.ops.fa4.attention``,
and a view of O back. Every other call is left to PyTorch, with the reason.
With ``FA4_LOG_SDPA=1`` (or ``debug=True``) each call site gets one line on
stderr saying which it was and why.
"""

from __future__ import annotations

import math
import operator
import os
import sys
from typing import Callable, List, Optional, Tuple

import torch
import torch.fx

from . import _torch  # registers torch.ops.fa4.attention

__all__ = ["backend", "enable", "replace_sdpa"]

_SDPA = (torch._C._nn.scaled_dot_product_attention,
         torch.nn.functional.scaled_dot_product_attention)
_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal",
               "scale", "enable_gqa")
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False,
             "scale": None, "enable_gqa": False}
_HEAD_DIMS = (32, 64, 96, 128)


def _arguments(node: torch.fx.Node) -> Optional[dict]:
    """The call's arguments by SDPA's parameter names, None when it has
    more than SDPA takes."""
    if len(node.args) > len(_PARAMETERS):
        return None
    given = dict(zip(_PARAMETERS, node.args))
    for name, value in node.kwargs.items():
        if name not in _PARAMETERS or name in given:
            return None
        given[name] = value
    return {**_DEFAULTS, **given}


def _example(value):
    """The fake tensor a graph value stands for, None when unknown."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("example_value", value.meta.get("val"))
    return value if isinstance(value, torch.Tensor) else None


def _plan(node: torch.fx.Node) -> Tuple[Optional[dict], str]:
    """How fa4 computes this SDPA call (causal, window, scale), or None and
    why it cannot."""
    args = _arguments(node)
    if args is None:
        return None, "arguments SDPA does not take"
    q, k, v = (_example(args[name]) for name in ("query", "key", "value"))
    if q is None or k is None or v is None:
        return None, "q, k or v of unknown shape"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None, f"rank {q.dim()} inputs (fa4 takes (batch, heads, seq, dim))"
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype \
            or v.dtype != q.dtype:
        return None, f"dtype {q.dtype} (fa4 takes float16 or bfloat16)"
    if q.device.type not in ("cpu", "cuda"):
        return None, f"tensors on {q.device}"
    # Under autocast SDPA computes in the autocast type, not the inputs'.
    out = _example(node)
    if out is not None and out.dtype != q.dtype:
        return None, (f"autocast to {out.dtype} around {q.dtype} inputs (fa4 "
                      "computes in its inputs' type)")
    head_dims = {t.shape[-1] for t in (q, k, v)}
    head_dim = q.shape[-1]
    if len(head_dims) != 1:
        return None, (f"head dims {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]} "
                      "for q, k and v (this rewrite takes one head dim for "
                      "all three; fa4.attention itself takes v's own, as "
                      "(192, 128))")
    if not isinstance(head_dim, int):
        return None, (f"a symbolic head dim ({head_dim}; with dynamic=True "
                      "mark only the sequence dimensions dynamic)")
    if head_dim not in _HEAD_DIMS:
        return None, (f"head dim {head_dim} (fa4 takes "
                      f"{', '.join(map(str, _HEAD_DIMS))})")
    batches = {t.shape[0] for t in (q, k, v)}
    if len(batches) != 1:
        return None, ("batches {} of q, k and v (broadcast, or not known to "
                      "be equal; fa4 takes one batch)").format(
                          ", ".join(str(t.shape[0]) for t in (q, k, v)))
    if args["attn_mask"] is not None:
        return None, "an attn_mask tensor (fa4 expresses masks as causal, a window or a mask_mod)"
    dropout = args["dropout_p"]
    if not isinstance(dropout, (int, float)) or dropout != 0.0:
        return None, f"dropout_p {dropout} (fa4 has no dropout)"
    causal, scale, gqa = args["is_causal"], args["scale"], args["enable_gqa"]
    if not isinstance(causal, bool) or not isinstance(gqa, bool):
        return None, "is_causal or enable_gqa not a constant"
    if scale is not None and not isinstance(scale, (int, float)):
        return None, "a scale that is not a constant"
    if scale is not None and not (0.0 < scale and math.isfinite(scale * 1.4426950408889634)):
        return None, f"scale {scale} (fa4 takes a positive, finite scale)"
    q_heads, kv_heads = q.shape[1], k.shape[1]
    if not all(isinstance(h, int) for h in (q_heads, kv_heads)):
        return None, "symbolic head counts"
    if q_heads != kv_heads and not (gqa and kv_heads > 0 and q_heads % kv_heads == 0):
        return None, f"{q_heads} query heads over {kv_heads} K/V heads without enable_gqa"
    if k.shape[2] != v.shape[2] or k.shape[1] != v.shape[1]:
        return None, "k and v of different shapes"
    plan = {"causal": False, "window_left": -1, "window_right": -1,
            "scale": None if scale is None else float(scale)}
    if causal:
        # SDPA's causal mask is aligned to the top-left corner: query i sees
        # keys j <= i. fa4's aligns to the bottom-right (j <= i + seq_k -
        # seq_q): the same where the lengths agree, and a window reaching
        # seq_q - seq_k keys to the right where there are fewer keys.
        seq_q, seq_k = q.shape[2], k.shape[2]
        if seq_q == seq_k:
            plan["causal"] = True
        elif isinstance(seq_q, int) and isinstance(seq_k, int) and seq_q > seq_k:
            plan["window_right"] = seq_q - seq_k
        else:
            return None, ("is_causal with seq_q < seq_k, or lengths not known "
                          "to be equal (SDPA aligns causal top-left, fa4 "
                          "bottom-right; those rows would see no key)")
    return plan, "fa4.attention" + (" causal" if plan["causal"] else "") + \
        (f" window (-1, {plan['window_right']})" if plan["window_right"] >= 0 else "") + \
        f", head dim {head_dim}"


def _where(node: torch.fx.Node) -> str:
    """The call site: the last frame of the node's stack trace."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines()
             if line.strip().startswith("File ")]
    return lines[-1] if lines else node.name


def replace_sdpa(gm: torch.fx.GraphModule, debug: Optional[bool] = None
                 ) -> List[Tuple[str, bool, str]]:
    """Rewrites `gm` and the graph modules inside it (the bodies of
    checkpoint and control-flow regions) in place: each SDPA call fa4
    computes exactly becomes ``torch.ops.fa4.attention`` on transposed
    views. Returns one (call site, replaced, reason) per SDPA call; with
    `debug` (default: the environment's FA4_LOG_SDPA) also prints them."""
    if debug is None:
        debug = os.environ.get("FA4_LOG_SDPA", "") not in ("", "0")
    report = []
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            report.extend(_replace_in(module, debug))
    return report


def _replace_in(gm: torch.fx.GraphModule, debug: bool
                ) -> List[Tuple[str, bool, str]]:
    report = []
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        plan, reason = _plan(node)
        report.append((_where(node), plan is not None, reason))
        if debug:
            print(f"fa4: SDPA at {_where(node)}: "
                  f"{'replaced by ' + reason if plan else 'left to PyTorch: ' + reason}",
                  file=sys.stderr)
        if plan is None:
            continue
        args = _arguments(node)
        with graph.inserting_before(node):
            views = [graph.call_method("transpose", (args[name], 1, 2))
                     for name in ("query", "key", "value")]
            results = graph.call_function(
                torch.ops.fa4.attention.default,
                # The LSE too: a compiled training step traces the backward,
                # which reads it.
                (*views, plan["causal"], plan["window_left"],
                 plan["window_right"], 0.0, plan["scale"], True))
            out = graph.call_function(operator.getitem, (results, 0))
            # SDPA's output is (batch, heads, seq, head_dim), contiguous as
            # code after it may assume (a view): O is (batch, seq, heads,
            # head_dim), so its transpose is copied.
            back = graph.call_method(
                "contiguous", (graph.call_method("transpose", (out, 1, 2)),))
        node.replace_all_uses_with(back)
        graph.erase_node(node)
    if any(replaced for _, replaced, _ in report):
        graph.lint()
        gm.recompile()
    return report


def backend(gm: torch.fx.GraphModule, example_inputs, inner: str = "inductor"):
    """A ``torch.compile`` backend: SDPA calls replaced (replace_sdpa), then
    the graph compiled by `inner` ("inductor", "aot_eager", "eager")::

        torch.compile(model, backend=fa4.torch.backend)
        torch.compile(model, backend=functools.partial(fa4.torch.backend, inner="aot_eager"))
    """
    replace_sdpa(gm)
    from torch._dynamo.backends.registry import lookup_backend
    return lookup_backend(inner)(gm, example_inputs)


class _ReplaceSdpaPass:
    """replace_sdpa as inductor's pre-grad custom pass, after any pass that
    was set before; keyed for inductor's cache by this file and the
    previous pass."""

    def __init__(self, previous, debug):
        self.previous = previous
        self.debug = debug
        # Off once its enable() is disabled, even while a later enable()
        # still chains to it.
        self.active = True

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.previous is not None:
            self.previous(graph)
        if self.active and graph.owning_module is not None:
            replace_sdpa(graph.owning_module, self.debug)

    def uuid(self):
        from torch._inductor.custom_graph_pass import get_hash_for_files
        previous = getattr(self.previous, "uuid", lambda: self.previous)()
        return (get_hash_for_files((__file__,)), self.active, previous)


try:  # the interface inductor's cache asks of a custom pass
    from torch._inductor.custom_graph_pass import CustomGraphPass
    CustomGraphPass.register(_ReplaceSdpaPass)
except (ImportError, AttributeError):  # pragma: no cover - older torch
    pass


class enable:
    """Turns the rewrite on for ``torch.compile`` with the default
    (inductor) backend: it runs as inductor's pre-grad custom pass, after
    any pass already set. ``fa4.torch.enable()`` alone turns it on for the
    process (``.disable()`` turns it off); ``with fa4.torch.enable():`` for
    the block. It applies to the graphs compiled while it is on, and
    torch.compile compiles at a function's first call, not at
    ``torch.compile(...)``: a function compiled before (without it) keeps
    that code until ``torch._dynamo.reset()``. With a warm inductor cache
    the pass does not run again (its result is cached), so FA4_LOG_SDPA
    prints nothing then."""

    def __init__(self, debug: Optional[bool] = None):
        import torch._inductor.config as config
        self._config = config
        self._previous = config.pre_grad_custom_pass
        self._pass = _ReplaceSdpaPass(self._previous, debug)
        config.pre_grad_custom_pass = self._pass

    def disable(self) -> None:
        """Turns this rewrite off, and puts back the pass that was set
        before where this one is still the one set (an enable() after it
        keeps chaining to it, which then only forwards)."""
        self._pass.active = False
        if self._config.pre_grad_custom_pass is self._pass:
            self._config.pre_grad_custom_pass = self._previous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disable()
        return False
