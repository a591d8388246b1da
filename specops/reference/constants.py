"""The numbers of the contract (``specops.reference``, sections 2, 4 and 5), in one place."""
import numpy as np

GREEDY_TEMPERATURE = np.float32(1e-5)   # float32(T) below this: greedy (section 1)
E_SCALE_BITS = 40          # integer masses of e in the transform
W_SCALE_BITS = 60          # integer weights of the inverse-CDF draw
P_CHECK_BITS = 32          # coarse mass check of probability rows
MAX_VOCAB = 1 << 22
FLT_MIN = np.float32(np.finfo(np.float32).tiny)

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
TAG_ACCEPT = 0
TAG_SAMPLE = 1

EXP_CUTOFF = np.float32(-86.0)
EXP_ZERO_MASS = np.float32(-27.75)                       # d below it: trunc(pexp(d) * 2**40) = 0
EXP_LOG2E = np.float32(1.44269502162933349609375)        # float32(log2(e))
EXP_ROUND = np.float32(12582912.0)                        # 1.5 * 2**23
EXP_LN2_HI = np.float32(0.693145751953125)               # 12 significant bits: n*HI exact
EXP_LN2_LO = np.float32(1.428606765330187045e-06)
# Taylor coefficients of exp on |r| <= ln2/2, highest degree first (Horner order).
EXP_COEFFS = tuple(np.float32(c) for c in (
    1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0))
# A draft_probs row the public call checks (section 8): finite, in [0, 1], and its mass
# sum trunc(q * 2**P_CHECK_BITS) within DRAFT_MASS_TOLERANCE of 2**P_CHECK_BITS (1e-2 of it,
# an integer sum: the same decision on every backend and ISA level, in any order).
DRAFT_PROBS_TOLERANCE = 1e-2
DRAFT_MASS_TOLERANCE = int(DRAFT_PROBS_TOLERANCE * 2 ** 32)       # 42949672
