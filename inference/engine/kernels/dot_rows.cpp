// rows [R, in] x weight [out, in] -> [R, out], float32, for the few rows of a decode step.
//
// Each output is a dot product of a row with one contiguous row of the weight, so the weight
// streams from memory once, in order, whatever R; a tile of 3 rows x 4 outputs keeps 12 sums
// in registers and reads each weight vector once for its 3 rows. While a tile's first rows
// compute, the next tile's weights (the next in memory) are fetched into L2: with a few rows
// the arithmetic per weight is long enough that, without it, reading and computing took turns
// (16 rows: 43 against 55 ms a pass over the default model). Rows are taken in blocks that fit
// the core's L2 beside a tile's weights, so that for a long prompt chunk the rows are read from
// cache while each thread's weights come from L3. Outputs are shared among torch's own OpenMP
// threads (at::parallel_for), each thread a contiguous range.
//
// Why not oneDNN's packed product: on an AVX2 AMD EPYC a pass over the default model's weights
// took it 25-31 ms for one row, 33 for four and 52-56 for sixteen, and this 19-23, 25 and 43
// (the machine's copy bandwidth with two threads: 20-27 GB/s); at 64 and 128 rows they are
// equal; above, torch's own product serves (at::linear), as fast as oneDNN's there.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>

namespace {

// More rows than this go to at::linear: compute decides there, not reading the weight.
constexpr int64_t kMostRows = 128;
// Floats of rows kept in L2 at once (192 KB).
constexpr int64_t kRowBlockFloats = 49152;
constexpr int64_t kTileOutputs = 4;

inline float horizontal_sum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_hadd_ps(sum, sum);
  sum = _mm_hadd_ps(sum, sum);
  return _mm_cvtss_f32(sum);
}

// Rows [first, first + R) x outputs [column, column + B) of the product; with FetchNext, the
// next_floats floats at `next` are fetched into L2 meanwhile.
template <int R, int B, bool FetchNext>
inline void tile(const float* rows, int64_t width, const float* weight, float* product,
                 int64_t outputs, int64_t first, int64_t column, const float* next, int64_t next_floats) {
  __m256 sums[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) sums[r][b] = _mm256_setzero_ps();
  const float* row = rows + first * width;
  const float* weights = weight + column * width;
  int64_t i = 0;
  for (; i + 8 <= width; i += 8) {
    if (FetchNext) {
      const int64_t at = i * B;
      if (at < next_floats) _mm_prefetch(reinterpret_cast<const char*>(next + at), _MM_HINT_T1);
      if (B >= 2 && at + 16 < next_floats) _mm_prefetch(reinterpret_cast<const char*>(next + at + 16), _MM_HINT_T1);
    }
    __m256 values[R];
    for (int r = 0; r < R; ++r) values[r] = _mm256_loadu_ps(row + r * width + i);
    for (int b = 0; b < B; ++b) {
      __m256 w = _mm256_loadu_ps(weights + b * width + i);
      for (int r = 0; r < R; ++r) sums[r][b] = _mm256_fmadd_ps(values[r], w, sums[r][b]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < B; ++b) {
      float sum = horizontal_sum(sums[r][b]);
      for (int64_t j = i; j < width; ++j) sum += row[r * width + j] * weights[b * width + j];
      product[(first + r) * outputs + column + b] = sum;
    }
  }
}

// One tile of up to 3 of the rows from `first` on; returns how many it took.
template <int B, bool FetchNext>
inline int64_t next_tile(const float* rows, int64_t first, int64_t last, int64_t width,
                         const float* weight, float* product, int64_t outputs, int64_t column,
                         const float* next, int64_t next_floats) {
  switch (std::min<int64_t>(3, last - first)) {
    case 3: tile<3, B, FetchNext>(rows, width, weight, product, outputs, first, column, next, next_floats); return 3;
    case 2: tile<2, B, FetchNext>(rows, width, weight, product, outputs, first, column, next, next_floats); return 2;
    default: tile<1, B, FetchNext>(rows, width, weight, product, outputs, first, column, next, next_floats); return 1;
  }
}

template <int B>
void columns(const float* rows, int64_t first, int64_t last, int64_t width, const float* weight,
             float* product, int64_t outputs, int64_t column, int64_t end_column) {
  // The next tile's weights follow this one's in memory: fetched while this one computes.
  const float* next = weight + (column + B) * width;
  const int64_t next_floats = std::max<int64_t>(0, std::min<int64_t>(B, end_column - column - B)) * width;
  // Only the first tile fetches: the later ones read this tile's weights from L1 again.
  int64_t r = first;
  if (r < last) r += next_tile<B, true>(rows, r, last, width, weight, product, outputs, column, next, next_floats);
  while (r < last) r += next_tile<B, false>(rows, r, last, width, weight, product, outputs, column, next, 0);
}

at::Tensor dot_rows(const at::Tensor& rows_in, const at::Tensor& weight) {
  TORCH_CHECK(rows_in.dim() == 2 && weight.dim() == 2 && rows_in.size(1) == weight.size(1),
              "dot_rows: rows [R, in] and weight [out, in]");
  TORCH_CHECK(rows_in.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
              "dot_rows: float32 only");
  TORCH_CHECK(weight.is_contiguous(), "dot_rows: the weight must be contiguous");
  const int64_t count = rows_in.size(0), width = rows_in.size(1), outputs = weight.size(0);
  if (count > kMostRows) return at::linear(rows_in, weight);
  const at::Tensor rows = rows_in.contiguous();
  at::Tensor product = at::empty({count, outputs}, rows.options());
  const float* x = rows.const_data_ptr<float>();
  const float* w = weight.const_data_ptr<float>();
  float* y = product.mutable_data_ptr<float>();
  const int64_t tiles = outputs / kTileOutputs;
  const int64_t block = std::max<int64_t>(3, kRowBlockFloats / std::max<int64_t>(width, 1) / 3 * 3);
  at::parallel_for(0, tiles, 16, [&](int64_t begin, int64_t end) {
    for (int64_t first = 0; first < count; first += block) {
      const int64_t last = std::min(count, first + block);
      for (int64_t t = begin; t < end; ++t)
        columns<kTileOutputs>(x, first, last, width, w, y, outputs, t * kTileOutputs, end * kTileOutputs);
    }
  });
  for (int64_t column = tiles * kTileOutputs; column < outputs; ++column)
    columns<1>(x, 0, count, width, w, y, outputs, column, column + 1);
  return product;
}

}  // namespace

TORCH_LIBRARY(chatapp, m) {
  m.def("dot_rows(Tensor rows, Tensor weight) -> Tensor");
}

TORCH_LIBRARY_IMPL(chatapp, CPU, m) {
  m.impl("dot_rows", dot_rows);
}
