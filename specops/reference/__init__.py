"""specops reference: the numpy oracle whose docstring is the specification.

Every backend (this package, the C++ path ``specops._C``, the Triton path
``specops.triton_kernels``) implements exactly what is written here, and the tests hold them
to it three ways: the exact output law by enumeration (``exact_output_law``), token-for-token
agreement of every backend with this package, and calibrated statistical tests whose negative
controls (``tests/_negative.py``: one documented primitive of the walk substituted by a
classic mistake) must fail.  This docstring is self-contained: it is the whole contract.
Choices the original design left open are marked *Reading*.

Where the code lives (every name is re-exported here, ``specops.reference.X``):
``constants`` (the numbers), ``philox`` (section 4), ``checks`` (sections 3 and 8),
``transform`` (section 2), ``draw`` (the per-position arithmetic of sections 1, 5, 9, 10),
``walk`` (``verify_rows_ref``: the token, forced and block walks, sections 1, 7, 9),
``law`` (the exact laws by enumeration), ``tree`` and ``tree_law`` (section 11), ``coins``
(section 13), ``traversal`` and ``traversal_law`` (section 14), ``gbv`` and ``gbv_law``
(section 15), ``penalties`` (section 16).

1. The job
----------
Request b proposed ``K_b`` draft tokens ``y_0..y_{K_b-1}``; the target scored ``K_b + 1`` rows.
Walk ``j = 0, 1, ...``:

* accept ``y_j`` iff ``p_j(y_j) > 0`` and ``u_j * q_j(y_j) < p_j(y_j)`` (strict; evaluated
  in float64 on the float32 values; ``u_j = w0 * 2**-32``).  (*Reading*: ``p > 0`` changes
  nothing for a probability row q, where ``u * q < 0`` is impossible; it makes a draft row
  that is not one -- negative, NaN, logits passed as probabilities, unchecked under
  ``validate=False`` or on CUDA -- unable to get a token the target gives probability 0
  accepted.  Where values are checked the public call refuses such ``draft_probs`` rows:
  section 8's *draft check*);
* on the first rejection emit one token drawn from the residual
  ``r_j(x) = p_j(x) - max(q_j(x), 0) if p_j(x) > q_j(x) else 0`` (float32 subtraction) and
  stop.  (*Reading*: the ``max(q, 0)`` only matters for a malformed draft row with negative
  entries; it keeps ``0 <= r <= p`` so the integer weights below can never overflow, without
  reading the whole draft row to validate it);
* if all ``K_b`` drafts are accepted, emit a bonus token drawn from ``p_{K_b}``.

Output row b: accepted drafts, then the correction/bonus token, then ``-1``;
``num_accepted[b]`` is the number of accepted drafts.

*Point-mass drafts* (``draft_probs`` and ``draft_logits`` both None): ``q_j = one-hot(y_j)``,
so accept iff ``u_j < p_j(y_j)`` and the residual is ``p_j`` with ``y_j`` zeroed (this is
literally the formula above with a one-hot q, so every backend may skip reading q).

*Greedy requests* (temperature 0, or below ``GREEDY_TEMPERATURE = 1e-5``): ``p_j`` is
one-hot at the lowest-index argmax. Accept iff
``y_j == argmax``; the correction and the bonus are the argmax. No random number is used (the
output does not depend on seed or offset, and no seed is drawn from a generator for an
all-greedy batch).  With ``target_probs`` the argmax is taken over the given probabilities.
(*Reading*: a positive temperature below 1e-5 (compared in float32) is greedy, as in vLLM;
without it a tiny T such as 1e-45 would overflow ``1/T`` and turn every row invalid.)

*Ragged blocks* (Reading): the effective block length of request b is
``min(num_draft_tokens[b], index of the first draft id that is -1)``.  A ``-1`` at
position j therefore ends the block: position j emits a token drawn from ``p_j`` (the bonus
rule, stream tag 1 at position j), which is also exactly what a rejected "no-token" draft
with point mass nowhere would emit.  Rows after the last one a request needs are never read.
Ids ``>= V`` or ``< -1`` are errors: the public API raises ValueError where it checks values
on the host, and every backend treats such a request as malformed (section 8), so that no
out-of-range index is ever used.

2. The target transform (logits -> probabilities), identical in every backend
-----------------------------------------------------------------------------
For a row of logits ``l`` (any float dtype, upcast to float32 exactly) and per-request
parameters:

1. ``x = l * inv_t`` in float32, where ``inv_t = float32(1.0 / float64(float32(T)))`` is
   computed once on the host (no division on the device); ``inv_t = 0`` marks a greedy
   request (``float32(T) < float32(1e-5)``).
2. top-k (``0 < k < V``): ``thr`` = the k-th largest ``x``; keep ``x >= thr`` (ties kept).
3. ``m = max x``; ``e = pexp(x - m)`` for kept tokens, ``0`` for masked ones. ``pexp`` is the
   portable exp below, so ``e`` is bit-identical everywhere; the argmax token has ``e = 1``.
4. Integer masses ``E = trunc(e * 2**40)`` (int64; the product is exact) and ``S = sum E``
   (integer sums do not depend on order; ``V <= MAX_VOCAB = 2**22`` keeps it below 2**63:
   every public entry point, ``sampling_probs`` included, rejects a larger V).
5. top-p (``top_p < 1``): ``tau`` = the largest value among the ``e`` such that
   ``float64(sum of E over tokens with e >= tau) >= float64(top_p) * float64(S)``;
   keep ``e >= tau`` (ties kept).  This is "the smallest set of highest-probability tokens
   whose mass >= top_p", with mass measured in the integer units (*Reading*: ordering is by
   ``e``, which orders exactly like the probabilities up to their last rounding).
6. min-p (``min_p > 0``): keep ``e >= min_p`` (float32 compare). Since ``max e = 1`` this is
   ``p >= min_p * max p`` without a division.
7. Renormalise: ``S' = sum of E over kept``;
   ``p = float32(float64(e) * 2**40 / float64(S'))`` for kept tokens, 0 otherwise; values
   below ``FLT_MIN`` are flushed to 0 so that flush-to-zero hardware agrees.

``pexp(d)`` for ``d <= 0`` (all float32, every operation rounded separately — no fused
multiply-add; C++ builds with ``-ffp-contract=off``, Triton with ``enable_fp_fusion=False``):
``0`` if ``not d >= -86``; else ``n = (d * LOG2E + 1.5*2**23) - 1.5*2**23`` (round to
nearest even), ``r = (d - n * LN2_HI) - n * LN2_LO``, ``s = Horner(EXP_COEFFS, r)``,
result ``s * 2**n`` (2**n built from its bits; n >= -125 so the result is normal).

*Tokens without integer mass* (an implementation freedom, not a change of the law): every
float32 ``d < EXP_ZERO_MASS = -27.75`` has ``trunc(pexp(d) * 2**40) = 0``.  Derivation from
pexp: ``d < -27.75`` gives ``d * LOG2E < -40.03``, so ``n <= -40``; for ``n <= -41``,
``s <= 1.42`` (``|r| <= ln2/2`` up to rounding) and ``pexp(d) <= 1.42 * 2**-41 < 2**-40``; for
``n = -40``, ``r = d + 40 ln2 < -0.024`` (the two-step reduction is within 1e-6 of it), so
``s <= 0.98`` and ``pexp(d) < 2**-40``.  Checked for every float32 in ``[-86, -27.75)``
(``tests/test_zero_mass.py``).  Such a token adds nothing to ``S`` or ``S'`` and can never be
``tau`` (tau's own group has ``E > 0``: ``S >= 2**40`` from the argmax and ``target > 0``), so the
passes that compute the masses and the thresholds may replace its exp by the compare
``x - m < EXP_ZERO_MASS`` (the same float32 ``d`` pexp would get).  Its probability is not 0:
``e`` is tiny but ``p = e * 2**40 / S'`` is a normal float, and the draw's weights
``trunc(r * 2**60)`` can be positive, so wherever a token's own ``p`` is read (the accept test's
``p(y)``, the row a request draws from, a min-p below ``2**-40``) it is ``pexp(d)`` as always.
The C++ path skips the exp of whole SIMD vectors whose kept lanes are all below the bound.

*Spelling the same arithmetic* (implementation freedoms, not changes of the law).  pexp's
rounding of ``d * LOG2E`` to an integer and its ``s * 2**n`` are exact operations (``|n| <=
125`` where the result is kept, ``s * 2**n`` a normal float), so a backend may use any exact
instruction for them (the C++ AVX-512 level: ``roundscale`` to nearest even and ``scalef``).
The quotient of step 7 may be computed without the division where that provably gives the
same float32: with ``c = float64(2**40 / float64(S'))`` (correctly rounded once per row),
``q = float64(e) * c`` is within 3 float64 ulps of the correctly rounded quotient ``x``
(three roundings of relative size at most ``2**-53``), and float32 rounds ``q`` and ``x``
alike unless a float32 rounding midpoint lies between them.  In the normal range those
midpoints are the float64 values whose low 29 mantissa bits equal ``2**28``; below ``2**-125``
the grid is the subnormal one, but ``q < 2**-127`` flushes to 0 either way.  So ``float32(q)``
is exact wherever ``q >= 2**-125`` and the low 29 bits of ``q`` are more than 8 from ``2**28``,
or ``q < 2**-127``; anywhere else the division is used (the C++ AVX-512 level, whose divider
would otherwise bound the drawn row; ``tests/test_quotient.py`` builds quotients at the
midpoints and in the band and shows that the bare reciprocal gets them wrong).

Greedy rows skip the transform: the token is the lowest-index argmax of the float32 logits.

3. Validity (NaN / inf policy)
------------------------------
* A logits row is *invalid* if it contains NaN or +inf (before or after scaling by
  ``inv_t``), or if every entry is -inf.
* A probability row (``target_probs``) is *invalid* unless every entry is in ``[0, 1]``
  (NaN fails) and ``0 < sum trunc(p * 2**32) <= 2**34`` (mass in (0, 4], which also keeps
  the 2**60-scaled integer sums below 2**63).
* The verifier checks every target row it reads in full: with logits that is every row up to
  the sampled one (the softmax normaliser needs the whole row); with ``target_probs`` the
  accept test reads only ``p_j(y_j)`` (a NaN there rejects) and the full check applies to the
  row sampled from (and to every row for greedy requests).
* If a row at position j is invalid, the request's output is its accepted drafts, then
  ``-1`` at position j and after; ``num_accepted = j``; ``valid[b] = False``.  Neighbouring
  requests are unaffected.  No id outside ``[-1, V)`` is ever emitted.
* Draft side (*Reading*): a draft-logits row that is invalid is treated as ``q = NaN``
  everywhere.  NaN in ``q`` makes the accept test false (reject) and contributes 0 to the
  residual, and a residual of mass 0 falls back to ``p``: so an unusable draft row is always
  rejected and its position sampled from the target, which keeps the output law exact.

4. Randomness: Philox4x32-10 stream layout
------------------------------------------
``key = (seed & 0xffffffff, seed >> 32)`` and counter
``(j, tag, offset & 0xffffffff, offset >> 32)``, where seed and offset are read as 64-bit
two's complement patterns and j is the position inside the request's block.

* tag 0 at position j: ``u_j = w0 * 2**-32`` (accept uniform);
* tag 1 at the sampled position j*: ``U = w0 | (w1 << 32)`` (64-bit draw uniform).

A request's stream depends only on its own seed and offset: results are batch-invariant.
An engine advances ``offset`` between calls (for example by 1 per step); with a
``torch.Generator`` (or neither seed nor generator: torch's default generator) one int64 seed
per request is drawn with ``torch.randint`` and offset is 0.

5. The integer inverse-CDF draw
-------------------------------
Weights ``W_i = trunc(r_i * 2**60)`` (int64), ``r`` = the residual, or ``p`` for a bonus /
end-of-block draw.  ``S = sum W``.  If ``S == 0`` (p and q equal up to rounding, or q NaN),
use ``W_i = trunc(p_i * 2**60)``.  ``t = floor(U * S / 2**64)`` (exact 128-bit product);
the token is the smallest i with ``W_0 + ... + W_i > t``.  If S is still 0 the row is
invalid (cannot happen for a valid row).

6. What is bit-identical across backends, and what is not
---------------------------------------------------------
* From probabilities (``target_probs``, ``draft_probs``): every backend emits identical
  token ids for identical seeds and offsets.  Only exact float32/float64 comparisons,
  float32 subtraction and integer arithmetic are involved.
* From logits: the transform above uses only correctly rounded IEEE operations in a fixed
  order, integer sums and ``pexp``; the C++ path (built with ``-ffp-contract=off``) and this
  module compute bit-identical probabilities, and therefore identical tokens, on every row.
  The Triton path does too under the interpreter; compiled on a GPU it does as long as the
  compiler keeps the operations unfused (``enable_fp_fusion=False``) and the float64
  division correctly rounded; checked by ``bench/gpu_check.sh`` where a GPU is available.
* Not bit-identical by design: nothing in the verifier.  The only approximation is the
  accept uniform's 2**-32 resolution: the implemented acceptance probability is
  ``#{w : w * 2**-32 * q < p} / 2**32``, within 2**-32 of ``min(1, p/q)``.
  ``exact_output_law`` uses ``min(1, p/q)`` (the algorithm) and the implemented
  residual/bonus weights ``W / S`` (exact integers).

7. The one walk, the flattened layout and the forced mode
---------------------------------------------------------
Every backend implements ``verify_rows_ref``: the canonical, flattened arguments (request b's
target row j is ``target[target_row_start[b] + j]``, its draft id and draft row j are at
``draft_row_start[b] + j``; per-request [B] parameters; output width ``max_k + 1``).  A backend
reads no row outside the tensors it was given, whatever the row starts say: a row index
outside ``[0, N)`` (target) or ``[0, T)`` (draft) makes that request invalid.

The single-purpose steps are views over this walk, not separate implementations:

* *accept*: ``num_accepted`` of the walk on final probabilities (``target_is_probs``,
  ``draft_is_probs``, ``inv_t`` 0 for greedy rows and 1 otherwise, no filters).
* *residual sample* (**forced mode**, ``forced_num_accepted = a`` [B]): for request b with
  effective block length kb, ``a[b] < 0`` makes the request invalid (row all ``-1``,
  ``num_accepted = 0``, ``valid = False``).  Otherwise ``j* = min(a[b], kb)``; positions
  ``j < j*`` are taken as accepted without reading their target or draft rows (their ids are
  emitted), ``num_accepted = j*``, and position ``j*`` is sampled with no accept test: the
  rejection draw of section 1 if ``j* < kb``, the bonus / end-of-block draw if ``j* == kb``
  (stream tag 1 at position ``j*``; greedy: the argmax), with the validity rules of section 3
  for the sampled row.
* *sampling_probs*: the transform of section 2 applied to every row (``sampling_probs_ref``).

``verify_block_unfused`` composes them (sampling_probs, then the accept and residual views on
the probabilities); an invalid target row is passed on as a row of NaN, which the accept test
rejects and the draw reports invalid, so the composition equals the fused walk on every input.

8. Malformed requests (the guards every backend applies)
-------------------------------------------------------
The public call checks argument values on the host where that is free (Python scalars, CPU
tensors) and raises ``ValueError``; with ``validate=False``, under ``torch.compile`` or
CUDA-graph capture, and for CUDA tensors by default, it reads no tensor value and the
backends apply these guards instead.  A request is *malformed* if any of its own values is out
of contract:

* ``inv_t`` is NaN, negative or +inf (the host maps a temperature that is NaN, negative or
  not finite to ``inv_t = NaN``: ``inv_temperature``);
* ``top_k < 0``; ``top_p`` NaN or outside ``(0, 1]``; ``min_p`` NaN or outside ``[0, 1]``;
* with target probabilities: ``inv_t`` not 0 or 1, or a filter on (``top_k != 0``,
  ``top_p != 1``, ``min_p != 0``);
* ``num_draft < 0`` or ``num_draft > max_k``;
* one of its draft ids ``draft_ids[draft_row_start + j]``, ``j < num_draft`` (those inside
  the id tensor), is ``< -1`` or ``>= V``.  (``-1`` is padding: it ends the block, section 1;
  ids after it are still checked.)

A malformed request emits nothing: its row is all ``-1``, ``num_accepted = 0``,
``valid = False``, and no target or draft row of it is read.  Its neighbours are untouched.

*The draft check* (``draft_probs`` values; the public call raises ``ValueError`` naming the
row, never a backend): a *probability row* has every entry in ``[0, 1]`` (NaN fails) and its
mass ``M = sum trunc(q * 2**32)`` (an integer sum: one decision on every backend, ISA level and
memory layout) within ``DRAFT_MASS_TOLERANCE = trunc(1e-2 * 2**32)`` of ``2**32``.  With
``validate=True`` every draft row the walk may read (positions before the effective block
length) must be one, checked before the walk.  By default (``validate=None``, CPU tensors) the
walk checks what it reads anyway, and the call raises after it, before returning
(``walk.draft_check``, the op's ``check_draft`` / ``draft_bad``): ``q_j(y_j)`` of every accepted
position ``j < num_accepted`` must be finite and in ``[0, 1]``, and the whole row of the position
whose token was drawn from the residual (``num_accepted < kb`` in a valid request) must be a
probability row; greedy requests, bonus draws, point-mass and logits drafts and the forced mode
check nothing (a greedy request never reads q).  With ``validate=False`` nothing is checked and
section 1's guards hold.  (A backend may decide the row rule by any exact means: the C++ pass
bounds a float32 lane sum and rescans only rows near the tolerance edge.)
In ``sampling_probs`` a row whose own parameters are malformed (the first two bullets) is
invalid: zeros and ``valid = False``.

9. Block verification (``method="block"``)
------------------------------------------
Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, arXiv 2403.10444) keeps
the longest prefix it can justify from the whole block at once, so it accepts at least as
many drafts as the walk of section 1 in expectation, with the same exact output law.  For a
request that is neither greedy nor in the forced mode, with block length ``g = kb``
(section 1), target rows ``p_0..p_g`` and draft rows ``q_0..q_{g-1}`` (transformed exactly as
in sections 1-2; point-mass drafts: ``q_j = one-hot(y_j)``):

* *The running weight* ``rho_0 = 1`` and, for ``j = 0..g-1``, in float64 on the float32
  values: ``t = rho_j * p_j(y_j)``;  ``rho_{j+1} = 1`` if ``t > 0 and t >= q_j(y_j)``, else
  ``t / q_j(y_j)`` if ``t > 0 and q_j(y_j) > 0``, else ``0`` (a NaN anywhere gives 0).
  This is ``min(rho_j * p_j(y_j) / q_j(y_j), 1)`` with the product rounded first.
* *The scaled residual* of position j with weight rho: for every token x, in float64,
  ``d(x) = rho * p_j(x) - max(q_j(x), 0)`` if ``rho * p_j(x) > q_j(x)`` else ``0`` (NaN q
  gives 0), and its integer weight ``D_j(x) = trunc(d(x) * 2**60)`` (int64; ``d <= 1``).
  ``S_j = sum_x D_j(x)``: an integer sum, so the order does not matter.
* *The stopping probabilities*, for ``1 <= j < g``: ``z = float64(S_j) * 2**-60`` (S_j
  computed with ``rho = rho_j``), ``den = z + (1 - rho_j)`` (float64, the bracket first),
  ``h_j = z / den`` if ``den > 0`` else ``1``.  At the end ``h_g = rho_g``; ``h_0 = 1``.
* *The choice*: ``tau = max{j : u_{j-1} < h_j}`` over ``j = 1..g`` (0 if there is none), where
  ``u_{j-1}`` is the accept uniform of section 4 at position ``j - 1`` (stream tag 0).  Every
  ``h_j`` is computed: a later position can be accepted after an earlier one would have
  failed, so there is no early exit and every row of the block is read.
* *The output*: ``y_0..y_{tau-1}``, ``num_accepted = tau``, then the token at position
  ``tau``: if ``tau == g`` the bonus / end-of-block draw from ``p_g`` (section 5 weights
  ``trunc(p * 2**60)``); otherwise the draw of section 5 with the weights ``D_tau`` computed
  with ``rho = rho_tau`` (falling back to ``trunc(p_tau * 2**60)`` if they sum to 0).  Either
  draw uses stream tag 1 at position ``tau``.

With point-mass drafts ``rho_{j+1} = min(t, 1)`` and ``D_j`` is ``trunc(rho * p_j(x) * 2**60)``
for ``x != y_j`` and 0 at ``y_j``.  The walk of section 1 already accepts with the largest
probability any verifier can there (``prod_j p_j(y_j)`` for the first n drafts), so block
verification has the same length law: it only gains with sampled drafts and their q.

*Greedy requests* use the walk of section 1 (the longest prefix equal to the argmax, then the
argmax): for a one-hot target that is also the most any exact verifier accepts.

*Rows that cannot be used* (*Reading*, chosen so that the law stays exact on the usable part
and the walk of section 1 is mirrored): positions are visited in order ``j = 0..g`` and the
block is cut at the first of

* a target row that is invalid or outside the tensor (section 3; with ``target_probs`` every
  row is checked in full here), or the out-of-range draft index of section 1 at ``j = kb``:
  the cut ``e = j`` is *invalid*;
* an invalid draft-logits row at ``j < g`` (q = NaN): the cut ``e = j`` is *valid*.

The block is then block verification of length ``e`` (``h_e = rho_e``).  If ``tau == e`` and
the cut is invalid the request emits its accepted drafts, then ``-1``, ``num_accepted = e``,
``valid = False``; a valid cut draws from ``p_e`` (as the walk of section 1 does after
rejecting an unusable draft row).  Ragged blocks, malformed requests (section 8) and the
validity rules are otherwise those of sections 1, 3 and 8; the forced mode is token-wise only.

The implemented probability of ``u < h`` is ``ceil(h * 2**32) / 2**32`` (within 2**-32 of h,
as in section 6); ``exact_output_law(method="block")`` uses h and the implemented weights.
Bit-identity rests on the float64 products, differences and divisions above being correctly
rounded and unfused on every backend (C++ ``-ffp-contract=off``; Triton
``enable_fp_fusion=False``, and ``bench/gpu_compile_check.py`` finds no ``fma.rn.f64`` and no
approximate division in the compiled block kernels).

10. Acceptance rates (``return_accept_rates``)
---------------------------------------------
``accept_rates`` [B, max_k] float32 holds, for every position j whose rows the verifier read,
``beta_j = sum_x min(p_j(x), q_j(x))`` (= 1 - TV(p_j, q_j): the probability that position j
accepts given its prefix): the integer sum ``sum_x trunc(min(p_j(x), max(q_j(x), 0)) *
2**60)`` (NaN q counts 0) times ``2**-60``, rounded to float32, and then at most 1 (*Reading*:
rows of mass in (0, 4] are valid, section 3, and a sum over two such rows can exceed 1; a rate
is a probability, so it is clamped: ``min(1, beta)``).  Point-mass drafts and greedy requests:
``beta_j = p_j(y_j)`` (0 or 1 for greedy).  Rows read: the walk of section 1 reads positions
``j <= num_accepted`` (``j < kb``); block verification reads every ``j < e``.  Every other
entry (not read, an invalid target row, a malformed request, the forced mode) is NaN.
Computing beta needs the whole draft row at every accepted position, which the walk of
section 1 otherwise reads only at ``y_j`` (draft probabilities): that is its cost.  (At a
block cut on an unusable draft row, ``j = e``, beta is 0: that row was read and rejects.)

11. Tree verification (``verify_tree``; code in ``specops/reference/tree.py``)
--------------------------------------------------------------------------------
A request proposes a tree instead of a chain: nodes ``0..n_b-1`` (``n_b = num_nodes[b]``),
node 0 the root (the last committed token; its id is ignored), ``parent[n] < n``.  Target row
``n`` is the target's next-token distribution after the path root..n; draft row ``n`` is the
distribution the children of n were drawn from, either i.i.d. (``method="mss"``, multi-step
speculative sampling, SpecInfer arXiv 2305.09781) or without replacement in node order
(``method="rsd"``, recursive rejection sampling, arXiv 2402.14160); no draft rows: point-mass
drafts (the children are arbitrary proposals, ``q = one-hot`` of each child's own token).

*Shape and malformed trees.*  The children of c are the nodes ``n`` in ``1..n_b-1`` with
``parent[n] == c``, tried in increasing ``n``; a child's *rank* is its index among them.
``parent[n] == -1`` for ``n >= 1`` marks an absent (padding) node, and so is every node whose
parent is absent.  A request is malformed (section 8: everything ``-1``, ``valid = False``,
nothing read) if its parameters are (section 8), or ``n_b`` is outside ``[1, N]``, or
``parent[0] != -1``, or a node ``1 <= n < n_b`` has ``parent[n]`` outside ``[-1, n)``, or a
present node has a token outside ``[0, V)`` or a depth (root 0, child = parent + 1) above
``max_depth`` (the output width - 1).

*The walk.*  ``c = 0``, depth ``j = 0``.  At node c read ``p = p_c`` (transformed as in
section 2; with ``target_probs`` the row is checked in full, section 3).  An invalid target row
ends the request invalid at j: accepted tokens, then -1, ``num_accepted = j``,
``valid = False``.  Otherwise, with integer weights at scale ``2**60``:

* ``R(x) = trunc(p(x) * 2**60)``, ``A = sum R`` (int64 sums; the residual);
* the draft of c: ``Qw(x) = trunc(q_c(x) * 2**60)``, ``Q = sum Qw``, where ``q_c`` is the
  transformed draft-logits row, or the draft-probability row; a draft-logits row that is
  invalid, or a probability row that fails the probability-row check of section 3, is
  *unusable*: ``Q = 0``.  The row is read only if c has a child.  Point-mass drafts: the
  child x's own ``qn = one-hot(x)``;
* for each child x (token y) in rank order i:

  - if ``A == 0`` or ``Q == 0`` (point-mass: only ``A == 0``), or (``rsd`` only) y equals the
    token of an earlier-tried sibling: the child is rejected, nothing changes, no coin;
  - else ``rn = R(y) * ia`` and ``qn = Qw(y) * iq`` with ``ia = 1 / A`` and ``iq = 1 / Q``
    (float64: each integer converted to float64 with rounding to nearest, the reciprocal one
    correctly rounded division, then one correctly rounded product: a division per node,
    not per token); accept iff ``u * qn < rn`` (strict, float64; ``u`` the coin below).  Accepted: emit y, ``accepted_nodes[j] = x``, ``c = x``, ``j += 1``,
    continue the walk at x;
  - rejected: for every token z, ``d(z) = R(z)*ia - Qw(z)*iq`` (float64: the two products
    as above, one subtraction; point-mass: ``R(z)*ia`` minus 1 at y), ``R'(z) = trunc(d(z) * 2**60)`` if
    ``d(z) > 0`` else 0; ``A' = sum R'``.  ``rsd``: also ``Q' = Q - Qw(y)`` and
    ``Qw'(y) = 0`` (y removed from the draft, renormalised implicitly through Q'); ``mss``
    keeps ``Qw``.  This is ``r <- norm(max(r - q, 0))`` with r and q normalised.

* every child rejected (or none): emit the draw of section 5 with weights ``R`` (sum A); if
  ``A == 0``, with ``trunc(p * 2**60)``.  ``num_accepted = j``.

*Greedy requests*: accept the first child (rank order) whose token is the lowest-index argmax
of ``p_c``; none: emit the argmax.  No random number is used.

*Randomness* (section 4's Philox, counter ``(j, tag, offset_lo, offset_hi)``): the coin of the
child of rank i at depth j is ``u = w0 * 2**-32`` at ``tag = 2 * i`` (rank 0 uses tag 0, the
chain's accept tag); the final draw at depth j uses ``U = w0 | (w1 << 32)`` at tag 1.  Along
one walk each (j, i) is used at most once, so every coin is a fresh uniform.

*Readings* (chosen, written here): the coin test ``u * qn < rn`` accepts with probability
``min(1, rn / qn)`` (within 2**-32), and a child with ``qn = 0`` (the draft could not have
proposed it) is accepted iff ``rn > 0``, as in section 1.  Duplicate siblings under ``mss`` are
genuine i.i.d. draws and take the full rule (a rejected token has ``R'(y) = 0``, so its
duplicate is rejected and the residual still updates, as the algorithm requires); under
``rsd`` a duplicate cannot be drawn, and is skipped without touching the state.  An unusable
draft row rejects every child of its node, which then emits from ``p_c`` (the law stays exact,
as with section 3's unusable draft rows).  Weights come from the integer residual, so every
``rn``, ``qn`` and ``d`` is at most about 1 and no sum can overflow int64; the values are
exact for dyadic rows and otherwise within float64 rounding of the algorithm, and
``exact_tree_law`` uses ``min(1, rn/qn)`` and the implemented weights.

*Output*: ``token_ids`` [B, max_depth + 1] int32 (accepted tokens, the correction or bonus
token, then -1), ``num_accepted`` [B] int32, ``accepted_nodes`` [B, max_depth] int32 (node
index of each accepted token, -1 after), ``valid`` [B] bool.  Bit-identity across backends
rests on integer sums and correctly rounded, unfused float64 reciprocals, products and
subtractions.

12. Vocabulary-parallel verification (``specops.distributed``)
-------------------------------------------------------------
With tensor parallelism each rank of a process group holds a contiguous column shard
``[vocab_start, vocab_start + V_local)`` of every target and draft row (shards may be uneven,
each ``V_local >= 1``, together exactly ``[0, V)``); draft ids are global.  The result is
*defined* as sections 1-10 applied to the rows the shards concatenate to: every rank returns
the tokens, ``num_accepted``, ``valid`` (and ``accept_rates``) of the single-device call,
bit for bit.  What makes that possible without gathering the rows: every row statistic of the
contract is an exact reduction, so ranks exchange only per-row numbers.

* *Validity and maxima* (one max-reduction): per row, "contains NaN / +inf / an entry outside
  [0, 1]" flags (any), "not all -inf" (any), ``max x`` and the lowest-index argmax, the latter
  as one int64 key ``(order(v) - 2**31) * 2**32 + (2**32 - 1 - index)``, ``order`` the monotone
  map of float32 bits to uint32 (``-0.0`` is first made ``+0.0``, so that ties follow the
  float comparison): the maximum key is the largest value at its lowest global index.
  The argmax is read for greedy rows only and ``max x`` for sampled rows only, so a rank may
  offer any key in the unread one (the C++ shard passes scan a row once: a sampled row's
  first key holds ``max x`` at index 0, a greedy row's ``max x`` key is that of 0.0); the
  flags are unchanged by that.
* *top-k threshold* (four sum-reductions): the k-th largest ``x`` by radix selection on
  ``order(x)``, 8 bits per round from the top; round r counts, per row, the entries whose key
  matches the digits found so far, by their next digit (a [rows, 256] count), and keeps the
  largest digit whose count from the top reaches the rank still sought.  The result is the
  k-th largest key, whose value is the k-th largest ``x``; ``keep = x >= thr`` as before.
* *Masses* (one sum-reduction): ``S = sum E`` and, for min-p, ``sum of E over e >= min_p``.
* *top-p threshold* (four sum-reductions): the same radix selection on the bits of ``e``
  (non-negative float32 order like their bits), counting integer masses ``E`` instead of
  entries: the largest digit whose mass from the top ``M`` satisfies
  ``float64(M) >= float64(top_p) * float64(S)``.  The last round's bucket is one value:
  ``tau``, with its mass ``S_tau = sum of E over e >= tau`` exact.  The renormaliser is then
  ``S' = S_tau`` or the min-p mass (whichever threshold is larger), or ``S``.
* *The walk* (one sum-reduction): ``p_j(y_j)`` and ``q_j(y_j)`` come from the rank owning
  ``y_j`` (the others add 0, their float32 bits carried in int64, so the value is exact and
  NaN survives), with the beta sums of section 10 when asked; block verification adds one
  sum-reduction for ``S_j`` of section 9 once every rank knows the ``rho_j``.  Every rank then
  runs the same walk on the same numbers with the same Philox words.  Where no beta sums are
  asked and the target rows are logits (and q a probability row or a point mass), the owner's
  ``e(y_j)`` bits and ``q_j(y_j)`` may instead ride on the masses' sum-reduction: every rank
  then computes ``p_j(y_j)`` from ``e(y_j)`` exactly as section 2 renormalises it (0 off a
  sampled row's support; a valid greedy row's one-hot from its argmax), the same float32.
* *The draw* (a gather, then a max-reduction): each rank sums its section 5 weights ``W`` and
  the fallback ``trunc(p * 2**60)``; with every rank's sums and ``vocab_start`` gathered, each
  computes ``S`` and ``t`` of section 5 (the 128-bit product in 32-bit limbs) and the prefix of
  the ranks before it in vocabulary order; the rank with ``prefix <= t < prefix + S_local``
  finds the token in its cumulative sum; the others offer -1 to the max.
* *Every request greedy* (known on every rank: the same temperatures, and with the layout
  check the ranks' flags are OR-ed): each ``p_j`` is the one-hot at the row's global argmax,
  so after the maxima every rank knows ``p_j(y_j) = 1`` iff the row is valid and its argmax is
  ``y_j`` (else 0); ``q`` is never read and nothing is drawn.  Such a call skips the masses
  (unless target-probability rows need them for their check), the walk's and the draw's
  exchanges: the same numbers, so the same tokens, rates and flags.

The only per-call host agreement needed: every rank passes the same arguments except the
shards.  Without ``seed``, the seeds drawn on the group's first rank are broadcast (otherwise
each rank's default generator would draw its own).

The vocabulary-split GPU pipeline (``specops/triton_kernels/split*.py``) computes the same row
statistics as this module by reductions over vocabulary chunks: maxima, lowest-index argmax,
counts and the integer masses of sections 2 and 5 combine exactly in any order, so it emits
the same tokens.

13. Caller-supplied uniforms (SGLang's tree walk; code in ``specops/reference/coins.py``)
------------------------------------------------------------------------------------------
sgl-kernel's ``tree_speculative_sampling_target_only`` takes its randomness from the caller:
``coins`` [B, n] float32 (one per node) and ``final_coins`` [B].  This mode replaces section
4's Philox with those numbers, so that an engine reproduces its host kernel's tokens from its
own random stream.  The tree is sgl-kernel's first-child / next-sibling layout: node ``i`` of
request b has token ``cand[i]``, first child ``nt[i]`` and next sibling ``ns[i]`` (-1: none);
node 0 is the root; at most ``S - 1`` drafts are accepted (``S = num_spec``, the width of
sgl-kernel's ``accept_index``).  Drafts are point masses (target only).

*A float32 uniform as an integer.*  ``m(u) = 0`` if ``not u > 0`` (NaN included), ``2**24 - 1``
if ``u >= 1``, else ``floor(u * 2**24)`` (exact: float64 product of the float32 value).
torch's float32 ``rand`` yields exactly the multiples of ``2**-24``, so for them
``u = m * 2**-24``; finer float32 values are rounded down to that grid.  Resolution: every
probability the coins implement is a multiple of ``2**-24`` (within ``2**-24`` of the
algorithm's).  The threshold of ``u`` on an integer mass ``M`` (``0 <= M < 2**63``) is
``thr(u, M) = floor(m(u) * M / 2**24)`` (exact; the 88-bit product splits as
``M = M1 * 2**32 + M0`` into ``m * M1 * 2**8 + floor(m * M0 / 2**24)``, all in int64).

*The walk* (target row ``p_c`` of node c read in full and checked as a probability row,
section 3; an invalid row ends the request invalid at depth j as in section 11):
``w(x) = trunc(p_c(x) * 2**60)``, ``A = sum w`` (int64).  The level's coin is
``coins[b, c]`` (sgl-kernel's: the coin of the node last accepted, the root's first).
``Ath = A`` if ``threshold_acc = 1``, else ``floor(float64(A) * float64(ta))`` (int64), with
``ta = max(threshold_acc, float32(1e-9))`` (sgl-kernel's cap);  ``t = thr(coins[b, c], Ath)``.
(Thresholds are taken as float32 values, as sgl-kernel's kernel receives them.)
Children are tried in next-sibling order, starting at ``nt[c]``, with a running integer
``C = 0``: for child x with token y, if y was not tried before at this node ``C += w(y)``
(a repeated token adds nothing: its mass was removed by the first rejection); accept x iff
``C > t`` (strict) or (relaxed mode only) ``p_c(y) >= threshold_single`` (float32 compare).
Accepted: emit y, record x, ``c = x``, ``j += 1``; stop trying children once ``j = S - 1``.
Every child rejected (or none, or ``j = S - 1``): the final token is drawn with
``final_coins[b]`` from ``W(x) = w(x)`` for tokens not tried at c, 0 for tried ones,
``Sum = sum W``; if ``Sum == 0`` from ``W = w`` (if that is 0 the row is invalid);
``tf = thr(final_coins[b], Sum)``, the token is the smallest x with ``W(0)+...+W(x) > tf``.

*The exact mode* (``threshold_single == threshold_acc == 1``): child k of a level is
accepted iff ``t`` falls in ``[C_{k-1}, C_k)``: the siblings partition ``[0, A)`` in
proportion to their target mass, the rest of it goes to the residual draw, so the output
law is the target's (point-mass drafts, section 11's law) up to the ``2**-24`` resolution,
for any coin that is uniform on the grid.  ``exact_coin_law`` enumerates it with a continuous
coin and the implemented integers (equal to the target law to 1e-12 at thresholds 1).

*Where specops deliberately differs from sgl-kernel* (its float32 arithmetic otherwise gives
the same branches except within float32 rounding of a boundary):
(1) strict ``C > t`` where sgl-kernel has ``coin <= prob_acc``: a draft of target probability
0 is never accepted by the coin (sglang #35771: with ``coin = 0`` sgl-kernel accepts it);
(2) masses are normalised by the row's integer mass ``A`` (sgl-kernel compares the raw float
sum, which is off by the row's rounding);
(3) a repeated sibling token adds nothing to ``C`` (sgl-kernel adds its probability again,
which over-accepts it);
(4) an invalid target row emits -1 (``valid = False``) where sgl-kernel emits a token;
(5) in the exact mode the ``p >= threshold_single = 1`` test is not applied (it only fires
for a row whose entry is 1 and whose mass exceeds 1).

*Relaxed thresholds* (``threshold_single < 1`` or ``threshold_acc < 1``, SGLang's
``--speculative-accept-threshold-*``): **NON-EXACT**.  sgl-kernel's rule
``coin <= prob_acc / threshold_acc or p(y) >= threshold_single`` as above: the first test
accepts more often (``t`` is drawn on ``Ath <= A``), the second accepts any draft whose target
probability reaches ``threshold_single``, even one of probability 0 when
``threshold_single <= 0`` (the caller's explicit choice; sgl-kernel does the same).  Both move
the output law away from the target's; ``exact_coin_law`` computes the moved law exactly
(continuous coin, implemented integers) and its TV from the target
(``specops.reference.coins.threshold_tv``).  Thresholds must be in [0, 1] (NaN refused).

*Where it runs.*  Three implementations, each tested token for token against
``verify_coins_ref`` (``tests/integrations/test_sglang_coins.py``): the C++ kernel
``csrc/verify/coins.cpp`` (CPU tensors; scalar code, so every ISA level is the same code),
the Triton kernel ``specops/triton_kernels/verify_coins.py`` (tested under the interpreter; one
program per request), and ``specops/integrations/sglang_coins.py``'s int64 torch ops, which
run on any device (one tree level per step).  All use only exact float32 scaling by 2**60,
integer sums and compares and the limb-split product above; the only float64 operations are
the relaxed ``Ath``'s conversion and product, correctly rounded on CPU and GPU alike.

"*Uniform on the grid*": the law statements assume ``m`` uniform on ``[0, 2**24)`` and the
coins of the levels independent; each level reads a different node's coin, and the final
draw its own entry, so fresh ``torch.rand`` tensors satisfy this.
14. Traversal verification (``method="traversal"`` / ``"traversal_iid"``)
--------------------------------------------------------------------------
Traversal verification (Weng et al., arXiv 2505.12398) verifies a tree of section 11 from the
leaves to the root and accepts whole paths with a sequence-level weight: section 9's block
verification generalised to trees.  On a chain (node n's parent is n - 1) it *is* section 9,
token for token: the same float64 arithmetic, the same Philox words, the same output.  The
siblings of a node are drafted from its draft row without replacement (``"traversal"``, as
``rsd``) or i.i.d. (``"traversal_iid"``, as ``mss``; K i.i.d. draft paths are the tree whose
root has K chains: the multi-path input).  Arguments, outputs, shape checks, malformed
requests and greedy requests (section 11's greedy walk) are those of section 11.

*Node state.*  Every node c carries a weight ``rho_c`` (float64), its *target masses* ``m_c``
and its *draft masses* ``s_c`` (float64 [V]).  Before any child of c is deleted,
``m_c = p_c`` (the float32 row of section 2, read exactly) and ``s_c = q_c`` (the draft row;
one that is unusable in section 11's sense makes every child of c deleted without a coin and
without an update); with point-mass drafts ``s_c`` is, for each child, the one-hot of its own
token.  ``rho_0 = 1``; a child x of c with token y gets, when the walk first reaches it,
``rho_x = w(rho_c, m_c(y), s_c(y))`` with ``t = rho * m`` rounded first and
``w = 1 if t > 0 and t >= s, t / s if t > 0 and s > 0, else 0`` (section 9's rho rule).

*Deleting a child* x (token y) of c, with c's current ``rho``, ``m``, ``s``:
``d(z) = rho * m(z) - s(z)`` where ``rho * m(z) > s(z)``, else 0 (float64, the product first);
``R(z) = trunc(d(z) * 2**60)`` (int64), ``A = sum R``; ``z = float64(A) * 2**-60``,
``den = z + (1 - rho)`` (bracket first), ``rho <- z / den`` if ``den > 0`` else 1 (section 9's
``h``).  Then, if ``A == 0``, every later child of c is deleted without a coin or update;
otherwise ``m(z) <- R(z) * ia`` with ``ia = 1 / float64(A)`` (section 11's ratio).  Without
replacement the draft also loses y: ``Qw = trunc(q_c * 2**60)`` (integer, once per node),
``Q <- Q - Qw(y)``, ``Qw(y) <- 0``, ``s(z) <- Qw(z) * (1 / float64(Q))`` (``Q == 0``: every later
child deleted without a coin); i.i.d. keeps ``s``.  Without replacement a child whose token
equals an earlier-tried sibling's is deleted, with its subtree, without a coin or update.

*The walk* (depth first, children in rank order; the first leaf of the remaining tree in
pre-order is the next one tested): ``visit(c)``: for each child x in rank order, set ``rho_x``
as above and ``visit(x)``; if something was accepted in x's subtree, stop; else delete x.
Then c is a leaf: the root is accepted (its rho is always 1); any other node c is accepted iff
``u_c < rho_c``, with ``u_c = w0 * 2**-32`` at Philox counter ``(c - 1, tag 0, offset_lo,
offset_hi)`` (node index c; on a chain this is section 9's ``u_{j-1}``).  Each node is
tested at most once, so each coin is a fresh uniform.  The accepted node a (depth tau) emits
the tokens of the path root..a (``accepted_nodes``), ``num_accepted = tau``, then the draw
of section 5 at counter ``(tau, tag 1)`` with weights R (its residual after its last
deletion) if a child of a was deleted with an update and ``A > 0``, else ``trunc(p_a * 2**60)``.

*Rows that cannot be used* (*Reading*, section 9's cut): a node whose target row is invalid
(section 3) keeps its coin, but its children are never visited (its row is needed to weight
them); if it is accepted, the request ends invalid there (accepted path, then -1,
``num_accepted = tau``, ``valid = False``).  An unusable draft row deletes the node's
children without an update (a valid cut: an accepted node then draws from p).

*Exactness* is established by enumeration, not assumed: ``exact_traversal_law`` runs the
same walk (``traverse``) over every drafted tree and every coin outcome, and the tests hold its
law to the target's within 1e-12 on dyadic rows, for chains and several tree shapes, the
adversarial families and point-mass drafts; without-replacement's rule on i.i.d. siblings is
also exact (a repeated token is skipped), i.i.d.'s rule on without-replacement siblings is not.
The implemented coin accepts with ``ceil(rho * 2**32) / 2**32`` (section 6).

*Rows read*: the target row of every node the walk visits (pushes) and the draft row of each
visited node with a valid target row and a child; the walk may visit more nodes than the
accepted path (``bench/results/tree.md`` counts them), which is its cost over
section 11.  Backends: the C++ walk (``csrc/verify/traversal.cpp``, an explicit stack of the
path's rows) and the Triton kernel (``specops/triton_kernels/verify_traversal.py``, per-level scratch
rows) emit the reference's tokens; bit-identity rests on the float64 products, differences and
divisions above being correctly rounded and unfused, as in sections 9 and 11.

15. Greedy multi-path block verification (GBV; code in ``specops/reference/gbv.py``)
-----------------------------------------------------------------------------------
GBV (Thomas & Pal, arXiv 2602.16961) selects one of K i.i.d. draft paths deterministically (the
lexicographic maximum under a per-node ranking by ``p / q``) and runs section 9 on it with q
replaced by ``q~``, the law of the next token of the maximum of K i.i.d. paths: Y follows that
maximum, whose conditionals are the ``q~``, so the output law is the target's.  The oracle
(``verify_gbv_ref``: ``verify_traversal_ref``'s arguments and outputs) of
``verify_tree(method="gbv")``.  *Shape* (*Reading*): the
present tree of section 11 must be a root with K >= 0 children (chain k: the k-th in node order),
every other present node with at most one child, every leaf at one depth L (K = 0: the bonus draw
from ``p_0``).  Any other shape (a branch below the root, chains of different present lengths),
and point-mass drafts with K >= 2 (GBV needs q), is malformed (section 8: row -1, nothing read);
with values readable the host calls ``gbv.check_gbv_trees`` (ValueError naming ``parent_ids`` or
``draft_probs``).  Point mass with K = 1: ``q_j = one-hot(y_j)``.  Greedy: section 11's walk.
*Rows*: ``p_n`` (sections 2-3), ``q_n`` from draft logits (invalid: *unusable*) or draft
probabilities (unusable unless they pass section 3's check, as sections 11 and 14).  The law is
stated for honest inputs (nodes with the same prefix carry the same rows).

*The order of a node* (``rank_below``, float32 rows p, q): tokens with ``q = 0`` rank above all
with ``q > 0``; for ``q(a), q(b) > 0``, a is below b iff ``p(a) * q(b) < p(b) * q(a)`` (float64
products of float32: exact); every tie (equal products, both ``q = 0``) goes to the higher id.
A node with an invalid p or unusable q orders by id alone (it ends the block, so it never reaches
``q~``).  *Freedom*: sorting by ``(q = 0, float64(p) / float64(q), id)`` is the same order (two
differing cross products differ by a relative ``>= 2**-49``; the quotients are normal float64).
*Selection* (``select_path``): ``best = 0``; for ``k = 1..K-1`` take the first depth where chain
k's and best's tokens differ (none: keep best); k replaces best iff its token ranks strictly above
best's in the order of *best's* node above that depth (the root first).  The published code keeps
the first-inserted child on a ratio tie while its CDF breaks ties by id: inexact at any tie of
positive ratio (TV 0.11-0.19 in the tests; 0.02-0.15 with the fork's ``min(1, p/q)``).  Any order
used by both the selection and ``q~`` is exact.

*q~ along Y* (``rank_masses``, ``skew_row``, ``skew_step``; float64, each operation correctly
rounded, unfused, in the order written; subnormals not flushed).  ``(a, b) = (0, 1)`` at the root
(the frontier note's ``(A, x)`` rescaled to ``a + b = 1``: x alone underflows).  At position j,
node of Y with rows p, q, next token y: ``Qw = trunc(q * 2**60)``, ``Q = sum Qw``, ``Fw(t)`` =
the integer sum of ``Qw(u)`` over u ranked ``<= t``; ``iq = 1 / float64(Q)``,
``F = float64(Fw) * iq``, ``Fm = float64(Fw - Qw) * iq``, ``qn = float64(Qw) * iq``;
``X = a + b * F``, ``Y = a + b * Fm``; ``S = sum_{i<K} X**i Y**(K-1-i)`` by ``s = 1, y = 1``,
then K - 1 times ``y = y * Y``, ``s = s * X + y``; ``Z`` = the same at ``(a + b * 1, a + b * 0)``;
``q~ = (float64(q) * S) * (1 / Z)`` (K = 1: ``q~ = q`` bit for bit).  Then ``na = a + b * Fm(y)``,
``nb = b * qn(y)``, ``den = na + nb``, ``(a, b) = (na / den, nb / den)`` if ``den > 0`` else
``(1, 0)``.  This is ``[(A + x F)**K - (A + x Fm)**K] / [(A + x)**K - A**K]`` as a sum of products
of non-negative numbers: no cancellation (the published difference form and unscaled x are why its
code warns against K > 4).  *K is not capped*: against exact rationals (``gbv_law.skew_error``) the
relative error of ``q~`` is at most 1.7 K ulps of ``2**-53`` (K = 2: 3.3, 32: 35, 64: 79; L <= 16)
and 0 at K = 1; an entry ``~ q F**(K-1)`` may underflow to 0 at large K, where its exact value is
below ``2**-1074``.  Cost: a ranking (sort) and ``O(K V)`` per position.

*Block verification of Y* (``gbv_rho``, ``gbv_residual``): section 9 with the float64 ``q~`` for
the float32 q.  Positions ``j = 0..L`` in order: an invalid target row is an invalid cut ``e = j``,
an unusable draft row (``j < L``) a valid cut; else ``q~_j``, then (``j >= 1``) ``D_j =
trunc(d * 2**60)``, ``d = rho_j p_j - q~_j`` where positive (product first), ``h_j`` from ``S_j``
and ``rho_j``; ``t = rho_j p_j(y)``, ``rho_{j+1}`` = 1 if ``t > 0`` and ``t >= q~_j(y)``,
``t / q~_j(y)`` if ``t > 0`` and ``q~_j(y) > 0``, else 0.  ``h_e = rho_e``; ``tau = max{j :
u_{j-1} < h_j}`` (tag 0 at position ``j - 1``: positions are depths along Y); emit ``y_1..y_tau``
(``accepted_nodes``: Y's nodes), then section 5's draw at ``(tau, tag 1)`` from ``p_e`` if
``tau = e`` (an invalid cut: -1, ``valid = False``), else from ``D_tau`` (``p_tau`` if it sums to
0).  The cuts keep the law exact: Y's first e tokens are the maximum of the paths' first e tokens
whatever the rows at and below the cut.  A drafted ``q = 0`` token gets ``q~ = 0`` (rho 1 if
``t > 0``, section 1's rule).  With K = 1 this is section 9 number for number, so
``verify_gbv_ref`` emits ``verify_rows_ref(method="block")``'s tokens, cuts included, except that a
draft probability row failing section 3's check is a valid cut here.  *Rows read*: p and q of
best's node at each selection step with a difference; along Y every ``p_j`` (``j <= e``) and
``q_j`` (``j <= e``, ``j < L``), no early exit.

*Exactness* by enumeration (``gbv_law.exact_gbv_law``: every K-tuple of i.i.d. paths, summed as
the selection's Markov chain in k, then every coin outcome with the implemented integers): within
1e-12 of the target on dyadic rows for K = 1..4, L = 1..3, V = 2..4, the adversarial families,
positive-ratio ties and top-k-truncated roots; an independent exact-rational implementation gives
the same length law; the published tie rule, q for q~ and the fork's rule fail.  *Acceptance*
(``gbv_law.expected_accepted``) -- no drop-in upgrade: ``p = q`` uniform (V = 4, L = 2): GBV 47/32
(K = 2), 4985/4096 (K = 3), block and traversal_iid 2 (frontier note: 1.488 vs 2); the review's
Markov model (L = 2): GBV 1.635 / 1.368 / 1.211 at K = 2 / 3 / 4, block 1.710, traversal_iid
1.746 / 1.775 / 1.798; rows where p and q differ (K = 2, L = 2, V = 3): GBV 1.505, 1.552, block
1.195, 1.225, traversal_iid 1.311, 1.403.

16. Grammar masks and penalties (code in ``specops/reference/penalties.py``)
--------------------------------------------------------------------------
An engine's structured-output mask and vLLM's penalties adjust each *target* row before
section 2's transform, as a function of that row's own prefix; the draft rows are never adjusted
(q is the law the drafts were drawn from, which is what section 1 needs).  So every method
(sections 1, 9, 11, 14, 15) verifies against the adjusted target unchanged, and its output is
distributed as sampling the adjusted target autoregressively.

*Inputs.*  ``allowed_token_bitmask`` int32, one row per target row (padded ``[B, K+1, W]``,
flattened ``[T + B, W]``, trees ``[B, N, W]``; ``W = ceil(V / 32)``; xgrammar's and vLLM's
layout): bit j of word w allows token ``32 w + j`` (bits at or past V ignored).  Row r is the
mask after row r's own drafted prefix.  ``repetition_penalty`` (1 = off), ``presence_penalty``,
``frequency_penalty`` (0 = off): numbers or [B].  ``prompt_token_ids``, ``output_token_ids``
``[B, *]`` int64, -1 padded: the committed history (the output so far, drafts excluded).

*The history of a row*: the output ids plus the drafts before the row -- a chain's row j counts
``y_0..y_{j-1}``; a tree node's row counts the tokens of its path from the root (its ancestors'
and its own; the root's id is not a draft).  ``count(x)`` = occurrences of x in the history;
``seen(x)``: x is in the prompt or ``count(x) > 0``.

*The adjusted logits* (float32, every operation rounded, in this order; vLLM's):
``x = l / rep`` if ``l > 0`` else ``l * rep``, on seen tokens (``rep != 1``); then
``x = x - float32(freq) * float32(count)``; then ``x = x - pres`` where ``count > 0``; then a
token the mask forbids gets ``x = -inf``.  Section 2 then runs on x (temperature, top-k, top-p,
min-p, the masses) and section 3's validity applies to x (so a NaN at a forbidden token is gone;
a row whose allowed tokens are all -inf is invalid).  Greedy: the argmax of x.  A draft the mask
forbids has ``p(y) = 0``: the ordinary rule rejects it and the residual is
``norm(max(0, p_masked - q))`` -- never "drop the draft and sample the masked target" (inexact for
a q that is not one-hot: q = (1/2, 1/4, 1/4) with token 2 forbidden gives (5/8, 3/8) instead of
the target's (1/2, 1/2)).

*Malformed requests* (section 8): masks or penalties with ``target_probs``; ``rep`` not finite
and > 0, ``pres`` or ``freq`` not finite; a history id outside ``[-1, V)``; a target row the walk
may read that allows no token (a chain's rows ``j <= kb``, a tree's present nodes).

The reference itself is written for clarity (a loop over requests, numpy per row); it is the
oracle, not a fast path.
"""
from __future__ import annotations

# Re-exports: tests, backends and tools use ``specops.reference.X`` (``R.X``).
from .checks import logits_row_valid, params_ok, probs_row_valid, request_ok
from .constants import (E_SCALE_BITS, EXP_COEFFS, EXP_CUTOFF, EXP_LN2_HI, EXP_LN2_LO,
                        EXP_LOG2E, EXP_ROUND, EXP_ZERO_MASS, FLT_MIN, GREEDY_TEMPERATURE,
                        MAX_VOCAB, P_CHECK_BITS, PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS,
                        PHILOX_W0, PHILOX_W1, TAG_ACCEPT, TAG_SAMPLE, W_SCALE_BITS)
from .draw import (accept_rate, block_draw_weights, block_next_rho, block_stop_probability,
                   block_weights, draw_from, draw_index, integer_weights, residual_row)
from .law import (RowFn, _as_fn, accept_probability, accepted_length_law, against_target,
                  completion, exact_output_law, implemented_draw_law)
from .philox import _U32, _split64, accept_uniform, philox4x32, sample_uniform64, stream_words
from .transform import (_int_masses, argmax_row, inv_temperature, pexp, sampling_probs_ref,
                        target_row, top_p_threshold, transform_row)
from .tree import verify_tree_ref
from .tree_law import exact_tree_law
from .traversal import verify_traversal_ref
from .traversal_law import exact_traversal_law
from .gbv import check_gbv_trees, gbv_shape_error, verify_gbv_ref
from .gbv_law import exact_gbv_law, expected_accepted
from .walk import _block_length, verify_rows_ref
from .penalties import adjusted_tree_walk, allowed_tokens, mask_words

__all__ = [
    "logits_row_valid", "params_ok", "probs_row_valid", "request_ok", "E_SCALE_BITS",
    "EXP_COEFFS", "EXP_CUTOFF", "EXP_LN2_HI", "EXP_LN2_LO", "EXP_LOG2E", "EXP_ROUND",
    "EXP_ZERO_MASS", "FLT_MIN", "GREEDY_TEMPERATURE", "MAX_VOCAB", "P_CHECK_BITS", "PHILOX_M0",
    "PHILOX_M1", "PHILOX_ROUNDS", "PHILOX_W0", "PHILOX_W1", "TAG_ACCEPT", "TAG_SAMPLE",
    "W_SCALE_BITS", "accept_rate", "block_draw_weights", "block_next_rho",
    "block_stop_probability", "block_weights", "draw_from", "draw_index", "integer_weights",
    "residual_row", "RowFn", "_as_fn", "accept_probability", "accepted_length_law",
    "against_target", "completion", "exact_output_law", "implemented_draw_law", "_U32",
    "_split64", "accept_uniform", "philox4x32", "sample_uniform64", "stream_words",
    "_int_masses", "argmax_row", "inv_temperature", "pexp", "sampling_probs_ref", "target_row",
    "top_p_threshold", "transform_row", "verify_tree_ref", "exact_tree_law",
    "verify_traversal_ref", "exact_traversal_law", "check_gbv_trees", "gbv_shape_error",
    "verify_gbv_ref", "exact_gbv_law", "expected_accepted", "_block_length",
    "verify_rows_ref", "adjusted_tree_walk", "allowed_tokens", "mask_words"
]
