// pybind11 binding of the caller-coin walk (csrc/verify/coins.cpp), kept out of bindings.cpp:
// a plain function on the raw addresses of contiguous CPU tensors that
// specops/integrations/sglang_coins.py allocates and checks (shapes as in kernels.h CoinArgs).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include "kernels.h"

namespace py = pybind11;

void bind_coin_walk(py::module_& m) {
  m.def(
      "coin_walk",
      [](uintptr_t target, uintptr_t candidates, uintptr_t next_token, uintptr_t next_sibling,
         uintptr_t coins, uintptr_t final_coins, int64_t B, int64_t N, int64_t V,
         int64_t max_depth, bool relaxed, float single, double acc_scale, uintptr_t out_tokens,
         uintptr_t out_num_accepted, uintptr_t out_nodes, uintptr_t out_valid, int threads) {
        // addresses of contiguous CPU tensors the caller (specops/integrations/sglang_coins.py)
        // allocated and checked: shapes as in kernels.h CoinArgs
        if (B < 0 || N < 1 || V < 1 || max_depth < 0 || max_depth >= N)
          throw std::invalid_argument("specops._C: coin_walk: bad sizes");
        specops::CoinArgs a;
        a.target = reinterpret_cast<const float*>(target);
        a.candidates = reinterpret_cast<const int64_t*>(candidates);
        a.next_token = reinterpret_cast<const int64_t*>(next_token);
        a.next_sibling = reinterpret_cast<const int64_t*>(next_sibling);
        a.coins = reinterpret_cast<const float*>(coins);
        a.final_coins = reinterpret_cast<const float*>(final_coins);
        a.B = B, a.N = N, a.V = V, a.max_depth = max_depth;
        a.relaxed = relaxed, a.single = single, a.acc_scale = acc_scale;
        a.out_tokens = reinterpret_cast<int32_t*>(out_tokens);
        a.out_num_accepted = reinterpret_cast<int32_t*>(out_num_accepted);
        a.out_nodes = reinterpret_cast<int32_t*>(out_nodes);
        a.out_valid = reinterpret_cast<uint8_t*>(out_valid);
        a.threads = threads;
        py::gil_scoped_release release;
        specops::coin_walk(a);
      },
      "The caller-coin tree walk (reference section 13) on raw addresses; see kernels.h.");
}
