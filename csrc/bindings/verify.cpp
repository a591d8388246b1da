// The walk entries: verify, verify_tree, verify_traversal, verify_gbv and sampling_probs (kernels.h), each
// a keyword entry (fields.h) whose fields specops/backends/cpu.py passes in the order read here.
#include "bindings/fields.h"

namespace specops {
namespace binding {
namespace {

// How many threads the kernel may use: the last field of every walk entry.
template <class A>
A with_threads(Fields& f, A a) {
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}

// The transform's parameters of n requests (or rows).
TransformParams transform_params(Fields& f, int64_t n, Scalars& s) {
  TransformParams p;
  p.inv_temp = float_column(SPECOPS_FIELD(f, inv_temp), n, &s.inv_temp);
  p.top_k = required(int_column(SPECOPS_FIELD(f, top_k), n, &s.top_k), "top_k", n);
  p.top_p = float_column(SPECOPS_FIELD(f, top_p), n, &s.top_p);
  p.min_p = float_column(SPECOPS_FIELD(f, min_p), n, &s.min_p);
  return p;
}

constexpr char kVerify[] = "verify";
constexpr char kVerifyTree[] = "verify_tree";
constexpr char kVerifyTraversal[] = "verify_traversal";
constexpr char kVerifyGbv[] = "verify_gbv";
constexpr char kSamplingProbs[] = "sampling_probs";

// The fields verify and verify_tree (VerifyArgs, TreeArgs) share: the batch size, then the
// target and draft matrices.
template <class A>
void read_batch(Fields& f, A& a) {
  a.B = count(SPECOPS_FIELD(f, B));
  a.target_is_probs = flag(SPECOPS_FIELD(f, target_is_probs));
  a.target = matrix(SPECOPS_FIELD(f, target), a.target_is_probs);
  a.draft_is_probs = flag(SPECOPS_FIELD(f, draft_is_probs));
  a.draft = matrix(SPECOPS_FIELD(f, draft), a.draft_is_probs);
}

constexpr char kVerifyDoc[] = R"(The fused verify walk (reference.verify_rows_ref).  fields, by
name: target, draft (matrix views; draft None: point-mass drafts), target_is_probs,
draft_is_probs (bool); draft_ids (column view) and num_ids; per request: target_row_start,
draft_row_start, num_draft, inv_temp, top_k, top_p, min_p, seed, offset (column views; the last
six may be a Python float / int shared by every request), forced_num_accepted (column view or
None); B, max_k; block (bool: block verification, section 9); outputs (addresses): out_tokens
[B, max_k + 1] int32, out_num_accepted [B] int32, out_valid [B] bool, out_rates [B, max_k]
float32 (section 10) or 0, out_draft_bad [B] int32 (the default draft_probs check,
reference walk.draft_check) or 0; threads: requests run on at most this many threads.)";
VerifyArgs parse_verify(Fields& f, Scalars& sc) {
  VerifyArgs a;
  read_batch(f, a);
  a.max_k = count(SPECOPS_FIELD(f, max_k));
  const int64_t B = a.B;
  const int64_t num_ids = count(SPECOPS_FIELD(f, num_ids));
  a.draft_ids = int_column(SPECOPS_FIELD(f, draft_ids), num_ids);
  a.num_ids = a.draft_ids.ptr ? num_ids : 0;
  a.target_row_start =
      required(int_column(SPECOPS_FIELD(f, target_row_start), B), "target_row_start", B);
  a.draft_row_start =
      required(int_column(SPECOPS_FIELD(f, draft_row_start), B), "draft_row_start", B);
  a.num_draft = required(int_column(SPECOPS_FIELD(f, num_draft), B), "num_draft", B);
  a.params = transform_params(f, B, sc);
  a.seed = required(int_column(SPECOPS_FIELD(f, seed), B, &sc.seed), "seed", B);
  a.offset = required(int_column(SPECOPS_FIELD(f, offset), B, &sc.offset), "offset", B);
  a.forced_num_accepted = int_column(SPECOPS_FIELD(f, forced_num_accepted), B);
  a.block = flag(SPECOPS_FIELD(f, block));
  if (a.block && a.forced_num_accepted.ptr) fail("verify: the forced mode is token-wise only");
  a.out_tokens = address<int32_t>(SPECOPS_FIELD(f, out_tokens), B);
  a.out_num_accepted = address<int32_t>(SPECOPS_FIELD(f, out_num_accepted), B);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), B);
  a.out_rates = address<float>(SPECOPS_FIELD(f, out_rates), B * a.max_k, true);
  a.out_draft_bad = address<int32_t>(SPECOPS_FIELD(f, out_draft_bad), B, true);
  return with_threads(f, a);
}

constexpr char kVerifyTreeDoc[] = R"(Tree verification (reference.verify_tree_ref, section 11).
fields, by name: target, draft (matrix views [B * N, V]; draft None: point-mass drafts),
target_is_probs, draft_is_probs (bool); node_ids, parents (column views of B * N entries, node n
of request b at b * N + n); per request: num_nodes, inv_temp, top_k, top_p, min_p, seed, offset
(column views, or a Python number shared by every request); B, N, max_depth; mss (bool: method
'mss', else 'rsd'); outputs (addresses): out_tokens [B, max_depth + 1] int32, out_num_accepted
[B] int32, out_nodes [B, max_depth] int32, out_valid [B] bool; threads: requests run on at most
this many threads.)";
TreeArgs parse_verify_tree(Fields& f, Scalars& sc) {
  TreeArgs a;
  read_batch(f, a);
  a.N = count(SPECOPS_FIELD(f, N));
  a.max_depth = count(SPECOPS_FIELD(f, max_depth));
  const int64_t B = a.B, BN = a.B * a.N;
  // node n of request b is row b * N + n: the kernel indexes the matrices by that alone
  if (BN > 0 && (!a.target.ptr || a.target.rows != BN))
    fail(std::string(f.call()) + ": target must have B * N rows");
  if (a.draft.ptr && (a.draft.rows != BN || a.draft.cols != a.target.cols))
    fail(std::string(f.call()) + ": draft must have the target's shape [B * N, V]");
  a.node_ids = required(int_column(SPECOPS_FIELD(f, node_ids), BN), "node_ids", BN);
  a.parents = required(int_column(SPECOPS_FIELD(f, parents), BN), "parents", BN);
  a.num_nodes =
      required(int_column(SPECOPS_FIELD(f, num_nodes), B, &sc.num_nodes), "num_nodes", B);
  a.params = transform_params(f, B, sc);
  a.seed = required(int_column(SPECOPS_FIELD(f, seed), B, &sc.seed), "seed", B);
  a.offset = required(int_column(SPECOPS_FIELD(f, offset), B, &sc.offset), "offset", B);
  a.rsd = !flag(SPECOPS_FIELD(f, mss));
  a.out_tokens = address<int32_t>(SPECOPS_FIELD(f, out_tokens), B);
  a.out_num_accepted = address<int32_t>(SPECOPS_FIELD(f, out_num_accepted), B);
  a.out_nodes = address<int32_t>(SPECOPS_FIELD(f, out_nodes), B * a.max_depth);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), B);
  return with_threads(f, a);
}

constexpr char kVerifyTraversalDoc[] = R"(Traversal verification (reference.verify_traversal_ref,
section 14): verify_tree's fields; mss (bool): siblings drawn i.i.d. (method 'traversal_iid'),
else without replacement ('traversal').)";

constexpr char kVerifyGbvDoc[] = R"(GBV (reference.verify_gbv_ref, section 15): verify_tree's
fields (mss unused: GBV's paths are i.i.d.).)";

constexpr char kSamplingProbsDoc[] = R"(fields, by name: logits (matrix view [N, V]); inv_temp,
top_k, top_p, min_p (column views of N rows, or a Python number shared by every row); outputs
(addresses): out_probs [N, V] float32 (contiguous), out_valid [N] bool; threads: rows run on at
most this many threads.)";
// sampling_probs' arguments (kernels.h takes them one by one).
struct SamplingArgs {
  Mat logits;
  TransformParams params;
  float* out_probs = nullptr;
  uint8_t* out_valid = nullptr;
  int threads = 1;
};

SamplingArgs parse_sampling_probs(Fields& f, Scalars& sc) {
  SamplingArgs a;
  a.logits = matrix(SPECOPS_FIELD(f, logits), false);
  a.params = transform_params(f, a.logits.rows, sc);
  a.out_probs = address<float>(SPECOPS_FIELD(f, out_probs), a.logits.rows * a.logits.cols);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), a.logits.rows);
  return with_threads(f, a);
}

void run_sampling_probs(const SamplingArgs& a) {
  sampling_probs(a.logits, a.params, a.out_probs, a.out_valid, a.threads);
}

PyMethodDef kEntries[] = {
    keyword_method<VerifyArgs, parse_verify, verify, kVerify>(kVerifyDoc),
    keyword_method<TreeArgs, parse_verify_tree, verify_tree, kVerifyTree>(kVerifyTreeDoc),
    keyword_method<TreeArgs, parse_verify_tree, verify_traversal, kVerifyTraversal>(
        kVerifyTraversalDoc),
    keyword_method<TreeArgs, parse_verify_tree, verify_gbv, kVerifyGbv>(kVerifyGbvDoc),
    keyword_method<SamplingArgs, parse_sampling_probs, run_sampling_probs, kSamplingProbs>(
        kSamplingProbsDoc),
};

}  // namespace

void add_verify_entries(py::module_& m) { add_entries(m, kEntries); }

}  // namespace binding
}  // namespace specops
