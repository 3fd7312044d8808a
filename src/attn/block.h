// The inner step every attention path is built from (ChunkAttention's
// partial_attn applied to one chunk): a few query rows against the K and V of
// one chunk for one (layer, KV head), folded into running online-softmax
// states (o unnormalised, m running max, l running sum). Backend-neutral
// contract; the CPU versions are AVX-512, AVX2 and scalar, chosen at run time.
#pragma once
#include <cstdint>

namespace cs {

struct BlockJob {
  const float* q = nullptr;  // nq query rows, q_stride floats apart
  int q_stride = 0;
  int nq = 0;
  const uint8_t* kt = nullptr;  // chunk K block, [d][c] (transposed)
  const uint8_t* v = nullptr;   // chunk V block, [c][d]
  int kv_type = 0;              // KvType: 0 f32, 1 f16, 2 bf16
  int c = 64;                   // chunk size: row stride of K^T (multiple of 64)
  int d = 64;                   // head dim: 64, 96, 128 or 256
  const int* limit = nullptr;   // per row: keys [0, limit) of this chunk are visible
  // Per row, or null for 0: keys before `first` are not visible either (a
  // sliding window's edge). Either first < limit or limit == 0.
  const int* first = nullptr;
  float scale = 1.0f;           // applied to q (1 = q is pre-scaled)
  // Gemma 2's logit soft-capping: each scaled score s becomes
  // softcap * tanh(s / softcap) before the softmax; 0: none.
  float softcap = 0.0f;
  float* o = nullptr;           // per row: d floats, o_stride apart
  int o_stride = 0;
  float* m = nullptr;           // per row running max (-inf to start)
  float* l = nullptr;           // per row running sum (0 to start)
  // The K^T and V blocks the caller will pass next (or null): prefetched
  // while this chunk is computed, so the next call does not wait on DRAM.
  const uint8_t* next_kt = nullptr;
  const uint8_t* next_v = nullptr;
};

void block_update(const BlockJob& job);

// softcap * tanh(s / softcap): a score as the soft-capped kernels take it,
// for the scalar kernel and references.
float softcap_score(float s, float softcap);

// The head dims the block kernel (and so the chunk cache) runs.
constexpr bool block_head_dim(int d) { return d == 64 || d == 96 || d == 128 || d == 256; }
constexpr const char* kBlockHeadDims = "64, 96, 128 or 256";

// One per ISA, exposed for tests.
void block_update_scalar(const BlockJob& job);
void block_update_avx2(const BlockJob& job);
void block_update_avx512(const BlockJob& job);
// The AVX2 kernel forced to widen fp16/bf16 K/V into a shared fp32 copy for
// 5 or more rows, as AVX-512 does: that code path, tested on AVX2 CPUs.
void block_update_avx2_shared_copy(const BlockJob& job);

}  // namespace cs
