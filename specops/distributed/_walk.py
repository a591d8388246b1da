"""The verification walk (reference sections 1, 3, 7-10) over a vocabulary shard, vectorised
over requests: every rank runs it on the same exchanged numbers (section 12).

Memory: the transformed rows (``_transform``, one float32 buffer of the rows' size) are the
only buffer of size B (K+1) V_local; every per-token sum of the walk (the beta sums, block
verification's residual masses, the draw's weights) runs a few requests at a time (on the
CPU one request at a time in the C++ passes, ``_native.row_sums`` / ``draw_search``)."""
from __future__ import annotations

from typing import Optional

import torch

from specops import reference as _ref
from specops._args import Canonical
from specops._contract import accepts, malformed_params, rate_of_sum, stream
from specops.backends import registry
from specops.distributed import _draw
from specops.distributed._transform import RowSource, chunk_rows, transform

_native = registry.shard_passes()      # the C++ passes on CPU shards (or unusable)

M32 = 0xFFFFFFFF
W_SCALE = float(2 ** _ref.W_SCALE_BITS)


def _first(mask: torch.Tensor, default: torch.Tensor) -> torch.Tensor:
    """Per row, the first column where mask holds, else ``default``."""
    if mask.shape[1] == 0:
        return default
    return torch.where(mask.any(1), mask.to(torch.int8).argmax(1), default)


def _at(t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """t[b, j[b]] (j clamped into the row; zeros for an empty row)."""
    if t.shape[1] == 0:
        return t.new_zeros(t.shape[:1])
    return t.gather(1, j.clamp(0, t.shape[1] - 1)[:, None]).squeeze(1)


def _bits(v: torch.Tensor) -> torch.Tensor:
    return v.contiguous().view(torch.int32).to(torch.int64) & M32


def _from_bits(b: torch.Tensor) -> torch.Tensor:
    return torch.where(b >= (1 << 31), b - (1 << 32), b).to(torch.int32).view(torch.float32)


def _block_weights(p, q, onehot_y, rho):
    """D(x) = trunc(d * 2**60), d = rho p - max(q, 0) where rho p > q (float64; section 9);
    q None: the point mass ``onehot_y``.  p, q [..., V_local], rho [...]."""
    pd = p.double().mul_(rho[..., None])          # in place: three float64 rows at most
    qd = onehot_y.double() if q is None else q.double()
    keep = pd > qd                                # NaN q: False
    d = pd.sub_(qd.clamp_(min=0.0)).mul_(W_SCALE).masked_fill_(~keep, 0.0)
    return d.to(torch.int64)


class _Rows:
    """[B, n, V_local] rows of every request: a view, or ``src[index]`` (index [B, n] inside
    ``src``) gathered only where read, a few requests at a time."""

    def __init__(self, view: Optional[torch.Tensor] = None, src=None, index=None):
        self.view, self.src, self.index = view, src, index

    def block(self, b0: int, b1: int) -> torch.Tensor:
        if self.view is not None:
            return self.view[b0:b1]
        idx = self.index[b0:b1]
        if self.src.shape[0] == 0:
            return self.src.new_zeros((*idx.shape, self.src.shape[1]))
        return self.src[idx]

    def at(self, j: torch.Tensor) -> torch.Tensor:
        """[B, V_local]: request b's row at position j[b] (clamped)."""
        if self.view is not None:
            jj = j.clamp(0, self.view.shape[1] - 1)
            return self.view.gather(1, jj[:, None, None].expand(-1, 1, self.view.shape[2])
                                    ).squeeze(1)
        if self.src.shape[0] == 0:
            return self.src.new_zeros((j.shape[0], self.src.shape[1]))
        return self.src[_at(self.index, j)]

    def values(self, col: torch.Tensor) -> torch.Tensor:
        """[B, n]: the entry of each row at column col[b, j] (inside the shard)."""
        if self.view is not None:
            return self.view.gather(2, col[..., None]).squeeze(2)
        if self.src.shape[0] == 0:
            return self.src.new_zeros(col.shape)
        return self.src[self.index, col]


def _flat(rows: Optional[_Rows], Vl: int):
    """(base [N, V_local] float32, row index [B, n] into it) of ``rows`` for the C++
    passes, or None where they cannot read it (another dtype or layout, no rows)."""
    if rows is None:
        return None
    if rows.view is not None:
        base, idx = rows.view.reshape(-1, Vl), None
        n = rows.view.shape[1]
    else:
        base, idx = rows.src, rows.index
    if base.dtype != torch.float32 or base.shape[0] == 0 or base.dim() != 2 or \
            (Vl > 1 and base.stride(1) != 1):
        return None
    if idx is None:
        idx = torch.arange(base.shape[0], device=base.device).view(-1, n)
    return base, idx


def _sums(B: int, n: int, Vl: int, device, fn) -> torch.Tensor:
    """[B, n] int64: ``fn(b0, b1)`` ([b1 - b0, n] per-row sums) a few requests at a time."""
    out = torch.empty((B, n), dtype=torch.int64, device=device)
    step = chunk_rows(max(n, 1) * Vl, device)
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        out[b0:b1] = fn(b0, b1)
    return out


def verify(comm, a: Canonical, vocab_start: int, V: int, method: str, want_rates: bool,
           has_topk: bool, has_topp: bool, sampled: bool = True):
    """The canonical arguments ``a`` ([B] tensors; target and draft hold this rank's
    columns) -> (token_ids, num_accepted, valid, accept_rates or None)."""
    tgt, dev = a.target, a.target.device
    B, M = a.batch, int(a.max_k)
    N, Vl = tgt.shape
    j1 = torch.arange(M + 1, device=dev, dtype=torch.int64)[None, :]
    jm = j1[:, :M]
    greedy = a.inv_temp == 0

    # Which rows and ids each request uses (sections 1, 7, 8).
    T = a.draft_ids.shape[0]
    n_rows = T if a.draft is None else min(T, a.draft.shape[0])
    dpos = a.draft_row_start[:, None] + jm                            # [B, M]
    ids = a.draft_ids[dpos.clamp(0, max(T - 1, 0))] if T else torch.full_like(dpos, -1)
    in_nd = jm < a.num_draft[:, None]
    id_bad = in_nd & (dpos >= 0) & (dpos < T) & ((ids < -1) | (ids >= V))
    ok_req = ~malformed_params(a.inv_temp, a.top_k, a.top_p, a.min_p, a.target_is_probs) \
        & (a.num_draft >= 0) & (a.num_draft <= M) & ~id_bad.any(1)
    row_out = (dpos < 0) | (dpos >= n_rows)
    cut = in_nd & (row_out | (ids < 0) | (ids >= V))
    kb = _first(cut, a.num_draft.clamp(0, M))
    oob = _at(cut & row_out, kb) & (kb < a.num_draft) if M else torch.zeros_like(ok_req)
    tpos = a.target_row_start[:, None] + j1                           # [B, M + 1]
    t_in = (tpos >= 0) & (tpos < N)

    # The transform of every row a request may read, statistics reduced over the ranks.
    # The padded layout's rows are already in (request, position) order: read in place.
    def rep(t, n):
        return t[:, None].expand(B, n).reshape(-1)
    in_order = a.padded and N == B * (M + 1)
    blocks = [RowSource(tgt, None if in_order else tpos.clamp(0, max(N - 1, 0)).reshape(-1),
                        a.target_is_probs)]
    params = [rep(t, M + 1) for t in (a.inv_temp, a.top_k, a.top_p, a.min_p)]
    qlog = a.draft is not None and not a.draft_is_probs and M > 0
    d_index = dpos.clamp(0, max(0 if a.draft is None else a.draft.shape[0] - 1, 0))
    d_in_order = a.padded and a.draft is not None and a.draft.shape[0] == B * M
    if qlog:
        blocks.append(RowSource(a.draft, None if d_in_order else d_index.reshape(-1), False))
        params = [torch.cat([p, rep(t, M)]) for p, t in
                  zip(params, (a.inv_temp, a.top_k, a.top_p, a.min_p))]
    nt = B * (M + 1)
    # The C++ walk reads p at one column of most target rows (p(y)) and whole rows only
    # where it sums weights: their renormalisation waits until a pass reads them.
    R = params[0].shape[0]
    lazy = torch.arange(R, device=dev) < nt if _native.usable(dev) and M > 0 else None
    Q = None
    if a.draft is not None and M > 0 and not qlog:
        Q = _Rows(a.draft.view(B, M, Vl)) if d_in_order else \
            _Rows(src=a.draft, index=d_index)
    local = ids - vocab_start
    own = (local >= 0) & (local < Vl)
    lc = local.clamp(0, Vl - 1)
    # p_j(y_j), q_j(y_j) ride on the masses exchange where nothing else of the walk's
    # exchange is needed (no beta sums) and p(y) follows from e(y) (logits target rows on
    # the C++ path, a draft given as probabilities or a point mass): one hop fewer.
    t_rows = torch.arange(nt, device=dev).view(B, M + 1)[:, :M]      # (b, j < M) rows
    peek = None
    if lazy is not None and sampled and not qlog and not a.target_is_probs and \
            not (want_rates and Q is not None):
        peek = (t_rows, lc, own,
                [] if Q is None else [torch.where(own, _bits(Q.values(lc)), 0)])
    rows = transform(comm, blocks, *params, vocab_start, V, has_topk, has_topp, sampled,
                     lazy, peek)
    pend = rows.pending
    P = _Rows(rows.p[:nt].view(B, M + 1, Vl))
    t_ok = rows.valid[:nt].view(B, M + 1) & t_in                      # full row check
    t_arg = rows.argmax[:nt].view(B, M + 1)
    if qlog:
        q_ok = rows.valid[nt:].view(B, M)
        rows.p[nt:].masked_fill_(~q_ok.reshape(-1, 1), float("nan"))  # unusable: q = NaN
        Q = _Rows(rows.p[nt:].view(B, M, Vl))
    t_valid = rows.valid[:nt].view(B, M + 1)[:, :M]
    if peek is not None:
        # The values exchanged with the masses: e(y) on a hot row (p from it, as the
        # renormalisation computes it), 0 on any other logits row (zeroed by the exp pass),
        # where a valid greedy row's p(y) is its one-hot.
        got_y = rows.peeked[:nt].view(B, M + 1, -1)[:, :M]
        p_peek = pend.p_at(t_rows, _from_bits(got_y[..., 0]))
        p_peek = torch.where(greedy[:, None] & t_valid & (t_arg[:, :M] == ids), 1.0, p_peek)

    # Round: p_j(y_j), q_j(y_j) from the rank owning y_j (and the beta sums), unless they
    # came with the masses (peek) or every row is greedy.
    def onehot(b0, b1):                                               # [c, M, V_local]
        oh = torch.zeros((b1 - b0, M, Vl), dtype=torch.bool, device=dev)
        return oh.scatter_(2, lc[b0:b1, :, None], own[b0:b1, :, None])

    Pm = _Rows(P.view[:, :M])                                         # the draft positions
    native = _native.usable(dev) and M > 0
    fp = _flat(P, Vl) if native else None
    fq = _flat(Q, Vl) if native and Q is not None else None
    native = fp is not None and (Q is None or fq is not None)
    if pend is not None and not native:                # the torch walk reads whole rows
        pend.finish(torch.arange(nt, device=dev))
        pend = None
    y_loc = torch.where(own, lc, -1)

    def refs(p_row, q_row, kind, rho=None, y=None):   # rows of the C++ passes
        n = p_row.numel()
        return _native.Refs(fp[0], p_row.reshape(-1), None if fq is None else fq[0],
                            None if fq is None else q_row.reshape(-1),
                            torch.full((n,), -1) if y is None else y.reshape(-1),
                            torch.full((n,), kind, dtype=torch.int8) if isinstance(kind, int)
                            else kind, torch.ones(n, dtype=torch.float64) if rho is None
                            else rho.reshape(-1))

    if pend is not None and sampled and ((want_rates and Q is not None) or
                                         (method == "block" and M > 1)):
        pend.finish(fp[1][:, :M])                  # every draft position's row is summed
    if peek is not None:
        got = None
        p_y = p_peek.double()
        q_y = _from_bits(got_y[..., 1]).double() if Q is not None else torch.ones_like(p_y)
    elif sampled:
        p_own = Pm.values(lc)
        if pend is not None:
            p_own = pend.p_at(fp[1][:, :M], p_own)
        parts = [torch.where(own, _bits(p_own), 0)]
        if Q is not None:
            parts.append(torch.where(own, _bits(Q.values(lc)), 0))
        if want_rates and Q is not None and native:
            parts.append(_native.row_sums(refs(fp[1][:, :M], fq[1], _native.MIN), False)[:, 0]
                         .view(B, M))
        elif want_rates and Q is not None:
            def beta(b0, b1):
                q = Q.block(b0, b1)
                m = torch.where(q > 0, torch.minimum(Pm.block(b0, b1), q), 0.0)
                return (m * W_SCALE).to(torch.int64).sum(2)
            parts.append(_sums(B, M, Vl, dev, beta))
        got = torch.stack(parts, 2)
        if M:
            got = comm.all_reduce(got, "sum", "p(y), q(y), beta sums")
        p_y = _from_bits(got[..., 0]).double()
        q_y = _from_bits(got[..., 1]).double() if Q is not None else torch.ones_like(p_y)
    else:
        # Every row greedy on every rank (transform wrote no p): p_j is the one-hot at the
        # row's global argmax where the row is valid, so p_j(y_j) is known on every rank
        # without an exchange, q is never read (greedy rows accept y_j == argmax), and nothing
        # is drawn.  The walk below then gives the tokens the exchanged numbers give.
        got = None
        p_y = (t_valid & (t_arg[:, :M] == ids)).double()
        q_y = torch.ones_like(p_y)

    philox = _native.stream if _native.usable(dev) else stream
    w0, _ = philox(a.seed, a.offset, M + 1, _ref.TAG_ACCEPT)
    u = w0.double() * 2.0 ** -32
    in_block = jm < kb[:, None]
    g = greedy[:, None]
    rates = None
    if want_rates:                      # section 10: p(y) for point masses and greedy rows
        rates = p_y.float()
        if Q is not None and got is not None:         # the beta sums were exchanged
            rates = torch.where(g, rates, rate_of_sum(got[..., 2]))

    block = method == "block"
    rho_at = torch.ones(B, dtype=torch.float64, device=dev)
    kind_block = torch.zeros(B, dtype=torch.bool, device=dev)
    # The token walk (section 1) and, for block requests, section 9.
    row_ok = t_in[:, :M] & (t_ok[:, :M] | (bool(a.target_is_probs) & ~g))
    acc = row_ok & torch.where(g, ids == t_arg[:, :M], accepts(u[:, :M], q_y, p_y))
    stop = _first(in_block & ~acc, kb)
    bad = (stop < kb) & ~_at(row_ok, stop)
    bad |= (stop == kb) & oob
    nacc = stop
    rate_ok = (jm <= stop[:, None]) & in_block & row_ok & t_ok[:, :M]
    if block:
        blk = ~greedy
        q_bad = torch.zeros_like(in_block) if not qlog else ~q_ok & in_block
        t_cut = ~t_ok | ((j1 == kb[:, None]) & oob[:, None])
        t_cut &= j1 <= kb[:, None]
        any_cut = t_cut | torch.cat([q_bad, torch.zeros_like(t_cut[:, :1])], 1)
        e = _first(any_cut, kb)
        end_ok = ~_at(t_cut, e)
        rho = [torch.ones(B, dtype=torch.float64, device=dev)]
        for j in range(M):
            t = rho[j] * p_y[:, j]
            qv = q_y[:, j]
            nxt = torch.where((t > 0) & (t >= qv), 1.0,
                              torch.where((t > 0) & (qv > 0), t / qv, 0.0))
            rho.append(torch.where(torch.isnan(nxt), 0.0, nxt))
        rhos = torch.stack(rho, 1)                                    # [B, M + 1]
        h = torch.ones_like(rhos)
        if not sampled:                 # no block request: h is not read
            pass
        elif M > 1 and native:
            S = _native.row_sums(refs(fp[1][:, :M], None if fq is None else fq[1],
                                      _native.BLOCK, rhos[:, :M].contiguous(), y_loc),
                                 False)[:, 0].view(B, M).contiguous()
        elif M > 1:
            def residual(b0, b1):
                q = None if Q is None else Q.block(b0, b1)
                oh = onehot(b0, b1) if Q is None else None
                return _block_weights(Pm.block(b0, b1), q, oh, rhos[b0:b1, :M]).sum(2)
            S = _sums(B, M, Vl, dev, residual)
        if M > 1 and sampled:
            S = comm.all_reduce(S, "sum", "block residual sums")
            z = S.double() * 2.0 ** -60
            den = z + (1.0 - rhos[:, :M])
            h[:, :M] = torch.where(den > 0, z / den, 1.0)
        jj = j1[:, 1:]
        hit = (jj < e[:, None]) & (u[:, :M] < h[:, 1:])
        hit |= (jj == e[:, None]) & (u[:, :M] < _at(rhos, e)[:, None])
        tau = torch.where(hit.any(1), M - hit.flip(1).to(torch.int8).argmax(1), 0) \
            if M else torch.zeros_like(e)
        b_bad = (tau == e) & ~end_ok
        nacc = torch.where(blk, tau, nacc)
        bad = torch.where(blk, b_bad, bad)
        kind_block = blk & (tau < e)
        rho_at = _at(rhos, tau)
        rate_ok = torch.where(blk[:, None], in_block & (jm <= e[:, None]) & t_ok[:, :M],
                              rate_ok)

    # The sampled position: its row's full check, then the draw (section 5).
    js = nacc
    bad |= ~_at(t_ok, js)
    jq = js.clamp(0, max(M - 1, 0))
    bonus = js >= kb
    if block:                           # a block's end (tau == e) draws from p_e
        bonus = bonus | (~greedy & ~kind_block)
    y_own = _at(own, jq) if M else torch.zeros_like(bonus)
    y_col = _at(lc, jq) if M else torch.zeros_like(js)
    cols = torch.arange(Vl, device=dev)

    def weights(b0, b1):
        """(W, Wp) of requests b0..b1-1 at their sampled position (section 5)."""
        sl = slice(b0, b1)
        p_s = _sub(P, sl).at(js[sl])
        q_s = None if Q is None else _sub(Q, sl).at(jq[sl])
        oh = (cols[None, :] == y_col[sl, None]) & y_own[sl, None] if M else None
        if q_s is None:
            r = torch.where(oh, 0.0, p_s) if M else p_s
        else:
            r = torch.where(p_s > q_s, p_s - q_s.clamp(min=0.0), 0.0)
        Wp = (p_s * W_SCALE).to(torch.int64)
        W = torch.where(bonus[sl, None], Wp, (r * W_SCALE).to(torch.int64))
        if block and M:
            W = torch.where(kind_block[sl, None], _block_weights(p_s, q_s, oh, rho_at[sl]), W)
        return W, Wp

    w0, w1 = philox(a.seed, a.offset, M + 1, _ref.TAG_SAMPLE)
    U = _at(w0 | (w1 << 32), js)
    if not sampled:                     # every token is the argmax (below)
        drawn = torch.full_like(js, -1)
    elif native:                        # the same weights, summed and searched in C++
        kind = torch.where(bonus, _native.BONUS, _native.RESIDUAL).to(torch.int8)
        if block:
            kind = torch.where(kind_block, _native.BLOCK, kind).to(torch.int8)
        if pend is not None:
            pend.finish(_at(fp[1], js))
        r_of = refs(_at(fp[1], js), None if fq is None else _at(fq[1], jq), kind, rho_at,
                    _at(y_loc, jq))
        sums = _native.row_sums(r_of, True).t().contiguous()

        def search(use_w, t, owner):
            r_t = r_of._replace(kind=torch.where(use_w, r_of.kind, _native.BONUS)
                                .to(torch.int8))
            return _native.draw_search(r_t, torch.where(owner, t, -1))
        drawn = _draw.finish(comm, sums, U, vocab_start, search)
    else:
        drawn = _draw.draw(comm, weights, B, chunk_rows(Vl, dev), U, vocab_start)
    tok = torch.where(greedy, _at(t_arg, js), drawn)
    good = ok_req & ~bad & (tok >= 0) & (tok < V)

    # The outputs.
    ids_pad = torch.full((B, M + 1), -1, dtype=torch.int64, device=dev)
    ids_pad[:, :M] = ids
    out = torch.where(j1 < nacc[:, None], ids_pad, -1)
    out = torch.where((j1 == nacc[:, None]) & good[:, None], tok[:, None], out)
    out = torch.where(ok_req[:, None], out, -1)
    nacc = torch.where(ok_req, nacc, 0)
    if rates is not None:
        rates = torch.where(rate_ok & ok_req[:, None], rates, float("nan"))
    return out.to(torch.int32), nacc.to(torch.int32), good, rates


def _sub(rows: _Rows, sl: slice) -> _Rows:
    """The requests ``sl`` of ``rows``."""
    if rows.view is not None:
        return _Rows(rows.view[sl])
    return _Rows(src=rows.src, index=rows.index[sl])
