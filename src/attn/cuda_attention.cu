// The tile and merge kernels of attn/cuda_attention.h.
//
// Shared memory of a tile (K/V type T, 2 bytes):
//   S stages, each one 64-key unit of one chunk: K^T [D][64] then V [64][D];
//   the tile's queries [R][D] (R = 16 rows per row group); its rows' bounds
//   and its units. At the end the stages hold the four slices' states.
// Every row of those arrays is 16-byte segments XOR-swizzled by the row's low
// three bits, so the ldmatrix reads of eight rows at one column (K^T and V
// are read transposed) hit eight different bank groups.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attn/cuda_attention.h"
#include "base/cuda.h"
#include "base/error.h"

namespace cs {
namespace {

constexpr int kUnit = 64;  // keys per pipeline unit
constexpr int kMaxUnits = kMaxWindowKeys / kUnit;

struct Params {
  const uint8_t* pool;
  long long chunk_bytes, block_bytes, layer_off;
  int c, n_kv, n_heads, group, n_slots;
  // Per tile of this launch (blockIdx.x): {units, rows, 0, 0}.
  const int4* tiles;
  // Per tile of this launch, kMaxUnits places, its units first: {chunk id,
  // which 64 keys of the chunk, its first key counted from the tile's first
  // key, keys it holds (1..64)}.
  const int4* units;
  // Per tile of this launch, R places (16 or 32, the launch's rows per
  // tile), its rows first: {task, the key of its sequence where the tile
  // starts, keys of the tile it may see from there, slot (-1: written out)}.
  const int4* rows;
  const float* q;
  float* out;
  float* part_o;  // [n_kv][n_slots][D]
  float* part_m;  // [n_kv][n_slots]
  float* part_l;
  const int32_t* window_first;
  float q_scale;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

#include "base/cp_async.inc"

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <class T>
struct Mma;
template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

// 2^x on the special-function unit, results below 2^-126 flushed to zero
// (a probability that small adds nothing a float sum keeps).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Byte offset of 16-byte segment `seg` of row `row` in a swizzled array.
__device__ __forceinline__ int swz(int row, int seg, int row_bytes) { return row * row_bytes + ((seg ^ (row & 7)) << 4); }

template <int D, int RG, int S>
struct Shape {
  static constexpr int THREADS = 128 * RG;                     // four warps per 16 rows
  static constexpr int R = 16 * RG;                            // rows per tile
  static constexpr int STAGE = 2 * kUnit * D * 2;              // bytes: K^T unit + V unit
  static constexpr int OS = D + 8;                             // floats per row of the warps' states (padded)
  static constexpr int Q_OFF = S * STAGE;
  static constexpr int RED_OFF = Q_OFF + R * D * 2;            // red_m, red_l, fac: [4 slices][R] floats each
  static constexpr int ROW_OFF = RED_OFF + 3 * 4 * R * 4;      // row_m, row_l; lo, hi, task, slot: [R] each
  static constexpr int UNIT_OFF = ROW_OFF + 6 * R * 4;         // unit_addr (8 bytes), sub, base, n: [kMaxUnits] each
  static constexpr int BYTES = UNIT_OFF + kMaxUnits * 20;
  static_assert(4 * R * OS * 4 <= S * STAGE, "the warps' states reuse the stages");
};

// One tile per block. Warp w takes rows 16 * (w / 4) .. +15 of the tile (a
// row group) and keys 16 * (w % 4) .. +15 of each 64-key unit (its slice):
// each row's arithmetic is that of its own m16 tile and four slices, whatever
// the tile's other rows (RG: row groups per tile, 1 or 2).
template <class T, int D, int RG, int S>
__global__ void __launch_bounds__(128 * RG) attn_tiles(const Params p) {
  using Sh = Shape<D, RG, S>;
  using M = Mma<T>;
  constexpr int R = Sh::R, DT = D / 8, NT = Sh::THREADS;
  // The launch after this one (the other tile size, or the merges, which
  // wait for it: attn/cuda_attention.h) may start at once.
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const kv = smem;
  uint8_t* const qs = smem + Sh::Q_OFF;
  float* const red_m = reinterpret_cast<float*>(smem + Sh::RED_OFF);
  float* const red_l = red_m + 4 * R;
  float* const fac = red_l + 4 * R;
  float* const row_m = reinterpret_cast<float*>(smem + Sh::ROW_OFF);
  float* const row_l = row_m + R;
  int* const s_lo = reinterpret_cast<int*>(row_l + R);
  int* const s_hi = s_lo + R;
  int* const s_task = s_hi + R;
  int* const s_slot = s_task + R;
  long long* const u_addr = reinterpret_cast<long long*>(smem + Sh::UNIT_OFF);
  int* const u_sub = reinterpret_cast<int*>(u_addr + kMaxUnits);
  int* const u_base = u_sub + kMaxUnits;
  int* const u_n = u_base + kMaxUnits;

  const int kvh = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int slice = warp & 3, rg = warp >> 2, row0 = rg * 16;  // this warp's keys and rows
  // The tile's record, units and rows, read at once: units and rows sit at
  // a fixed place per tile, so the first K/V loads wait for one trip to
  // memory, not two, and the queries for two, not three.
  const int4 tm = p.tiles[blockIdx.x];
  const int4 un = tid < kMaxUnits ? p.units[(long long)blockIdx.x * kMaxUnits + tid] : make_int4(0, 0, 0, 0);
  const int4 row = tid < R ? p.rows[(long long)blockIdx.x * R + tid] : make_int4(0, 0, 0, -1);
  const int n_units = tm.x, nrows = tm.y;
  if (tid < n_units) {
    u_addr[tid] = (long long)un.x * p.chunk_bytes + p.layer_off + (long long)kvh * 2 * p.block_bytes;
    u_sub[tid] = un.y;
    u_base[tid] = un.z;
    u_n[tid] = un.w;
  }
  __syncthreads();

  // A unit into a stage. K^T is [D][c] in the pool: the unit is 64 of each
  // row's columns; V is [c][D]: 64 of its rows. V rows past the unit's keys
  // are zero-filled (their probabilities are 0, and 0 times a stale value
  // must not be NaN); K columns past them are masked to -inf instead.
  auto load = [&](int u, int stage) {
    uint8_t* ks = kv + stage * Sh::STAGE;
    uint8_t* vs = ks + kUnit * D * 2;
    const uint8_t* kg = p.pool + u_addr[u] + (long long)u_sub[u] * kUnit * 2;
    const uint8_t* vg = p.pool + u_addr[u] + p.block_bytes + (long long)u_sub[u] * kUnit * D * 2;
    const int nk = u_n[u];
#pragma unroll
    for (int i = 0; i < D * 8 / NT; ++i) {
      const int e = tid + i * NT, row = e >> 3, seg = e & 7;
      cp_async16(ks + swz(row, seg, kUnit * 2), kg + ((long long)row * p.c + seg * 8) * 2, 16);
    }
#pragma unroll
    for (int i = 0; i < kUnit * DT / NT; ++i) {
      const int e = tid + i * NT, row = e / DT, seg = e % DT;
      cp_async16(vs + swz(row, seg, D * 2), vg + ((long long)row * D + seg * 8) * 2, row < nk ? 16 : 0);
    }
  };
  for (int s = 0; s < S - 1; ++s) {
    if (s < n_units) load(s, s);
    cp_async_commit();
  }

  if (tid < R) {
    int lo = 0, hi = 0, task = 0, slot = -1;
    if (tid < nrows) {
      task = row.x;
      hi = row.z;
      slot = row.w;
      if (p.window_first) lo = max(0, p.window_first[task / p.group] - row.y);
      if (lo >= hi) lo = hi = 0;  // the window leaves the row nothing here
    }
    s_lo[tid] = lo;
    s_hi[tid] = hi;
    s_task[tid] = task;
    s_slot[tid] = slot;
  }
  __syncthreads();

  // The tile's queries, scaled and rounded once.
  for (int e = tid; e < R * DT; e += NT) {
    const int row = e / DT, seg = e % DT;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row < nrows) {
      const int task = s_task[row], qr = task / p.group, gq = task % p.group;
      const float* src = p.q + ((long long)qr * p.n_heads + (long long)kvh * p.group + gq) * D + seg * 8;
      const float4 a = *reinterpret_cast<const float4*>(src);
      const float4 b = *reinterpret_cast<const float4*>(src + 4);
      const float s = p.q_scale;
      val.x = M::pack(a.x * s, a.y * s);
      val.y = M::pack(a.z * s, a.w * s);
      val.z = M::pack(b.x * s, b.y * s);
      val.w = M::pack(b.z * s, b.w * s);
    }
    *reinterpret_cast<uint4*>(qs + swz(row, seg, D * 2)) = val;
  }

  // This thread's rows: g and g + 8 of the warp's row group.
  int lo_r[2], hi_r[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    lo_r[rr] = s_lo[row0 + g + 8 * rr];
    hi_r[rr] = s_hi[row0 + g + 8 * rr];
  }
  const bool rows_here = row0 < nrows;  // a row group past the tile's rows only loads and syncs

  float o[DT][4];
  float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;

  const int mat = lane >> 3, mi = lane & 7;  // ldmatrix: which 8x8 matrix this lane addresses, and its row
  for (int u = 0; u < n_units; ++u) {
    cp_async_wait<S - 2>();
    __syncthreads();
    {
      const int next = u + S - 1;
      if (next < n_units) load(next, next % S);
      cp_async_commit();
    }
    const uint8_t* ks = kv + (u % S) * Sh::STAGE;
    const uint8_t* vs = ks + kUnit * D * 2;
    const int slot0 = slice * 16, key0 = u_base[u] + slot0, nk = u_n[u];
    // This warp's 16 keys of the unit: skipped when none of its rows sees
    // one (folding nothing leaves every state exactly as it was).
    bool mine = false;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) mine = mine || (lo_r[rr] < key0 + 16 && hi_r[rr] > key0);
    if (!rows_here || slot0 >= nk || !__any_sync(0xffffffffu, mine)) continue;

    // Scores: S = Q K^T over the warp's 16 keys (two n8 tiles).
    float sc[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4], a[4];
      ldsm_x4_t(b, ks + swz(kk * 16 + (mat & 1) * 8 + mi, 2 * slice + (mat >> 1), kUnit * 2));
      ldsm_x4(a, qs + swz(row0 + (mat & 1) * 8 + mi, 2 * kk + (mat >> 1), D * 2));
      M::run(sc[0], a, b[0], b[1]);
      M::run(sc[1], a, b[2], b[3]);
    }

    // Online softmax (base 2: the queries carry log2 e), then O += P V. The
    // mask is left out where every row of the warp sees all 16 keys (decode
    // past its first units): masking nothing changes no bit.
    const bool whole = __all_sync(0xffffffffu, slot0 + 16 <= nk && lo_r[0] <= key0 && hi_r[0] >= key0 + 16 &&
                                                   lo_r[1] <= key0 && hi_r[1] >= key0 + 16);
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int slot = slot0 + nt * 8 + t4 * 2 + e, key = u_base[u] + slot;
          float& x = sc[nt][rr * 2 + e];
          if (!whole && (slot >= nk || key < lo_r[rr] || key >= hi_r[rr])) x = -INFINITY;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_i[rr], mx);
      float scale = 1.f, sum = 0.f;
      if (m_new == -INFINITY) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) sc[nt][rr * 2] = sc[nt][rr * 2 + 1] = 0.f;
      } else {
        scale = ex2(m_i[rr] - m_new);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sc[nt][rr * 2 + e];
            x = ex2(x - m_new);
            sum += x;
          }
      }
      l_i[rr] = l_i[rr] * scale + sum;
      m_i[rr] = m_new;
      // Rescaling by exactly 1 changes no bit: skipped when the whole warp's
      // maxima stood (most slices once a row's largest score is behind it).
      if (__any_sync(0xffffffffu, scale != 1.f)) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[dt][rr * 2] *= scale;
          o[dt][rr * 2 + 1] *= scale;
        }
      }
    }
    uint32_t pa[4];
    pa[0] = M::pack(sc[0][0], sc[0][1]);
    pa[1] = M::pack(sc[0][2], sc[0][3]);
    pa[2] = M::pack(sc[1][0], sc[1][1]);
    pa[3] = M::pack(sc[1][2], sc[1][3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldsm_x4_t(b, vs + swz(slot0 + (mat & 1) * 8 + mi, 2 * dp + (mat >> 1), D * 2));
      M::run(o[2 * dp], pa, b[0], b[1]);
      M::run(o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Each row's four slice states, merged in slice order.
  float* const red_o = reinterpret_cast<float*>(kv);  // [4 slices][R][OS]
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = row0 + g + 8 * rr;
    float l = l_i[rr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (t4 == 0) {
      red_m[slice * R + row] = m_i[rr];
      red_l[slice * R + row] = l;
    }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(red_o + (slice * R + row) * Sh::OS + dt * 8 + 2 * t4) =
          make_float2(o[dt][rr * 2], o[dt][rr * 2 + 1]);
  }
  __syncthreads();
  if (tid < R) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, red_m[w * R + tid]);
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float mw = red_m[w * R + tid];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mx);
      fac[w * R + tid] = f;
      l += f * red_l[w * R + tid];
    }
    row_m[tid] = mx;
    row_l[tid] = l;
  }
  __syncthreads();
  const long long part = (long long)kvh * p.n_slots;
  for (int e = tid; e < nrows * D; e += NT) {
    const int row = e / D, x = e % D;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) acc += fac[w * R + row] * red_o[(w * R + row) * Sh::OS + x];
    const int slot = s_slot[row];
    if (slot < 0) {
      const int task = s_task[row], qr = task / p.group, gq = task % p.group;
      const float l = row_l[row];
      p.out[((long long)qr * p.n_heads + (long long)kvh * p.group + gq) * D + x] = l > 0.f ? acc / l : 0.f;
    } else {
      p.part_o[(part + slot) * D + x] = acc;
      if (x == 0) {
        p.part_m[part + slot] = row_m[row];
        p.part_l[part + slot] = row_l[row];
      }
    }
  }
  // Launched behind the other tile launch (programmatic dependent launch),
  // this grid may finish before that one does, and the stream lets the next
  // kernel start when this grid finishes: its merges, or the layer's next
  // step, reading both grids' rows. So a grid does not finish before its
  // predecessor has (a no-op where this launch was not programmatic).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// One (task, KV head)'s parts merged by one warp, its lanes holding D / 32
// elements each; the parts' m and l go 32 at a time, one per lane, and each
// lane then folds every part's elements in walk order (the same arithmetic
// as a tile's merge of its warps' states: the largest m, the factors, l and
// the sums each in walk order). `slots`: the task's n slots in walk order;
// my_slot: slots[lane] (or 0), read by the caller. No part: zeros. Parts are
// read from L2 (__ldcg): other blocks wrote them.
template <int D>
__device__ __forceinline__ void merge_row(const Params& p, int kvh, int t, const int32_t* slots, int n,
                                          const int my_slot, int lane) {
  constexpr int V = D / 32;  // elements per lane
  constexpr int C = 8;       // parts loaded at once
  const long long part = (long long)kvh * p.n_slots;
  auto row_of = [&](int slot) { return p.part_o + (part + slot) * D + lane * V; };
  auto load = [&](const float* src, float* ov) {
    if constexpr (V == 4) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(src));
      ov[0] = x.x, ov[1] = x.y, ov[2] = x.z, ov[3] = x.w;
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) ov[v] = __ldcg(src + v);
    }
  };
  // The first parts' elements in flight with the first 32 parts' m and l
  // (one trip to L2 for a task of up to 8 parts).
  float first[C][V];
#pragma unroll
  for (int k = 0; k < C; ++k) {
    const int sk = __shfl_sync(0xffffffffu, my_slot, k);
    if (k < n) load(row_of(sk), first[k]);
  }
  const float m_first = lane < n ? __ldcg(p.part_m + part + my_slot) : -INFINITY;
  const float l_first = lane < n ? __ldcg(p.part_l + part + my_slot) : 0.f;
  float mx = m_first;
  for (int k0 = 32; k0 < n; k0 += 32) {
    const int sl = k0 + lane < n ? slots[k0 + lane] : 0;
    mx = fmaxf(mx, k0 + lane < n ? __ldcg(p.part_m + part + sl) : -INFINITY);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float l = 0.f, acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = 0.f;
  for (int k0 = 0; k0 < n; k0 += 32) {
    const int slot = k0 == 0 ? my_slot : k0 + lane < n ? slots[k0 + lane] : 0;
    const float m = k0 == 0 ? m_first : k0 + lane < n ? __ldcg(p.part_m + part + slot) : -INFINITY;
    const float f = m == -INFINITY ? 0.f : exp2f(m - mx);
    const float lp = k0 == 0 ? l_first : k0 + lane < n ? __ldcg(p.part_l + part + slot) : 0.f;
    const int kn = min(32, n - k0);
    for (int c0 = 0; c0 < kn; c0 += C) {
      float ov[C][V];
      if (k0 == 0 && c0 == 0) {
#pragma unroll
        for (int k = 0; k < C; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) ov[k][v] = first[k][v];
      } else {
#pragma unroll
        for (int k = 0; k < C; ++k) {
          const int sk = __shfl_sync(0xffffffffu, slot, c0 + k);
          if (c0 + k < kn) load(row_of(sk), ov[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const float fk = __shfl_sync(0xffffffffu, f, c0 + k);
        const float lk = __shfl_sync(0xffffffffu, lp, c0 + k);
        if (c0 + k >= kn) break;
        l += fk * lk;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += fk * ov[k][v];
      }
    }
  }
  const int qr = t / p.group, gq = t % p.group;
  float* dst = p.out + ((long long)qr * p.n_heads + (long long)kvh * p.group + gq) * D + lane * V;
#pragma unroll
  for (int v = 0; v < V; ++v) dst[v] = l > 0.f ? acc[v] / l : 0.f;
}

// The merges: a warp per (task of several parts, KV head), each by merge_row.
template <int D>
__global__ void __launch_bounds__(128) merge_parts(const Params p, int n_merge, const int32_t* task,
                                                   const int32_t* begin, const int32_t* slots) {
  const int w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x & 31, kvh = blockIdx.y;
  const bool live = w < n_merge;
  // The plan's arrays first (the tiles do not write them), then wait: behind
  // one tile launch this may have started before it ended.
  const int b = live ? begin[w] : 0, n = live ? begin[w + 1] - b : 0;
  const int t = live ? task[w] : 0;
  const int my_slot = lane < n ? slots[b + lane] : 0;  // parts 0..31, one per lane
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (!live) return;
  merge_row<D>(p, kvh, t, slots + b, n, my_slot, lane);
}

// Launches one tile kernel over `n` tiles; `after_previous`: may start while
// the previous launch on the stream still runs (programmatic dependent
// launch), the two being independent.
template <class T, int D, int RG, int S>
void launch_tiles(const Params& p, int n, int n_kv, bool after_previous) {
  auto kernel = attn_tiles<T, D, RG, S>;
  constexpr int bytes = Shape<D, RG, S>::BYTES;
  static bool configured = false;  // the dynamic shared memory limit, raised once per kernel
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error(std::string("CUDA attention: cannot configure the tile kernel: ") + cudaGetErrorString(e));
    }
    configured = true;
  }
  cuda::launch_ex("CUDA attention's tile kernel", kernel, dim3(unsigned(n), unsigned(n_kv)),
                  Shape<D, RG, S>::THREADS, bytes, after_previous, p);
}

// The kernels of one K/V type and head dimension: tiles of 17-32 rows (two
// row groups, eight warps, one copy of each unit in shared memory for both)
// and tiles of up to 16 (one row group: less shared memory, more blocks per
// multiprocessor for the many small tiles of decode).
template <class T, int D>
void launch_all(const Params& big, int n_big, const Params& small, int n_small, int n_kv, int small_stages) {
  if constexpr (D <= 128) {
    if (n_big) launch_tiles<T, D, 2, D == 64 ? 4 : 3>(big, n_big, n_kv, false);
  }
  if (!n_small) return;
  if constexpr (D == 256) {
    launch_tiles<T, D, 1, 2>(small, n_small, n_kv, n_big > 0);
  } else if constexpr (D == 64) {
    launch_tiles<T, D, 1, 4>(small, n_small, n_kv, n_big > 0);
  } else {
    if (small_stages == 3) launch_tiles<T, D, 1, 3>(small, n_small, n_kv, n_big > 0);
    else launch_tiles<T, D, 1, 2>(small, n_small, n_kv, n_big > 0);
  }
}

}  // namespace

struct CudaAttention::Impl {
  TilePlan plan;
  Options opt;
  int n_big = 0, n_small = 0;  // tiles of more than 16 rows, and the rest
  cuda::Buffer arrays;    // every int array of the plan, one upload
  cuda::Buffer parts;     // partial states
  // Offsets (in int32s) of each array in `arrays`.
  size_t big = 0, small = 0, big_units = 0, small_units = 0, big_rows = 0, small_rows = 0, merge_task = 0, merge_begin = 0, merge_slot = 0;
};

CudaAttention::CudaAttention(Options opt) : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!cuda::device_available(&why)) throw Error("CUDA attention: " + why);
  impl_->opt = opt;
}

CudaAttention::~CudaAttention() = default;

int CudaAttention::tiles() const { return impl_->plan.n_tiles(); }
int CudaAttention::merges() const { return int(impl_->plan.merge_task.size()); }

void CudaAttention::set_plan(const TilePlan& plan) {
  Impl& m = *impl_;
  const KvLayout& L = plan.layout;
  if (L.head_dim != 64 && L.head_dim != 128 && L.head_dim != 256)
    throw Error("CUDA attention: head_dim must be 64, 128 or 256");
  for (int t = 0; t < plan.n_tiles(); ++t)
    if (plan.tile_row_begin[size_t(t) + 1] - plan.tile_row_begin[size_t(t)] > tile_max_rows(L.head_dim))
      throw Error("CUDA attention: a tile holds more rows than the kernel takes");
  m.plan = plan;
  // Units: each tile's chunks cut into 64 keys, numbered from the tile's
  // first key; units past every row's causal limit are left out. Tiles of
  // more than 16 rows go to one launch, the rest to the other.
  std::vector<int32_t> big, small, big_units, small_units, big_rows, small_rows;
  for (int t = 0; t < plan.n_tiles(); ++t) {
    const bool is_big = plan.tile_row_begin[size_t(t) + 1] - plan.tile_row_begin[size_t(t)] > 16;
    std::vector<int32_t>& units = is_big ? big_units : small_units;
    std::vector<int32_t>& rows = is_big ? big_rows : small_rows;
    const size_t rows_at = rows.size();
    const int rb = plan.tile_row_begin[size_t(t)], re = plan.tile_row_begin[size_t(t) + 1];
    int hi = 0;
    for (int r = rb; r < re; ++r) {
      hi = std::max(hi, plan.row_hi[size_t(r)]);
      rows.insert(rows.end(), {plan.row_task[size_t(r)], plan.row_start[size_t(r)], plan.row_hi[size_t(r)],
                               plan.row_slot[size_t(r)]});
    }
    const int u0 = int(units.size() / 4);
    int key = 0;
    for (int i = plan.tile_chunk_begin[size_t(t)]; i < plan.tile_chunk_begin[size_t(t) + 1]; ++i) {
      const int len = plan.chunk_len[size_t(i)];
      for (int j = 0; j * kUnit < len; ++j) {
        const int base = key + j * kUnit;
        if (base >= hi) break;
        units.insert(units.end(), {plan.chunk_id[size_t(i)], j, base, std::min(kUnit, len - j * kUnit)});
      }
      key += len;
    }
    const int u1 = int(units.size() / 4);
    if (u1 - u0 > kMaxUnits) throw Error("CUDA attention: a tile's window holds too many keys");
    units.resize(size_t(u0 + kMaxUnits) * 4, 0);
    rows.resize(rows_at + size_t(is_big ? 32 : 16) * 4, 0);
    (is_big ? big : small).insert((is_big ? big : small).end(), {u1 - u0, re - rb, 0, 0});
  }
  m.n_big = int(big.size() / 4);
  m.n_small = int(small.size() / 4);
  std::vector<int32_t> all;
  auto put = [&](const std::vector<int32_t>& v) {
    const size_t at = all.size();
    all.insert(all.end(), v.begin(), v.end());
    all.resize((all.size() + 3) & ~size_t(3));  // 16-byte aligned starts
    return at;
  };
  m.big = put(big);
  m.small = put(small);
  m.big_units = put(big_units);
  m.small_units = put(small_units);
  m.big_rows = put(big_rows);
  m.small_rows = put(small_rows);
  m.merge_task = put(plan.merge_task);
  m.merge_begin = put(plan.merge_begin);
  m.merge_slot = put(plan.merge_slot);
  m.arrays.reserve(std::max<size_t>(all.size(), 1) * 4);
  cuda::to_device(m.arrays.get(), all.data(), all.size() * 4);
  m.parts.reserve(std::max<size_t>(size_t(plan.n_slots) * size_t(L.n_kv_heads) * size_t(L.head_dim + 2), 1) * 4);
}

void CudaAttention::run(const DeviceKvMemory& kv, int layer, const float* q, float* out, const int32_t* window_first) {
  Impl& m = *impl_;
  const TilePlan& plan = m.plan;
  const KvLayout& L = plan.layout;
  const KvLayout& K = kv.layout();
  if (K.head_dim != L.head_dim || K.n_kv_heads != L.n_kv_heads || K.chunk_size != L.chunk_size || K.type != L.type ||
      layer < 0 || layer >= K.n_layers)
    throw Error("CUDA attention: the plan's KV layout is not the memory's");
  const int32_t* a = m.arrays.as<int32_t>();
  Params p{};
  p.pool = kv.base();
  p.chunk_bytes = (long long)K.chunk_bytes();
  p.block_bytes = (long long)K.block_bytes();
  p.layer_off = (long long)layer * K.n_kv_heads * 2 * p.block_bytes;
  p.c = K.chunk_size;
  p.n_kv = K.n_kv_heads;
  p.n_heads = plan.n_heads;
  p.group = plan.group;
  p.n_slots = plan.n_slots;
  p.q = q;
  p.out = out;
  float* parts = m.parts.as<float>();
  p.part_o = parts;
  p.part_m = parts + size_t(plan.n_slots) * size_t(L.n_kv_heads) * size_t(L.head_dim);
  p.part_l = p.part_m + size_t(plan.n_slots) * size_t(L.n_kv_heads);
  p.window_first = window_first;
  p.q_scale = float(1.4426950408889634 / std::sqrt(double(L.head_dim)));
  Params big = p, small = p;
  big.tiles = reinterpret_cast<const int4*>(a + m.big);
  small.tiles = reinterpret_cast<const int4*>(a + m.small);
  big.units = reinterpret_cast<const int4*>(a + m.big_units);
  small.units = reinterpret_cast<const int4*>(a + m.small_units);
  big.rows = reinterpret_cast<const int4*>(a + m.big_rows);
  small.rows = reinterpret_cast<const int4*>(a + m.small_rows);
  const int nkv = L.n_kv_heads, st = m.opt.decode_stages > 0 ? m.opt.decode_stages : m.n_big == 0 ? 3 : 2;
  if (m.n_big + m.n_small > 0) {
    const bool half = L.type == KvType::kF16;
    switch (L.head_dim) {
      case 64:
        half ? launch_all<__half, 64>(big, m.n_big, small, m.n_small, nkv, st)
             : launch_all<__nv_bfloat16, 64>(big, m.n_big, small, m.n_small, nkv, st);
        break;
      case 128:
        half ? launch_all<__half, 128>(big, m.n_big, small, m.n_small, nkv, st)
             : launch_all<__nv_bfloat16, 128>(big, m.n_big, small, m.n_small, nkv, st);
        break;
      default:
        half ? launch_all<__half, 256>(big, m.n_big, small, m.n_small, nkv, st)
             : launch_all<__nv_bfloat16, 256>(big, m.n_big, small, m.n_small, nkv, st);
        break;
    }
  }
  const int nm = int(plan.merge_task.size());
  if (nm > 0 && !m.opt.no_merge) {
    // Behind a single tile launch the merges may start early and wait in the
    // kernel (griddepcontrol.wait); behind two they wait in the stream for
    // the second, which ends only after the first (attn_tiles' last wait).
    const dim3 grid(unsigned((nm + 3) / 4), unsigned(nkv));
    const bool early = (m.n_big > 0) != (m.n_small > 0);
    const int32_t *mt = a + m.merge_task, *mb = a + m.merge_begin, *ms = a + m.merge_slot;
    auto* kernel = L.head_dim == 64 ? merge_parts<64> : L.head_dim == 128 ? merge_parts<128> : merge_parts<256>;
    cuda::launch_ex("CUDA attention's merge kernel", kernel, grid, 128, 0, early, p, nm, mt, mb, ms);
  }
}

}  // namespace cs
