// The draw's passes of one ISA level (simd/draw_passes.cpp), for that level's Passes table
// (simd/passes.cpp); see passes.h for what each computes.  Included by per-level units only.
#pragma once
#include <cstdint>

#include "simd/level.h"
#include "simd/passes.h"

namespace specops {
namespace SPECOPS_LEVEL {

uint64_t weights(const float* p, const float* q, float* r, int64_t V, uint64_t* block_sums,
                 bool* bad, uint64_t* beta, RowCheck* chk);
uint64_t row_weights(const float* e, float cut, double sd, bool sparse, const float* q, float* r,
                     int64_t V, uint64_t* block_sums, bool* bad, uint64_t* beta, RowCheck* chk);
uint64_t block_mass(const float* p, const float* q, double rho, int64_t V, uint64_t* block_sums);
uint64_t pq_masses(const PRow& p, const float* q, double rho, int64_t V, uint64_t* block_sums,
                   bool block, uint64_t* min_out, RowCheck* chk);
uint64_t min_mass(const float* p, const float* q, float* r, int64_t V);
uint64_t int_weights(const float* x, int64_t V, int64_t* W, uint64_t* block_sums);
uint64_t tree_update(int64_t* R, const int64_t* Qw, double ia, double iq, int64_t y, int64_t V,
                     uint64_t* block_sums);

}  // namespace SPECOPS_LEVEL
}  // namespace specops
