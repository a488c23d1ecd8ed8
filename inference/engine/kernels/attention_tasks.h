// The arithmetic of a decode step's attention (decode_attention.cpp says why it is shaped so):
// each task a row's key head over a stretch of its keys, for the group of query heads sharing it,
// then each query's stretches merged. Shared by the `decode_attention_rows` operator, which
// shares the tasks among torch's threads, and the native decode step (decode_step.cpp), whose
// threads each take their share inside its one parallel region.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace chatapp_attention {

constexpr int64_t kMostDim = 256;
// Tasks a thread when a step's rows and key heads are too few to share evenly; fewer keys than
// kLeastStretch are never split (the merge would cost more than the sharing gains).
constexpr int64_t kTasksPerThread = 8;
constexpr int64_t kLeastStretch = 32;

// float32 vectors as wide as the library was compiled for (own_kernels.py: AVX-512 or AVX2).
#if defined(__AVX512F__)
using Floats = __m512;
constexpr int64_t kWidth = 16;
inline Floats zeros() { return _mm512_setzero_ps(); }
inline Floats broadcast(float x) { return _mm512_set1_ps(x); }
inline Floats load(const float* at) { return _mm512_loadu_ps(at); }
inline Floats load(const c10::BFloat16* at) {  // bfloat16 is float32's upper half
  const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}
inline void store(float* at, Floats v) { _mm512_storeu_ps(at, v); }
inline Floats mul_add(Floats a, Floats b, Floats sums) { return _mm512_fmadd_ps(a, b, sums); }
inline float total(Floats v) { return _mm512_reduce_add_ps(v); }
// Per 128-bit block: a's and b's lanes added in pairs, [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
inline Floats pair_sums(Floats a, Floats b) { return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); }
// Per 128-bit block, of two `pair_sums` (of a, b and of c, d): [a, b, c, d]'s sums over the block.
inline Floats block_sums(Floats ab, Floats cd) {
  const __m512d x = _mm512_castps_pd(ab), y = _mm512_castps_pd(cd);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}
// Of four `block_sums` (of v[0..3], .., v[12..15]): lane k, v[k]'s sum over all blocks.
inline Floats across_blocks(const Floats* fours) {
  const Floats low = _mm512_add_ps(_mm512_shuffle_f32x4(fours[0], fours[1], 0x44),
                                   _mm512_shuffle_f32x4(fours[0], fours[1], 0xEE));
  const Floats high = _mm512_add_ps(_mm512_shuffle_f32x4(fours[2], fours[3], 0x44),
                                    _mm512_shuffle_f32x4(fours[2], fours[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, 0x88), _mm512_shuffle_f32x4(low, high, 0xDD));
}
#else
using Floats = __m256;
constexpr int64_t kWidth = 8;
inline Floats zeros() { return _mm256_setzero_ps(); }
inline Floats broadcast(float x) { return _mm256_set1_ps(x); }
inline Floats load(const float* at) { return _mm256_loadu_ps(at); }
inline Floats load(const c10::BFloat16* at) {
  const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}
inline void store(float* at, Floats v) { _mm256_storeu_ps(at, v); }
inline Floats mul_add(Floats a, Floats b, Floats sums) { return _mm256_fmadd_ps(a, b, sums); }
inline float total(Floats v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_hadd_ps(sum, sum);
  sum = _mm_hadd_ps(sum, sum);
  return _mm_cvtss_f32(sum);
}
inline Floats pair_sums(Floats a, Floats b) { return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); }
inline Floats block_sums(Floats ab, Floats cd) {
  const __m256d x = _mm256_castps_pd(ab), y = _mm256_castps_pd(cd);
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
}
// Of two `block_sums` (of v[0..3], v[4..7]): lane k, v[k]'s sum over both blocks.
inline Floats across_blocks(const Floats* fours) {
  return _mm256_add_ps(_mm256_permute2f128_ps(fours[0], fours[1], 0x20),
                       _mm256_permute2f128_ps(fours[0], fours[1], 0x31));
}
#endif

// Lane k: the sum of v[k]'s lanes, for kWidth vectors. Pairs of vectors are added lane-wise
// after interleaving, so that each add serves two, then four, then kWidth sums: 45
// instructions for 16 sums with AVX-512, against about 7 a sum reduced one by one (`total`).
inline Floats lane_sums(const Floats* v) {
  Floats fours[kWidth / 4];
  for (int64_t i = 0; i < kWidth / 4; ++i)
    fours[i] = block_sums(pair_sums(v[4 * i], v[4 * i + 1]), pair_sums(v[4 * i + 2], v[4 * i + 3]));
  return across_blocks(fours);
}

// e^x for x <= 0 (scores less their maximum), as 2^n * 2^f with f in [-0.5, 0.5] and 2^f by its
// Taylor series to the 7th power (relative error under 1e-7); written so that the compiler
// vectorizes it in a loop, which std::exp is not.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504f;
  const float n = std::nearbyint(t);
  const float f = (t - n) * 0.693147181f;
  float p = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720 + f * (1.0f / 5040)))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// One stretch's softmax for each query of a group: its largest score, the sum of its weights
// (e^(score - top)), and its values' sum weighted so, in `sums` [dim]. An empty stretch has
// top -inf and nothing summed.
struct Partial {
  float top, total;
  float* sums;
};

// Where a task's keys are: a row's key head, keys [first, last) of its count cached ones and
// its own (index `count`).
template <typename T>
struct Stretch {
  const T *keys, *values, *own_key, *own_value;
  int64_t count, first, last;
  const T* key(int64_t j, int64_t dim) const { return j < count ? keys + j * dim : own_key; }
  const T* value(int64_t j, int64_t dim) const { return j < count ? values + j * dim : own_value; }
};

// Keys and values are taken kBlock at a time (a few kilobytes: they stay in L1 while every
// query of the group reads them), and scored kKeys at a time: separate sums, so that one key's
// multiply-adds do not wait for another's (one at a time, a key's dot product was a chain of
// dependent multiply-adds and a horizontal sum: about 36 cycles, for every key and query).
constexpr int64_t kBlock = 32;
constexpr int kKeys = 4;

// The cache is read from memory (the step's weights have passed through the caches since the
// last step), a stretch a task, a few kilobytes each: too short for the hardware's prefetchers
// to reach full speed before it ends. So each block's keys are asked for one block ahead, and
// its values (read in the second pass) with them, into L2. One call, bf16, 2 threads, the cache
// cold (9 MB of other memory read between calls), 3 key heads x 3 queries: one row over 600
// keys 26-29 against 44-49 us; over 300 keys, and four or sixteen rows, no change beyond the
// noise (the sixteen rows' read runs at about the machine's bandwidth either way).
inline void fetch(const void* from, int64_t bytes) {
  const char* at = static_cast<const char*>(from);
  for (int64_t line = 0; line < bytes; line += 64) _mm_prefetch(at + line, _MM_HINT_T1);
}

template <typename T>
inline void fetch_block(const Stretch<T>& at, int64_t from, int64_t dim) {
  const int64_t to = std::min(std::min(at.last, at.count), from + kBlock);
  if (to <= from) return;
  const int64_t bytes = (to - from) * dim * int64_t(sizeof(T));
  fetch(at.keys + from * dim, bytes);
  fetch(at.values + from * dim, bytes);
}

// Dim: the head's size where known when compiled (the loops unrolled), else 0 and `dim`.
// scores[j - from] = query . key j, for keys [from, to).
template <int64_t Dim, typename T>
inline void score(const float* query, const Stretch<T>& at, int64_t from, int64_t to, int64_t dim, float* scores) {
  if constexpr (Dim > 0) dim = Dim;
  const int64_t whole = dim / kWidth * kWidth;
  for (int64_t j = from; j < to; j += kKeys) {
    const int keys = static_cast<int>(std::min<int64_t>(kKeys, to - j));
    const T* key[kKeys];
    Floats sums[kKeys];
    for (int k = 0; k < kKeys; ++k) {
      key[k] = at.key(std::min(j + k, to - 1), dim);  // a short last group repeats its last key
      sums[k] = zeros();
    }
    for (int64_t i = 0; i < whole; i += kWidth) {
      const Floats q = load(query + i);
      for (int k = 0; k < kKeys; ++k) sums[k] = mul_add(q, load(key[k] + i), sums[k]);
    }
    for (int k = 0; k < keys; ++k) {
      float sum = total(sums[k]);
      for (int64_t i = whole; i < dim; ++i) sum += query[i] * static_cast<float>(key[k][i]);
      scores[j - from + k] = sum;
    }
  }
}

// sums [dim] += weights[j - from] * value j, for values [from, to), one element at a time (a
// head size `add_value_rows` does not take).
template <int64_t Dim, typename T>
inline void add_values(float* sums, const float* weights, const Stretch<T>& at, int64_t from, int64_t to, int64_t dim) {
  if constexpr (Dim > 0) dim = Dim;
  for (int64_t j = from; j < to; ++j) {
    const float weight = weights[j - from];
    const T* value = at.value(j, dim);
    for (int64_t i = 0; i < dim; ++i) sums[i] += weight * static_cast<float>(value[i]);
  }
}

// A block's keys or values (`keys` picks) as float32 rows, one pointer a key: float32 read where
// it lies, bfloat16 converted once into `scratch` [kBlock, Dim] for every query of the group.
template <int64_t Dim, typename T>
inline void float_rows(const Stretch<T>& at, bool keys, int64_t from, int64_t to, float* scratch,
                       const float** rows) {
  for (int64_t j = from; j < to; ++j) {
    const T* row = keys ? at.key(j, Dim) : at.value(j, Dim);
    if constexpr (std::is_same_v<T, float>) {
      rows[j - from] = row;
    } else {
      float* into = scratch + (j - from) * Dim;
      for (int64_t i = 0; i < Dim; i += kWidth) store(into + i, load(row + i));
      rows[j - from] = into;
    }
  }
}

// scores[j] = query . keys[j] for j < n, kWidth keys at a time: each key's vectors summed
// lane-wise, then the kWidth sums together (`lane_sums`).
template <int64_t Dim>
inline void score_rows(const float* query, const float* const* keys, int64_t n, float* scores) {
  constexpr int64_t kVectors = Dim / kWidth;
  Floats q[kVectors];
  for (int64_t v = 0; v < kVectors; ++v) q[v] = load(query + v * kWidth);
  for (int64_t j = 0; j < n; j += kWidth) {
    Floats sums[kWidth];
    for (int64_t k = 0; k < kWidth; ++k) {
      const float* key = keys[std::min(j + k, n - 1)];  // a short last group repeats its last key
      Floats sum = zeros();
      for (int64_t v = 0; v < kVectors; ++v) sum = mul_add(q[v], load(key + v * kWidth), sum);
      sums[k] = sum;
    }
    const Floats totals = lane_sums(sums);
    if (j + kWidth <= n) {
      store(scores + j, totals);
    } else {
      float last[kWidth];
      store(last, totals);
      std::copy(last, last + (n - j), scores + j);
    }
  }
}

// sums [Dim] += weights[j] * values[j] for j < n, the sums in registers.
template <int64_t Dim>
inline void add_value_rows(float* sums, const float* weights, const float* const* values, int64_t n) {
  constexpr int64_t kVectors = Dim / kWidth;
  Floats acc[kVectors];
  for (int64_t v = 0; v < kVectors; ++v) acc[v] = load(sums + v * kWidth);
  for (int64_t j = 0; j < n; ++j) {
    const Floats w = broadcast(weights[j]);
    for (int64_t v = 0; v < kVectors; ++v) acc[v] = mul_add(w, load(values[j] + v * kWidth), acc[v]);
  }
  for (int64_t v = 0; v < kVectors; ++v) store(sums + v * kWidth, acc[v]);
}

// Each query's softmax over scores [group, n] (exp of each score less its largest), into its
// partial: its largest score and the weights' sum; its values' sum set to zero.
inline void weigh(float* scores, int64_t group, int64_t n, int64_t dim, Partial* partials) {
  for (int64_t g = 0; g < group; ++g) {
    float* weights = scores + g * n;
    const float top = n ? *std::max_element(weights, weights + n) : -std::numeric_limits<float>::infinity();
    float total = 0;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < n; ++j) {
      weights[j] = exp_nonpositive(weights[j] - top);
      total += weights[j];
    }
    partials[g].top = top;
    partials[g].total = total;
    std::fill(partials[g].sums, partials[g].sums + dim, 0.0f);
  }
}

// Whether a head of Dim dims is taken in whole vectors (`score_rows`, `add_value_rows`): its
// size known when compiled and a multiple of the vectors' width.
template <int64_t Dim>
constexpr bool kWholeVectors = Dim > 0 && Dim % kWidth == 0;

// A block's rows as float32 for the whole-vector path (`float_rows`); nothing elsewhere.
template <int64_t Dim>
struct BlockRows {
  alignas(64) float scratch[kWholeVectors<Dim> ? kBlock * Dim : 1];
  const float* rows[kBlock];
};

// Each query's scores over keys [from, to) of the stretch, at scores[g * n + j - first].
template <int64_t Dim, typename T>
inline void score_block(const float* queries, int64_t group, int64_t dim, const Stretch<T>& at, int64_t from,
                        int64_t to, float* scores, int64_t n, BlockRows<Dim>& block) {
  float* at_from = scores + (from - at.first);
  if constexpr (kWholeVectors<Dim>) {
    float_rows<Dim>(at, true, from, to, block.scratch, block.rows);
    for (int64_t g = 0; g < group; ++g) score_rows<Dim>(queries + g * Dim, block.rows, to - from, at_from + g * n);
  } else {
    for (int64_t g = 0; g < group; ++g) score<Dim>(queries + g * dim, at, from, to, dim, at_from + g * n);
  }
}

// Each query's values over keys [from, to), weighted by its weights there, into its partial.
template <int64_t Dim, typename T>
inline void add_block(const float* weights, int64_t group, int64_t dim, const Stretch<T>& at, int64_t from,
                      int64_t to, int64_t n, Partial* partials, BlockRows<Dim>& block) {
  const float* at_from = weights + (from - at.first);
  if constexpr (kWholeVectors<Dim>) {
    float_rows<Dim>(at, false, from, to, block.scratch, block.rows);
    for (int64_t g = 0; g < group; ++g) add_value_rows<Dim>(partials[g].sums, at_from + g * n, block.rows, to - from);
  } else {
    for (int64_t g = 0; g < group; ++g) add_values<Dim>(partials[g].sums, at_from + g * n, at, from, to, dim);
  }
}

// The group's queries [group, dim] (float32, scaled) over one stretch; `scores`: scratch for
// [group, last - first]. Where the head is whole vectors, each block's keys and values are read
// (and converted) once for every query of the group; otherwise key by key.
template <int64_t Dim, typename T>
void attend_stretch(const float* queries, int64_t group, int64_t dim, const Stretch<T>& at, float* scores,
                    Partial* partials) {
  if constexpr (Dim > 0) dim = Dim;
  const int64_t n = at.last - at.first;
  BlockRows<Dim> block;
  fetch_block(at, at.first, dim);
  for (int64_t from = at.first; from < at.last; from += kBlock) {
    const int64_t to = std::min(at.last, from + kBlock);
    fetch_block(at, to, dim);
    score_block<Dim>(queries, group, dim, at, from, to, scores, n, block);
  }
  weigh(scores, group, n, dim, partials);
  for (int64_t from = at.first; from < at.last; from += kBlock)
    add_block<Dim>(scores, group, dim, at, from, std::min(at.last, from + kBlock), n, partials, block);
}

// A row's query head from its stretches' partials: the softmax over all of them.
template <typename Q>
void merge(const Partial* partials, int64_t stretches, int64_t group, int64_t dim, Q* out) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < stretches; ++s) top = std::max(top, partials[s * group].top);
  float sums[kMostDim] = {}, total = 0;
  for (int64_t s = 0; s < stretches; ++s) {
    const Partial& part = partials[s * group];
    if (part.total == 0) continue;  // empty
    const float scale = std::exp(part.top - top);
    total += part.total * scale;
    for (int64_t i = 0; i < dim; ++i) sums[i] += part.sums[i] * scale;
  }
  for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<Q>(sums[i] / total);
}

// Where one row's cached keys and values are: key head h's keys from keys + h * keys_head, one
// key after another (dim apart), `capacity` of them at most; values alike.
template <typename T>
struct RowCache {
  const T *keys, *values;
  int64_t keys_head, values_head, capacity;
};

// One layer's attention for a step's rows: `plan` once the rows' caches are set, then every task
// (`run`) before any merge (`merge`), each range by whichever thread.
template <int64_t Dim, typename T>
struct Attention {
  // Queries [rows, kv_heads, group, dim], contiguous; the step's own keys and values with their
  // strides a row and a key head.
  const T *queries = nullptr, *own_keys = nullptr, *own_values = nullptr;
  int64_t key_row = 0, key_head = 0, value_row = 0, value_head = 0;
  float scaling = 1;
  int64_t rows = 0, kv_heads = 0, group = 0, dim = 0;
  std::vector<RowCache<T>> caches;  // each row's, set by the caller
  std::vector<int64_t> counts;  // each row's cached keys
  int64_t stretches = 1;
  std::vector<Partial> partials;  // [rows * kv_heads, stretches, group]
  std::vector<float> partial_sums;

  // Splits the rows' keys into stretches enough for `threads`, once the caches and counts are set.
  void plan(int64_t threads) {
    if constexpr (Dim > 0) dim = Dim;
    int64_t longest = 0;
    for (int64_t b = 0; b < rows; ++b) longest = std::max(longest, counts[b] + 1);
    const int64_t heads = rows * kv_heads;
    const int64_t wanted = (kTasksPerThread * threads + heads - 1) / heads;
    stretches = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, longest / kLeastStretch));
    partials.resize(heads * stretches * group);
    partial_sums.resize(partials.size() * dim);
    for (size_t i = 0; i < partials.size(); ++i) partials[i].sums = partial_sums.data() + i * dim;
  }

  int64_t tasks() const { return rows * kv_heads * stretches; }
  int64_t query_count() const { return rows * kv_heads * group; }

  void run(int64_t begin, int64_t end) {
    std::vector<float> query(group * dim), scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task / stretches, s = task % stretches, b = head / kv_heads, h = head % kv_heads;
      const RowCache<T>& cache = caches[b];
      const int64_t count = counts[b], each = (count + 1 + stretches - 1) / stretches;
      const Stretch<T> at{cache.keys + h * cache.keys_head, cache.values + h * cache.values_head,
                          own_keys + b * key_row + h * key_head, own_values + b * value_row + h * value_head, count,
                          std::min(count + 1, s * each), std::min(count + 1, (s + 1) * each)};
      const T* from = queries + head * group * dim;
      for (int64_t i = 0; i < group * dim; ++i) query[i] = static_cast<float>(from[i]) * scaling;
      scores.resize(group * (at.last - at.first));
      attend_stretch<Dim>(query.data(), group, dim, at, scores.data(), partials.data() + task * group);
    }
  }

  // Queries [begin, end) (of rows x kv_heads x group) into out [.., dim].
  void merge(int64_t begin, int64_t end, T* out) const {
    const int64_t step = stretches * group;
    for (int64_t query = begin; query < end; ++query)
      chatapp_attention::merge(partials.data() + query / group * step + query % group, stretches, group, dim,
                               out + query * dim);
  }
};

// decode_attention_rows' table: a row of kTableColumns int64 a query row (decode_attention.cpp).
constexpr int64_t kTableColumns = 6;
constexpr int64_t kCapacity = 4, kLayers = 5;

template <typename T>
struct TableRows {
  const int64_t* table;
  int64_t layer;
  RowCache<T> operator()(int64_t b) const {
    const int64_t* row = table + b * kTableColumns;
    const int64_t at = layer * row[2];
    return {reinterpret_cast<const T*>(static_cast<uintptr_t>(row[0])) + at,
            reinterpret_cast<const T*>(static_cast<uintptr_t>(row[1])) + at, row[3], row[3], row[kCapacity]};
  }
};

// What the operators check of the table: its shape, and that each of its `rows` rows holds the
// layers first_layer .. first_layer + layers.
inline void check_table(const char* name, const at::Tensor& table, int64_t rows, int64_t first_layer,
                        int64_t layers) {
  TORCH_CHECK(table.dim() == 2 && table.size(0) == rows && table.size(1) == kTableColumns &&
                  table.scalar_type() == at::kLong && table.is_contiguous(),
              name, ": a table of ", kTableColumns, " int64 a row, contiguous");
  const int64_t* entries = table.const_data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b)
    TORCH_CHECK(first_layer >= 0 && first_layer + layers <= entries[b * kTableColumns + kLayers], name,
                ": row ", b, " holds ", entries[b * kTableColumns + kLayers], " layers, not ", first_layer,
                "..", first_layer + layers - 1);
}

// Every row's position inside its cache, before anything is written there.
inline void check_positions(const char* name, const int64_t* entries, const int64_t* at, int64_t rows) {
  for (int64_t b = 0; b < rows; ++b)
    TORCH_CHECK(at[b] >= 0 && at[b] < entries[b * kTableColumns + kCapacity], name, ": row ", b, "'s position ",
                at[b], " is outside its cache (", entries[b * kTableColumns + kCapacity], " places)");
}

}  // namespace chatapp_attention
