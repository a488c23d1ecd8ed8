// The tiles of our product kernel (dot_rows.cpp): rows [R, in] x weight [out, in], each output a
// dot product of a row with one contiguous row of the weight, summed in float32 and written as
// the product's type. Rows, weight and product are of one type, but where the native step
// screens its output matrix in a narrower type (decode_step.cpp): float32 rows times a float16
// or int8 weight, into float32. Shared by the `dot_rows` operator and the native decode step
// (decode_step.cpp), which call them on a range of the outputs; dot_rows.cpp says why they are
// shaped so.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace chatapp_dot {

// More rows than this go to at::linear until the loader has measured where the two cross on
// this machine (dot_rows.cpp, `dot_rows_limit`): compute decides there, not reading the weight,
// and whose arithmetic is faster depends on the precision and the CPU. On an AMD EPYC, float32
// with AVX-512: ours took 0.34-0.62x torch's time (oneMKL's) for a pass over the default model
// at 16-512 rows (a prompt chunk is at most 512 by default); with AVX2 the two were equal at 64
// and 128 rows. bfloat16: torch's (oneDNN's) is as fast at 64 rows and 1.11-1.35x faster from
// 100 to 512 (an AVX-512 BF16 AMD EPYC, both measured in turns in one process; BENCHMARKS.md).
#if defined(__AVX512F__)
constexpr int64_t kMostFloatRows = 512;
#else
constexpr int64_t kMostFloatRows = 128;
#endif
constexpr int64_t kMostBFloat16Rows = 64;
// Bytes of rows kept in L2 at once.
constexpr int64_t kRowBlockBytes = 196608;
// Tiles of rows x outputs. One or two rows (a lone stream) read the weights and little else:
// their tile takes 4 outputs, adjacent weight rows, so that a thread's tiles and the fetch of
// its next tile read one stream of memory front to back, and a row's 4 sums are 4 chains of
// multiply-adds, each waiting on its last. With AVX-512 on an AMD EPYC (Zen 4), one stream's
// native step with 2 x 2 against 2 x 8 tiles, in turns: float32 7.6-7.9 against 8.6-9.2 ms,
// bfloat16 4.2-4.6 against 4.6-4.9 (2 x 4: float32 7.5 against 8.5, bfloat16 no change; 2 x 1:
// a lone sum's chain, slower). On an Intel Xeon with AMX, 2 x 4 against 2 x 2 (the step
// benchmark, three runs): one float32 stream 14.3-14.9 against 15.6-16.8 ms, bfloat16 the same
// (9.1 / 9.1-9.3), and the greedy step's int8 screen (16 levels a multiply-add, float32's
// arithmetic) 0.91x-0.92x the whole product's step against 0.93x-0.95x. More rows take more
// rows a tile, as many sums as the vector registers hold beside the rows and a weight vector,
// which reads each weight vector for more of them: with AVX-512's 32 registers, a pass over the
// default model in bfloat16 took 8.0 / 9.8 / 16.4 ms at 4 / 8 / 16 rows, against 9.8 / 12.8 /
// 22.3 with AVX2's 3 x 4 (16 registers) on an AVX-512 BF16 AMD EPYC. AVX2's few-row tile is not
// measured against a narrower one.
struct TileShape {
  int rows, outputs;
};
constexpr int64_t kFewRows = 2;
#if defined(__AVX512F__)
constexpr TileShape kFew{2, 4}, kMany{6, 4};
#else
constexpr TileShape kFew{3, 4}, kMany{3, 4};
#endif
constexpr int64_t kLine = 64;

// One element type's vector arithmetic: `step` elements of a row and of a weight row are
// multiplied and added into float32 sums per `mul_add`.
template <typename T>
struct Vectors;

#if defined(__AVX512F__)
using Sums = __m512;
inline Sums no_sums() { return _mm512_setzero_ps(); }
inline float total(Sums v) { return _mm512_reduce_add_ps(v); }

template <>
struct Vectors<float> {
  using Operand = __m512;
  static constexpr int64_t step = 16;
  static Operand load(const float* at) { return _mm512_loadu_ps(at); }
  static Sums mul_add(Sums sums, Operand a, Operand b) { return _mm512_fmadd_ps(a, b, sums); }
};
#else
using Sums = __m256;
inline Sums no_sums() { return _mm256_setzero_ps(); }
inline float total(Sums v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_hadd_ps(sum, sum);
  sum = _mm_hadd_ps(sum, sum);
  return _mm_cvtss_f32(sum);
}

template <>
struct Vectors<float> {
  using Operand = __m256;
  static constexpr int64_t step = 8;
  static Operand load(const float* at) { return _mm256_loadu_ps(at); }
  static Sums mul_add(Sums sums, Operand a, Operand b) { return _mm256_fmadd_ps(a, b, sums); }
};
#endif

#if defined(__AVX512BF16__)
constexpr bool kBFloat16 = true;
template <>
struct Vectors<c10::BFloat16> {
  using Operand = __m512bh;
  static constexpr int64_t step = 32;
  static Operand load(const c10::BFloat16* at) { return (__m512bh)_mm512_loadu_si512(at); }
  static Sums mul_add(Sums sums, Operand a, Operand b) { return _mm512_dpbf16_ps(sums, a, b); }
};
#else
constexpr bool kBFloat16 = false;
#endif

// float16 only as the native step's screen's weight (decode_step.cpp): each vector of halves
// widened to float32 by F16C's conversion, then multiplied with float32 rows' and added as
// float32's are (float32's arithmetic, inherited). Every CPU with AVX2 has F16C.
template <>
struct Vectors<c10::Half> : Vectors<float> {
#if defined(__AVX512F__)
  static Operand load(const c10::Half* at) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  }
#else
  static Operand load(const c10::Half* at) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  }
#endif
};

// int8 only as an 8-bit screen's weight (decode_step.cpp): each vector of levels widened to
// float32 exactly, then multiplied with float32 rows' as float32's are.
template <>
struct Vectors<int8_t> : Vectors<float> {
#if defined(__AVX512F__)
  static Operand load(const int8_t* at) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at))));
  }
#else
  static Operand load(const int8_t* at) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at))));
  }
#endif
};

// Rows [first, first + R) x outputs [column, column + B) of the product; with FetchNext, the
// next_bytes bytes at `next` are fetched into L2 meanwhile, as fast as the tile reads its own.
template <typename T, int R, int B, bool FetchNext, typename W, typename O>
inline void tile(const T* rows, int64_t width, const W* weight, O* product, int64_t outputs,
                 int64_t first, int64_t column, const char* next, int64_t next_bytes) {
  using V = Vectors<T>;
  using VW = Vectors<W>;
  static_assert(V::step == VW::step && std::is_same_v<typename V::Operand, typename VW::Operand>,
                "rows and weight multiply as one vector type");
  constexpr int64_t kLinesPerStep = (V::step * int64_t(sizeof(W)) * B + kLine - 1) / kLine;
  Sums sums[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) sums[r][b] = no_sums();
  const T* row = rows + first * width;
  const W* weights = weight + column * width;
  int64_t i = 0;
  for (; i + V::step <= width; i += V::step) {
    if (FetchNext) {
      const int64_t at = i * int64_t(sizeof(W)) * B;
      for (int64_t line = 0; line < kLinesPerStep; ++line)
        if (at + line * kLine < next_bytes) _mm_prefetch(next + at + line * kLine, _MM_HINT_T1);
    }
    typename V::Operand values[R];
    for (int r = 0; r < R; ++r) values[r] = V::load(row + r * width + i);
    for (int b = 0; b < B; ++b) {
      const typename V::Operand w = VW::load(weights + b * width + i);
      for (int r = 0; r < R; ++r) sums[r][b] = V::mul_add(sums[r][b], values[r], w);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < B; ++b) {
      float sum = total(sums[r][b]);
      for (int64_t j = i; j < width; ++j)
        sum += static_cast<float>(row[r * width + j]) * static_cast<float>(weights[b * width + j]);
      product[(first + r) * outputs + column + b] = static_cast<O>(sum);
    }
  }
}

// One tile of up to R of the rows from `first` on; returns how many it took.
template <typename T, int R, int B, bool FetchNext, typename W, typename O>
inline int64_t next_tile(const T* rows, int64_t first, int64_t last, int64_t width, const W* weight,
                         O* product, int64_t outputs, int64_t column, const char* next, int64_t next_bytes) {
  if constexpr (R > 1) {
    if (last - first < R)
      return next_tile<T, R - 1, B, FetchNext>(rows, first, last, width, weight, product, outputs, column, next, next_bytes);
  }
  tile<T, R, B, FetchNext>(rows, width, weight, product, outputs, first, column, next, next_bytes);
  return R;
}

template <typename T, int R, int B, typename W, typename O>
void columns(const T* rows, int64_t first, int64_t last, int64_t width, const W* weight,
             O* product, int64_t outputs, int64_t column, int64_t end_column) {
  // The next tile's weights follow this one's in memory: fetched while this one computes.
  const char* next = reinterpret_cast<const char*>(weight + (column + B) * width);
  const int64_t next_bytes =
      std::max<int64_t>(0, std::min<int64_t>(B, end_column - column - B)) * width * int64_t(sizeof(W));
  // Only the first tile fetches: the later ones read this tile's weights from L1 again.
  int64_t r = first;
  if (r < last) r += next_tile<T, R, B, true>(rows, r, last, width, weight, product, outputs, column, next, next_bytes);
  while (r < last) r += next_tile<T, R, B, false>(rows, r, last, width, weight, product, outputs, column, next, 0);
}


// Outputs [tile_begin * B, tile_end * B) of the product, rows taken in blocks that fit L2. Each
// tile fetches the next one's weights, up to tile fetch_end (tile_end unless a later call takes
// the tiles after these).
template <typename T, int R, int B, typename W, typename O>
void tiles(const T* x, int64_t count, int64_t width, const W* w, O* y, int64_t outputs, int64_t tile_begin,
           int64_t tile_end, int64_t fetch_end = 0) {
  fetch_end = std::max(fetch_end, tile_end);
  const int64_t row_bytes = std::max<int64_t>(width, 1) * int64_t(sizeof(T));
  const int64_t block = std::max<int64_t>(R, kRowBlockBytes / row_bytes / R * R);
  for (int64_t first = 0; first < count; first += block) {
    const int64_t last = std::min(count, first + block);
    for (int64_t t = tile_begin; t < tile_end; ++t)
      columns<T, R, B>(x, first, last, width, w, y, outputs, t * B, fetch_end * B);
  }
}

// The outputs past the last whole tile of B.
template <typename T, typename W, typename O>
void last_columns(const T* x, int64_t count, int64_t width, const W* w, O* y, int64_t outputs, int64_t from) {
  for (int64_t column = from; column < outputs; ++column)
    columns<T, kMany.rows, 1>(x, 0, count, width, w, y, outputs, column, column + 1);
}

}  // namespace chatapp_dot
