"""A design made runnable: row tables, drafting, the sampler's arguments, output checks.

``ChainCase`` / ``TreeCase`` turn a design into batches of the sampler protocol's arguments
(torch CPU tensors), drafted with the kit's generator exactly as the design's law says, and
read the sampler's token ids back: well-formedness (ids in [-1, V), the accepted prefix equal
to the drafts / a path of the tree, one emitted token, then -1) and the zero-probability rule
(no accepted or emitted token with target probability 0) are checked on every row, with no
statistics.  Rows are looked up in tables indexed by the prefix's base-V code, so a batch of
any size costs a few numpy gathers.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
import torch

from specops.conformance import laws


def _table(row_fn, V: int, length: int) -> np.ndarray:
    """[V**length, V] float32: row_fn(prefix) for every prefix of that length (base-V code,
    first token most significant)."""
    rows = [row_fn(tuple(int(t) for t in np.unravel_index(c, (V,) * length)))
            for c in range(V ** length)]
    return np.asarray(rows, dtype=np.float32).reshape(V ** length, V)


def _cdf(table: np.ndarray) -> np.ndarray:
    t = table.astype(np.float64)
    c = np.cumsum(t / t.sum(-1, keepdims=True), -1)
    c[:, -1] = 1.0
    return c


def inverse_cdf(cdf_rows: np.ndarray, rng) -> np.ndarray:
    """One token per row; u in (0, 1] so that no zero-probability token is ever drawn."""
    u = 1.0 - rng.random(cdf_rows.shape[0])
    return (cdf_rows < u[:, None]).sum(1)


class _Case:
    """What chain and tree cases share: target tables, output reading, completion."""
    kind = ""

    def __init__(self, design, method: str, width: int):
        self.design, self.method, self.V, self.width = design, method, design.V, width
        self.P = [_table(design.target, self.V, j) for j in range(width)]
        self.P_cdf = [_cdf(t) for t in self.P]

    @property
    def name(self) -> str:
        return self.design.name

    @cached_property
    def joint(self):
        return laws.law_or_none(self.design, self.kind, self.method)

    def read(self, out, n: int):
        """(tokens [n, width] int64, L [n], problems): L = tokens emitted (accepted + 1),
        -1 for a malformed row; problems lists (what, example row index)."""
        problems = []
        try:
            arr = out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
            shape = tuple(arr.shape)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:                  # noqa: BLE001 (SystemExit from __array__)
            return None, None, [(f"output not readable as an array: {exc!r}", None)]
        if shape != (n, self.width):
            return None, None, [(f"output shape {shape}, expected ({n}, {self.width})", None)]
        if not np.issubdtype(arr.dtype, np.integer):
            return None, None, [(f"output dtype {arr.dtype}, expected an integer type", None)]
        tok = arr.astype(np.int64)
        L = (tok >= 0).cumprod(1).sum(1)
        bad = (tok < -1) | (tok >= self.V)
        tail = (tok >= 0) & (np.arange(self.width)[None, :] >= L[:, None])
        for what, mask in (("an id outside [-1, V)", bad.any(1)),
                           ("no emitted token (first id is -1)", L == 0),
                           ("an id after the first -1", tail.any(1))):
            if mask.any():
                problems.append((what, int(np.flatnonzero(mask)[0])))
        L = np.where(bad.any(1) | tail.any(1) | (L == 0), -1, L)
        return tok, L, problems

    def zero_target(self, tok, L):
        """Rows where an accepted or emitted token has target probability 0 at its position
        (given the prefix before it)."""
        hit = np.zeros(len(L), dtype=bool)
        code = np.zeros(len(L), dtype=np.int64)
        for i in range(self.width):
            live = L > i
            t = np.where(live, tok[:, i], 0)
            hit |= live & (self.P[i][code, t] == 0)
            code = code * self.V + t
        return hit

    def complete(self, tok, L, rng) -> np.ndarray:
        """Codes (base V, width digits) of the outputs completed by sampling the target."""
        full = tok.copy()
        code = np.zeros(len(L), dtype=np.int64)
        for i in range(self.width):
            need = L <= i
            if need.any():
                full[need, i] = inverse_cdf(self.P_cdf[i][code[need]], rng)
            code = code * self.V + full[:, i]
        return code


class ChainCase(_Case):
    kind = "chain"

    def __init__(self, design, method: str = "token"):
        super().__init__(design, method, design.K + 1)
        K, V = design.K, design.V
        self.K = K
        self.draft_width = K
        self.Q = None if design.draft is None else [_table(design.draft, V, j) for j in range(K)]
        self.prop_cdf = [_cdf(_table(lambda pre: laws.chain_proposal(design, pre), V, j))
                         for j in range(K)]

    def draw(self, n: int, rng) -> np.ndarray:
        drafts = np.zeros((n, self.K), dtype=np.int64)
        code = np.zeros(n, dtype=np.int64)
        for j in range(self.K):
            drafts[:, j] = inverse_cdf(self.prop_cdf[j][code], rng)
            code = code * self.V + drafts[:, j]
        return drafts

    def arguments(self, drafts: np.ndarray, seeds: np.ndarray) -> tuple:
        n = len(drafts)
        codes = [np.zeros(n, dtype=np.int64)]
        for j in range(self.K):
            codes.append(codes[-1] * self.V + drafts[:, j])
        target = np.stack([self.P[j][codes[j]] for j in range(self.K + 1)], 1)
        draft = (None if self.Q is None else
                 torch.from_numpy(np.stack([self.Q[j][codes[j]] for j in range(self.K)], 1)))
        return (torch.from_numpy(target), draft, torch.from_numpy(drafts.copy()),
                torch.from_numpy(seeds.astype(np.int64)))

    def check_prefix(self, tok, L, drafts):
        """Rows whose accepted tokens differ from the drafts."""
        acc = np.arange(self.width)[None, :] < (L[:, None] - 1)
        return (acc[:, :self.K] & (tok[:, :self.K] != drafts)).any(1)


class TreeCase(_Case):
    kind = "tree"

    def __init__(self, design, method: str = "rsd"):
        depth, D = laws.tree_shape(design)
        super().__init__(design, method, D + 1)
        self.depth, self.D = depth, D
        self.parents = np.asarray(design.parents, dtype=np.int64)
        self.N = len(design.parents)
        self.draft_width = self.N - 1
        self.Q = [_table(design.draft, self.V, j) for j in range(D + 1)]
        self.Q_cdf = [_cdf(t) for t in self.Q]
        from specops.reference import tree as RT
        self.kids = [RT.children_of(c, design.parents, depth) for c in range(self.N)]
        self.fixed = np.asarray(laws.top_tokens(design)) if method == "target_only" else None

    def path_codes(self, tokens: np.ndarray) -> np.ndarray:
        """[n, N] base-V code of the path root..node (the root's path is empty: 0)."""
        n = len(tokens)
        codes = np.zeros((n, self.N), dtype=np.int64)
        for x in range(1, self.N):
            codes[:, x] = codes[:, self.parents[x]] * self.V + tokens[:, x - 1]
        return codes

    def draw(self, n: int, rng) -> np.ndarray:
        if self.fixed is not None:
            return np.tile(self.fixed, (n, 1))
        tokens = np.zeros((n, self.N - 1), dtype=np.int64)
        codes = np.zeros((n, self.N), dtype=np.int64)
        for c in range(self.N):
            if not self.kids[c]:
                continue
            w = self.Q[self.depth[c]][codes[:, c]].astype(np.float64)
            w /= w.sum(1, keepdims=True)
            for x in self.kids[c]:
                cdf = np.cumsum(w / w.sum(1, keepdims=True), 1)
                cdf[:, -1] = 1.0
                y = np.minimum((cdf < (1.0 - rng.random(n))[:, None]).sum(1), self.V - 1)
                tokens[:, x - 1] = y
                codes[:, x] = codes[:, c] * self.V + y
                if self.method == "rsd":
                    w[np.arange(n), y] = 0.0
        return tokens

    def arguments(self, tokens: np.ndarray, seeds: np.ndarray) -> tuple:
        n = len(tokens)
        codes = self.path_codes(tokens)
        target = np.stack([self.P[self.depth[x]][codes[:, x]] for x in range(self.N)], 1)
        draft = None
        if self.method != "target_only":
            draft = torch.from_numpy(np.stack([self.Q[self.depth[x]][codes[:, x]]
                                               for x in range(self.N)], 1))
        node_ids = np.concatenate([np.zeros((n, 1), dtype=np.int64), tokens], 1)
        parents = np.tile(self.parents, (n, 1))
        return (torch.from_numpy(target), draft, torch.from_numpy(node_ids),
                torch.from_numpy(parents), torch.from_numpy(seeds.astype(np.int64)),
                self.method)

    def check_prefix(self, tok, L, tokens):
        """Rows whose accepted tokens are not the tokens of a path of the tree."""
        ok = L == 1                                       # nothing accepted
        for x in range(1, self.N):
            a = self.depth[x]
            path = []
            c = x
            while c > 0:
                path.append(tokens[:, c - 1])
                c = self.parents[c]
            path = np.stack(path[::-1], 1)
            ok |= (L - 1 == a) & (tok[:, :a] == path).all(1)
        return ~ok & (L > 0)


def make_case(kind: str, design, method: str):
    return ChainCase(design, method) if kind == "chain" else TreeCase(design, method)
