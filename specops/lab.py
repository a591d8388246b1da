"""The rejection-sampling lab: a toy Markov language model over eight tokens.

The lab teaches speculative sampling and, because every trace goes through the real
``specops.verify_block``, proves the installed backends exact.  It has three views:

* the **model** (:func:`build_model`): a target Markov chain ``p[s]`` (how peaked its rows are
  is the *certainty* knob) and a draft chain ``q[s]`` that mixes the target with an
  independent noisy chain (the *match* knob).  Every row is a float32 vector of integer counts
  over ``2**20`` that sums to exactly 1 (also in float64), so the exact-law algebra below
  holds to rounding (~1e-16) and the verifier's integer weights are exact;
* the **one-token view** (:func:`one_token_view`) at the current state: ``p``, ``q``, the
  accepted mass ``min(p, q)``, the residual ``max(0, p - q)`` normalised, the rejection mass
  ``max(0, q - p)``, ``alpha = sum min(p, q) = 1 - TV(p, q)``, the corrected distribution
  (``min(p, q) + (1 - alpha) * residual``, which is exactly ``p``) and the classic *wrong
  fallback* (``min(p, q) + (1 - alpha) * p``) with its TV distance to ``p``;
* the **sequence view** (:func:`run_trace`): a seeded speculative trace through
  ``specops.verify_block`` -- the draft samples ``gamma`` tokens from ``q`` starting at the
  current state, the verifier accepts a prefix and emits a correction or bonus token; repeat
  until exactly ``length`` tokens are emitted (the last block is truncated).  Step ``i`` uses
  ``seed = knobs.seed`` and ``offset = i``.  Under the cost model (a target call costs 1, a
  draft call costs ``cost``) the toy speedup is ``length / (target_calls + cost *
  draft_calls)``, compared with the accounting estimate
  ``(1 - alpha**(gamma+1)) / ((1 - alpha) (gamma * cost + 1))`` (Leviathan et al. 2023), with
  ``alpha`` the mean acceptance rate over the positions the target chain visits.

Knobs (:class:`Knobs`, checked by :func:`sanitize_knobs`): certainty in [0, 1], match in
[0, 1], gamma an integer in [1, 16], cost in [0, 100], length an integer in [1, 100000],
seed an integer in [0, 2**63 - 1].  Integral floats (``4.0``) and numeric strings are
accepted; anything else raises :class:`KnobError` (a ``ValueError``) naming the knob.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from specops import reference as R

TOKENS = ("the", "cat", "sat", "on", "a", "mat", "and", ".")
V = len(TOKENS)
COUNT_BITS = 20                 # every probability is an integer count over 2**20
COUNT_SCALE = 1 << COUNT_BITS
START_STATE = 0                 # the context the lab starts from ("the")
NOISE_SHARPNESS = 1.5           # how peaked the draft's independent noise chain is
GAMMAS = tuple(range(1, 17))    # the expected-speedup curve
MAX_EXACT_K = 3                 # exact-law enumeration depth (8**(K+1) sequences)


class KnobError(ValueError):
    """An invalid lab knob; the message names the knob, the allowed range and the value."""


@dataclass(frozen=True)
class Knobs:
    """The lab's controls.  The defaults put the default run on the article's figures
    (``ARTICLE``): found by a search over certainty, match and seed with the
    article's gamma = 5, length = 96 and a draft cost of 0.09 (which makes its 20 target and
    100 draft calls cost 29, i.e. 3.31x); ``tests/test_lab.py`` holds them to the
    article's figures within stated tolerances."""
    certainty: float = 0.3
    match: float = 0.865
    gamma: int = 5
    cost: float = 0.09
    length: int = 96
    seed: int = 196

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULT_KNOBS = Knobs()

# Where the reference figures come from: the lab reproduces the interactive essay this project
# started from, which builds on the two papers that introduced speculative sampling.
ARTICLE_SOURCE = {
    "essay": "the Rejection-Sampling Lab, the interactive essay this project started from",
    "papers": [
        "Leviathan et al. 2023, Fast Inference from Transformers via Speculative Decoding "
        "(ICML 2023; arXiv:2211.17192)",
        "Chen et al. 2023, Accelerating Large Language Model Decoding with Speculative "
        "Sampling (arXiv:2302.01318)",
    ],
}

# The figures the essay reports with its default controls, shown beside ours.
ARTICLE = {
    "alpha": 0.9247,                 # one-token overlap sum min(p, q) at the starting state
    "corrected_tv": 0.0,             # TV(corrected, p), to displayed precision
    "wrong_fallback_tv": 0.0279,     # TV(min(p, q) + (1 - alpha) p, p)
    "length": 96,
    "gamma": 5,
    "target_calls": 20,
    "draft_calls": 100,
    "toy_speedup": 3.31,
    "estimated_speedup": 3.46,
    "worst_exact_tv": 1.95e-16,      # over the 1,296-setting grid
    "grid_settings": 1296,
    "wrong_token_counts": 0,
}

# name: (kind, low, high, description)
KNOB_RANGES = {
    "certainty": ("float", 0.0, 1.0, "how peaked the target's rows are"),
    "match": ("float", 0.0, 1.0, "how close the draft is to the target"),
    "gamma": ("int", 1, 16, "draft tokens per step"),
    "cost": ("float", 0.0, 100.0, "draft call cost relative to a target call"),
    "length": ("int", 1, 100_000, "tokens to emit"),
    "seed": ("int", 0, 2 ** 63 - 1, "model and trace seed"),
}


def _sanitize_one(name, value):
    kind, lo, hi, what = KNOB_RANGES[name]
    rng = f"an integer in [{lo}, {hi}]" if kind == "int" else f"a finite number in [{lo}, {hi}]"
    bad = KnobError(f"knob {name!r} ({what}) must be {rng}; got {value!r}")
    if isinstance(value, bool) or value is None:
        raise bad
    if isinstance(value, str):
        s = value.strip()
        try:
            value = int(s) if kind == "int" and s.lstrip("+-").isdigit() else float(s)
        except ValueError:
            raise bad from None
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise bad
    if kind == "int":
        if isinstance(value, numbers.Integral):
            value = int(value)
        else:
            f = float(value)
            if not math.isfinite(f) or f != math.floor(f):
                raise bad
            value = int(f)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise bad
    if not lo <= value <= hi:
        raise bad
    return value


def sanitize_knobs(knobs: Optional[Knobs] = None, **values) -> Knobs:
    """Check and normalise knob values; unknown names and bad values raise KnobError.

    ``sanitize_knobs(gamma="4", cost=0.2)`` starts from the defaults (or from ``knobs``)."""
    base = (knobs or DEFAULT_KNOBS).as_dict()
    for name in values:
        if name not in KNOB_RANGES:
            raise KnobError(f"unknown knob {name!r}; the knobs are {', '.join(KNOB_RANGES)}")
    base.update({k: v for k, v in values.items() if v is not None})
    return Knobs(**{name: _sanitize_one(name, base[name]) for name in KNOB_RANGES})


# ----------------------------------------------------------------------------- the model
def quantize(x) -> np.ndarray:
    """A non-negative vector -> float32 probabilities that are integer counts over 2**20
    summing to exactly 2**20 (largest remainders get the leftover units, lowest index first
    on ties); so the row sums to exactly 1 in float64 and float32."""
    x = np.asarray(x, dtype=np.float64)
    if not (np.isfinite(x).all() and (x >= 0).all() and x.sum() > 0):
        raise ValueError("quantize needs a finite non-negative vector with positive mass")
    scaled = x / x.sum() * COUNT_SCALE
    counts = np.floor(scaled).astype(np.int64)
    rest = COUNT_SCALE - int(counts.sum())
    order = np.argsort(-(scaled - counts), kind="stable")
    counts[order[:rest]] += 1
    return (counts.astype(np.float64) / COUNT_SCALE).astype(np.float32)


def counts_of(row) -> np.ndarray:
    return (np.asarray(row, dtype=np.float64) * COUNT_SCALE).astype(np.int64)


def _softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def _peaked(z, certainty: float) -> np.ndarray:
    if certainty >= 1.0:                     # the limit: a deterministic chain
        out = np.zeros(len(z))
        out[int(np.argmax(z))] = 1.0
        return out
    return _softmax(z * (3.0 * certainty / (1.0 - certainty)))


@dataclass
class ToyModel:
    knobs: Knobs
    target: np.ndarray          # [V, V] float32, row s = p(. | s)
    draft: np.ndarray           # [V, V] float32, row s = q(. | s)
    start: int = START_STATE

    def p(self, state: int) -> np.ndarray:
        return self.target[state]

    def q(self, state: int) -> np.ndarray:
        return self.draft[state]

    def target_fn(self, start: Optional[int] = None):
        """prefix -> p(. | last token), the form reference.exact_output_law takes."""
        s0 = self.start if start is None else start
        return lambda prefix: self.target[prefix[-1] if prefix else s0]

    def draft_fn(self, start: Optional[int] = None):
        s0 = self.start if start is None else start
        return lambda prefix: self.draft[prefix[-1] if prefix else s0]


def build_model(knobs: Knobs = DEFAULT_KNOBS) -> ToyModel:
    """Target rows: softmax(beta * z[s]) with beta = 3 c / (1 - c) for certainty c (uniform
    at 0, one-hot at 1); draft rows: match * p[s] + (1 - match) * noise[s], noise an
    independent chain of fixed sharpness.  Both quantised to counts over 2**20."""
    knobs = sanitize_knobs(knobs)
    rng = np.random.default_rng([knobs.seed, 0x1AB])
    z = rng.standard_normal((V, V))
    w = rng.standard_normal((V, V))
    target = np.stack([quantize(_peaked(z[s], knobs.certainty)) for s in range(V)])
    draft = []
    for s in range(V):
        noise = _softmax(NOISE_SHARPNESS * w[s])
        mixed = knobs.match * target[s].astype(np.float64) + (1.0 - knobs.match) * noise
        draft.append(quantize(mixed))
    return ToyModel(knobs, target, np.stack(draft))


# ----------------------------------------------------------------------------- one token
def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


def one_token_view(model: ToyModel, state: Optional[int] = None) -> dict:
    """The one-token anatomy of speculative sampling at `state` (float64 algebra).

    ``residual`` is normalised as the verifier draws it (integer weights W / S of the
    float32 residual, falling back to p when it has no mass: ``reference.implemented_draw_law``)."""
    s = model.start if state is None else int(state)
    p32, q32 = model.p(s), model.q(s)
    p, q = p32.astype(np.float64), q32.astype(np.float64)
    accepted = np.minimum(p, q)
    alpha = float(accepted.sum())
    distance = tv(p, q)
    residual_raw = np.maximum(p - q, 0.0)
    residual_mass = float(residual_raw.sum())
    rejection = np.maximum(q - p, 0.0)          # proposed and rejected, per proposed token
    rejection_mass = float(rejection.sum())
    residual = R.implemented_draw_law(R.residual_row(p32, q32, 0), p32)
    corrected = accepted + rejection_mass * residual
    wrong = accepted + rejection_mass * p
    return {
        "state": s, "token": TOKENS[s],
        "p": p, "q": q, "accepted": accepted, "residual": residual,
        "residual_raw": residual_raw, "rejection": rejection, "corrected": corrected,
        "wrong": wrong,
        "alpha": alpha, "tv_pq": distance, "residual_mass": residual_mass,
        "rejection_mass": rejection_mass,
        "corrected_tv": tv(corrected, p), "wrong_tv": tv(wrong, p),
    }


def exact_law(model: ToyModel, K: int, fallback: str = "residual",
              start: Optional[int] = None, method: str = "token") -> dict:
    """``reference.exact_output_law`` for the model's chains from `start`, K drafts, with
    the token-wise walk or block verification."""
    return R.exact_output_law(model.target_fn(start), model.draft_fn(start), int(K), V,
                              fallback=fallback, method=method)


def position_rates(model: ToyModel, K: int, start: Optional[int] = None) -> np.ndarray:
    """Per-position acceptance rates of the token-wise walk along the chain from `start`:
    a_j = P(num_accepted > j | num_accepted >= j), from the alpha chain
    (a_{n+1} = a_n M, M[s, y] = min(p_s, q_s)(y))."""
    M = np.minimum(model.target.astype(np.float64), model.draft.astype(np.float64))
    reach = np.zeros(V)
    reach[model.start if start is None else start] = 1.0
    rates = np.zeros(int(K))
    for j in range(int(K)):
        nxt = reach @ M
        # A probability; the float64 quotient of two equal sums (M = P when the draft equals
        # the target) can round to 1 + 2**-52, which the planner rightly refuses.
        rates[j] = min(1.0, nxt.sum() / reach.sum()) if reach.sum() > 0 else 0.0
        reach = nxt
    return rates


def planner_view(model: ToyModel, kmax: int = max(GAMMAS)) -> dict:
    """``specops.best_num_draft_tokens`` on the chain's per-position rates at the knobs'
    draft cost, beside the constant-alpha curve's best gamma."""
    from specops.planner import best_num_draft_tokens, expected_tokens
    rates = position_rates(model, kmax)
    k = best_num_draft_tokens(rates, float(model.knobs.cost), kmax)
    e = expected_tokens(rates)
    return {"rates": rates.tolist(), "best_k": int(k),
            "expected_tokens": float(e[k]),
            "speedup": float(e[k]) / (k * float(model.knobs.cost) + 1.0)}


# ----------------------------------------------------------------------------- speed
def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """1 + alpha + ... + alpha**gamma = (1 - alpha**(gamma+1)) / (1 - alpha)."""
    alpha = float(alpha)
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def estimated_speedup(alpha: float, gamma: int, cost: float) -> float:
    """(1 - alpha**(gamma+1)) / ((1 - alpha) (gamma c + 1))."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * float(cost) + 1.0)


def speedup_curve(alpha: float, cost: float, gammas: Sequence[int] = GAMMAS) -> dict:
    speeds = [estimated_speedup(alpha, g, cost) for g in gammas]
    best = int(np.argmax(speeds))
    return {"gammas": list(gammas), "speedups": speeds, "best_gamma": int(gammas[best]),
            "best_speedup": speeds[best]}


def mean_alpha(model: ToyModel, length: Optional[int] = None) -> float:
    """Mean of alpha(state) over the first `length` positions of the target chain from the
    start state (the states an autoregressive run would visit, in expectation)."""
    n = model.knobs.length if length is None else int(length)
    alphas = np.minimum(model.target.astype(np.float64), model.draft.astype(np.float64)).sum(1)
    P = model.target.astype(np.float64)
    dist = np.zeros(V)
    dist[model.start] = 1.0
    total = 0.0
    for _ in range(n):
        total += float(dist @ alphas)
        dist = dist @ P
    return total / n


# ----------------------------------------------------------------------------- traces
def best_backend(available: Optional[Sequence[str]] = None) -> str:
    names = list(available if available is not None else available_backends())
    for name in ("cpu", "triton", "reference"):
        if name in names:
            return name
    return names[0] if names else "reference"


def available_backends() -> List[str]:
    """``specops.available_backends()`` (CPU tensors), plus "triton" when it can run on a
    CUDA device here (the lab then moves that backend's tensors to the GPU); falls back to
    ["reference"]."""
    try:
        import specops
        names = list(specops.available_backends())
    except Exception:       # pragma: no cover - a broken install still gets the oracle
        names = []
    if "triton" not in names:
        try:
            import torch
            import specops
            if torch.cuda.is_available() and "triton" in specops.available_backends("cuda"):
                names.append("triton")
        except Exception:   # pragma: no cover
            pass
    return names or ["reference"]


def _device_for(backend: str):
    import torch
    if backend == "triton" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def verify_probs(target_probs, draft_ids, draft_probs, seeds, offsets, backend: str):
    """One verify_block call on numpy arrays ([B, K+1, V], [B, K], [B, K, V], [B], [B]) ->
    numpy (token_ids [B, K+1], num_accepted [B], valid [B])."""
    import torch
    import specops
    dev = _device_for(backend)
    out = specops.verify_block(
        target_probs=torch.from_numpy(np.ascontiguousarray(target_probs, np.float32)).to(dev),
        draft_token_ids=torch.from_numpy(np.ascontiguousarray(draft_ids, np.int64)).to(dev),
        draft_probs=torch.from_numpy(np.ascontiguousarray(draft_probs, np.float32)).to(dev),
        seed=torch.as_tensor(np.asarray(seeds, np.int64)).to(dev),
        offset=torch.as_tensor(np.asarray(offsets, np.int64)).to(dev),
        backend=backend)
    return (out.token_ids.cpu().numpy(), out.num_accepted.cpu().numpy(),
            out.valid.cpu().numpy())


@dataclass
class Trace:
    knobs: Knobs
    backend: str
    tokens: List[int] = field(default_factory=list)
    ledger: List[dict] = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    drafted: int = 0
    accepted: int = 0
    errors: List[str] = field(default_factory=list)

    @property
    def total_cost(self) -> float:
        """What the ledger reports: the sum of its per-step costs."""
        return float(sum(e["cost"] for e in self.ledger))

    @property
    def toy_speedup(self) -> float:
        """Autoregressive cost (one target call per token) over speculative cost."""
        return len(self.tokens) / self.total_cost if self.total_cost > 0 else float("nan")

    @property
    def text(self) -> str:
        return " ".join(TOKENS[t] for t in self.tokens)

    def summary(self) -> dict:
        """JSON-ready; ``steps`` is the ledger as ``[accepted, kept]`` per target call (the
        first ``accepted`` kept tokens were drafts, a kept token after them the correction
        or the bonus)."""
        return {
            "backend": self.backend, "length": len(self.tokens), "tokens": list(self.tokens),
            "steps": [[e["accepted"], e["kept"]] for e in self.ledger],
            "text": self.text, "target_calls": self.target_calls,
            "draft_calls": self.draft_calls, "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_target_call": (len(self.tokens) / self.target_calls
                                       if self.target_calls else 0.0),
            "total_cost": self.total_cost, "toy_speedup": self.toy_speedup,
            "errors": list(self.errors),
        }


class _Run:
    """One trace in progress (the draft's own RNG, the Markov state, the ledger)."""

    def __init__(self, model: ToyModel, backend: str):
        self.model = model
        self.k = model.knobs
        self.trace = Trace(self.k, backend)
        self.state = model.start
        self.rng = np.random.default_rng([self.k.seed, 0xD4AF7])
        self.dcounts = np.cumsum(np.stack([counts_of(r) for r in model.draft]), axis=1)

    @property
    def done(self) -> bool:
        return len(self.trace.tokens) >= self.k.length or bool(self.trace.errors)

    def propose(self):
        """gamma draft tokens sampled from q (exact integer inverse CDF over the counts)."""
        g = self.k.gamma
        ids = np.empty(g, np.int64)
        s = self.state
        states = np.empty(g + 1, np.int64)
        for j in range(g):
            states[j] = s
            u = int(self.rng.integers(0, COUNT_SCALE))
            s = int(np.searchsorted(self.dcounts[s], u, side="right"))
            ids[j] = s
        states[g] = s
        return ids, self.model.target[states], self.model.draft[states[:g]]

    def absorb(self, ids, tok, nacc, valid):
        t = self.trace
        g = self.k.gamma
        step = t.target_calls
        nacc = int(nacc)
        row = [int(x) for x in tok]
        if not valid or not 0 <= nacc <= g:
            t.errors.append(f"step {step}: invalid output (valid={bool(valid)}, "
                            f"num_accepted={nacc})")
            return
        emitted = row[:nacc + 1]
        if (row[:nacc] != [int(x) for x in ids[:nacc]] or any(x != -1 for x in row[nacc + 1:])
                or not 0 <= emitted[-1] < V):
            t.errors.append(f"step {step}: malformed token row {row} for drafts "
                            f"{[int(x) for x in ids]} (num_accepted={nacc})")
            return
        keep = emitted[:self.k.length - len(t.tokens)]
        t.tokens.extend(keep)
        t.target_calls += 1
        t.draft_calls += g
        t.drafted += g
        t.accepted += nacc
        t.ledger.append({"step": step, "drafted": g, "accepted": nacc,
                         "emitted": len(emitted), "kept": len(keep),
                         "cost": 1.0 + g * self.k.cost})
        self.state = keep[-1]


def run_traces(models: Sequence[ToyModel], backend: Optional[str] = None,
               max_batch: int = 4096) -> List[Trace]:
    """Run one trace per model in lockstep, batching the requests of each step by gamma
    into single verify_block calls (results are batch-invariant by contract)."""
    backend = backend or best_backend()
    runs = [_Run(m, backend) for m in models]
    while True:
        active = [r for r in runs if not r.done]
        if not active:
            break
        by_gamma: Dict[int, list] = {}
        for r in active:
            by_gamma.setdefault(r.k.gamma, []).append(r)
        for g, group in sorted(by_gamma.items()):
            for i in range(0, len(group), max_batch):
                chunk = group[i:i + max_batch]
                props = [r.propose() for r in chunk]
                ids = np.stack([p[0] for p in props])
                tp = np.stack([p[1] for p in props])
                dp = np.stack([p[2] for p in props])
                seeds = [r.k.seed for r in chunk]
                offsets = [r.trace.target_calls for r in chunk]
                tok, nacc, valid = verify_probs(tp, ids, dp, seeds, offsets, backend)
                for b, r in enumerate(chunk):
                    r.absorb(ids[b], tok[b], nacc[b], valid[b])
    return [r.trace for r in runs]


def run_trace(model_or_knobs=None, backend: Optional[str] = None) -> Trace:
    """The sequence view: one seeded speculative trace of ``knobs.length`` tokens."""
    model = model_or_knobs
    if model is None or isinstance(model, Knobs):
        model = build_model(model or DEFAULT_KNOBS)
    return run_traces([model], backend)[0]


def sequence_view(model: ToyModel, backend: Optional[str] = None,
                  trace: Optional[Trace] = None) -> dict:
    """Trace + cost model + estimate + the expected-speedup curve for gamma in 1..16."""
    k = model.knobs
    trace = trace or run_trace(model, backend)
    alpha_bar = mean_alpha(model)
    out = trace.summary()
    out.update({
        "alpha_mean": alpha_bar,
        "estimated_speedup": estimated_speedup(alpha_bar, k.gamma, k.cost),
        "expected_tokens_per_step": expected_tokens_per_step(alpha_bar, k.gamma),
        "curve": speedup_curve(alpha_bar, k.cost),
    })
    return out
