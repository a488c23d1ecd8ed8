// logits [R, vocab] float32 or bfloat16, temperatures [R] float32, top_p [R] float64, points [R]
// float64 (each uniform in [0, 1), from the row's own generator) -> one token id per row [R].
//
// The same draw as sampler.py's torch operations (`draw`): softmax(row / temperature), the row's
// nucleus (its likeliest tokens, every one up to and including the one that brings their mass to
// top_p; the whole vocabulary where top_p is 1), and the token on whose share of the candidates'
// cumulative weights (float64 sums, in the candidates' order) the point falls, never a token
// without weight. A row's result depends on its own numbers only.
//
// Why our own: right after a step has streamed the weights through the caches, each of the draw's
// dozen torch operations over a vocabulary's row (a division, a softmax, a top-k, sums ...) cost
// 350-560 us on a 2-core Intel Xeon whose memory is slow, 40-110 us hot, each allocating its output
// and opening a parallel region: a sampled token's draw took 4.7 ms there, a third of a bf16 step
// (BENCHMARKS.md). Here a row is two passes over its logits and a sort of its few candidates.
//
// The nucleus without sorting the vocabulary: the tokens whose weight is at least a threshold are
// the likeliest ones, so where their mass reaches top_p they hold the nucleus; else the threshold
// is lowered (`kThresholds`, then every token with weight).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// Weights relative to the row's largest (exp(logit / t - max)): nearly every nucleus of a chat
// model at temperature 0.7 / top_p 0.9 lies above the first.
constexpr float kThresholds[] = {1.0f / 1024, 1.0f / (1 << 20), 0.0f};
// The cumulative weights of the whole vocabulary are found a block at a time: each block's sum in
// vector registers, then the one block where the point falls is summed token by token.
constexpr int64_t kBlock = 1024;

// exp(x) for x <= 0, in a form the compiler vectorises (no call, no branch): x = n ln2 + r,
// |r| <= ln2 / 2, exp(r) by Cephes' expf polynomial (relative error under 1e-7), times 2^n built
// in the exponent's bits. From about -87.7 on (x clamped at -88: 2^-127's bits are 0) a weight is
// 0, as float32's own exp underflows there; -inf too. (`-fno-trapping-math`, own_kernels.py: else
// the clamp's comparison keeps the loop scalar with AVX2.)
inline float exp_nonpositive(float x) {
  x = std::max(x, -88.0f);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

struct Candidate {
  float weight;
  int64_t id;
};

// The index of the first cumulative sum above `target` among `count` (the last with weight where
// rounding left none above it).
int64_t pick(const std::vector<double>& cumulative, int64_t count, double target) {
  const double total = cumulative[count - 1];
  const auto begin = cumulative.begin();
  const int64_t above = std::upper_bound(begin, begin + count, target) - begin;
  const int64_t last = std::lower_bound(begin, begin + count, total) - begin;
  return std::min(above, last);
}

// The row's largest logit over the temperature, refusing a NaN or an infinite one.
template <typename T>
float largest_scaled(const T* logits, int64_t vocab, float temperature) {
  float largest = -INFINITY;
  int any_nan = 0;
#pragma omp simd reduction(max : largest) reduction(| : any_nan)
  for (int64_t i = 0; i < vocab; ++i) {
    const float scaled = static_cast<float>(logits[i]) / temperature;
    any_nan |= scaled != scaled;
    largest = std::max(largest, scaled);
  }
  TORCH_CHECK_VALUE(!any_nan && std::isfinite(largest),
                    "a token's probability to draw from is not a finite number "
                    "(a NaN or infinite logit, or a NaN temperature)");
  return largest;
}

// Writes each token's weight exp(logit / temperature - largest) into `weights` and returns each
// block's sum (float32 within a block, the blocks' total in float64).
template <typename T>
void weigh(const T* __restrict logits, int64_t vocab, float temperature, float largest, float* __restrict weights,
           std::vector<double>& block_sums) {
  block_sums.resize((vocab + kBlock - 1) / kBlock);
  for (size_t block = 0; block < block_sums.size(); ++block) {
    float sum = 0;
    const int64_t end = std::min<int64_t>(vocab, (block + 1) * kBlock);
#pragma omp simd reduction(+ : sum)
    for (int64_t i = block * kBlock; i < end; ++i) {
      const float weight = exp_nonpositive(static_cast<float>(logits[i]) / temperature - largest);
      weights[i] = weight;
      sum += weight;
    }
    block_sums[block] = sum;
  }
}

// The whole vocabulary's draw: token by token from the first block whose end passes the point.
int64_t draw_whole(const float* weights, int64_t vocab, const std::vector<double>& block_sums, double total,
                   double point) {
  const double target = point * total;
  const int64_t blocks = static_cast<int64_t>(block_sums.size());
  double cumulative = 0;
  int64_t block = 0;
  while (block + 1 < blocks && cumulative + block_sums[block] <= target) cumulative += block_sums[block++];
  for (int64_t i = block * kBlock; i < vocab; ++i) {
    cumulative += weights[i];
    if (weights[i] > 0.0f && cumulative > target) return i;
  }
  // Rounding put the point past the last sum: the last token with weight.
  int64_t last = vocab - 1;
  while (last > 0 && weights[last] == 0.0f) --last;
  return last;
}

// The nucleus' draw: the candidates above a threshold, their likeliest first, sorted only as far
// as the nucleus reaches (a few dozen where the row is peaked, all of them where it is flat).
int64_t draw_nucleus(const float* weights, int64_t vocab, double total, double top_p, double point,
                     std::vector<Candidate>& candidates, std::vector<double>& cumulative) {
  const double wanted = top_p * total;
  for (float threshold : kThresholds) {
    candidates.clear();
    double mass = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (weights[i] >= threshold && weights[i] > 0.0f) {
        candidates.push_back({weights[i], i});
        mass += weights[i];
      }
    }
    if (mass >= wanted) break;
  }
  // Likeliest first; equal weights by their token id.
  const auto likelier = [](const Candidate& a, const Candidate& b) {
    return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
  };
  const int64_t size = static_cast<int64_t>(candidates.size());
  int64_t count = size;
  for (int64_t sorted = std::min<int64_t>(64, size);; sorted = std::min(4 * sorted, size)) {
    std::partial_sort(candidates.begin(), candidates.begin() + sorted, candidates.end(), likelier);
    cumulative.resize(sorted);
    double sum = 0;
    for (int64_t k = 0; k < sorted; ++k) cumulative[k] = sum += candidates[k].weight;
    const int64_t reached = std::lower_bound(cumulative.begin(), cumulative.end(), wanted) - cumulative.begin();
    if (reached < sorted || sorted == size) {
      count = std::min(reached + 1, sorted);
      break;
    }
  }
  return candidates[pick(cumulative, count, point * cumulative[count - 1])].id;
}

template <typename T>
int64_t draw_row(const T* logits, int64_t vocab, float temperature, double top_p, double point) {
  // A thread's scratch, kept from call to call: a vocabulary's weights are 192 KB, which a fresh
  // allocation would map and fault in at every draw.
  thread_local std::vector<float> weights;
  thread_local std::vector<double> block_sums, cumulative;
  thread_local std::vector<Candidate> candidates;
  weights.resize(vocab);
  weigh<T>(logits, vocab, temperature, largest_scaled<T>(logits, vocab, temperature), weights.data(), block_sums);
  double total = 0;
  for (double sum : block_sums) total += sum;
  if (top_p >= 1.0) return draw_whole(weights.data(), vocab, block_sums, total, point);
  return draw_nucleus(weights.data(), vocab, total, top_p, point, candidates, cumulative);
}

template <typename T>
void draw_rows(const at::Tensor& logits, const float* temperatures, const double* top_p, const double* points,
               int64_t* chosen) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const T* data = logits.const_data_ptr<T>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      chosen[r] = draw_row<T>(data + r * vocab, vocab, temperatures[r], top_p[r], points[r]);
  });
}

at::Tensor draw_tokens(const at::Tensor& logits_in, const at::Tensor& temperatures_in, const at::Tensor& top_p_in,
                       const at::Tensor& points_in) {
  TORCH_CHECK(logits_in.dim() == 2 && logits_in.size(1) > 0 &&
                  (logits_in.scalar_type() == at::kFloat || logits_in.scalar_type() == at::kBFloat16),
              "draw_tokens: logits [R, vocab], float32 or bfloat16");
  const int64_t rows = logits_in.size(0);
  const auto per_row = [rows](const at::Tensor& t, at::ScalarType dtype) {
    return t.dim() == 1 && t.size(0) == rows && t.scalar_type() == dtype;
  };
  TORCH_CHECK(per_row(temperatures_in, at::kFloat) && per_row(top_p_in, at::kDouble) && per_row(points_in, at::kDouble),
              "draw_tokens: temperatures [R] float32, top_p and points [R] float64");
  const at::Tensor logits = logits_in.contiguous(), temperatures = temperatures_in.contiguous(),
                   top_p = top_p_in.contiguous(), points = points_in.contiguous();
  at::Tensor chosen = at::detail::empty_cpu({rows}, at::kLong);
  const float* t = temperatures.const_data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    TORCH_CHECK_VALUE(t[r] > 0 || t[r] != t[r], "draw_tokens: a temperature must be above 0 (0 is greedy)");
  if (logits.scalar_type() == at::kFloat)
    draw_rows<float>(logits, t, top_p.const_data_ptr<double>(), points.const_data_ptr<double>(),
                     chosen.mutable_data_ptr<int64_t>());
  else
    draw_rows<c10::BFloat16>(logits, t, top_p.const_data_ptr<double>(), points.const_data_ptr<double>(),
                             chosen.mutable_data_ptr<int64_t>());
  return chosen;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(chatapp, m) {
  m.def("draw_tokens(Tensor logits, Tensor temperatures, Tensor top_p, Tensor points) -> Tensor");
}

TORCH_LIBRARY_IMPL(chatapp, CPU, m) {
  m.impl("draw_tokens", draw_tokens);
}
