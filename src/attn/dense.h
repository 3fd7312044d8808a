// Attention over one sequence's K/V held densely in blocks of kDenseBlock
// tokens (the contiguous cache's layout), elements fp32, fp16 or bf16: block b
// of one KV head keeps K transposed ([d][kDenseBlock], like a chunk, so the
// block kernel's q . K^T reads runs of keys) and V row-major ([kDenseBlock][d]).
#pragma once
#include <cstddef>
#include <cstdint>

namespace cs {

constexpr int kDenseBlock = 64;

struct DenseBlocks {
  const uint8_t* kt;  // block b's K^T at kt + b * stride
  const uint8_t* v;   // block b's V at v + b * stride
  size_t stride;      // bytes between consecutive blocks
  int d;              // head dim
  int type;           // element type code: 0 fp32, 1 fp16, 2 bf16 (KvType)
};

// For the nq rows r (query q + off[r], d floats; output out + off[r]):
// out = softmax(q . K^T / sqrt(d)) V over keys [first[r], visible[r])
// (first null: from 0), first[r] < visible[r]; with sink[r] (null: none) a
// logit in the softmax's denominator with no value (attn/state.h); softcap
// (Gemma 2; 0: none) caps each score as BlockJob::softcap says.
// Head dims 64, 96, 128 and 256 run the block kernel (runtime-dispatched SIMD,
// online softmax, the next block prefetched) on up to 64 rows per call; any
// other head dim runs a plain two-pass loop per row. fp32 accumulation.
void attend_rows(const float* q, float* out, const size_t* off, const int* first, const int* visible, int nq,
                 const DenseBlocks& kv, const float* sink = nullptr, float softcap = 0.0f);

// One part of a long walk split over threads (block_head_dim(d), nq <= 64):
// the rows' unnormalised states (o: nq x d, m, l) over blocks [b0, b1) only.
// The parts are folded together with merge() and written with finalize()
// (attn/state.h).
void attend_rows_part(const float* q, const size_t* off, const int* first, const int* visible, int nq,
                      const DenseBlocks& kv, int b0, int b1, float* o, float* m, float* l, float softcap = 0.0f);

}  // namespace cs
