// A whole decode step of a plain Llama model, every layer, in one OpenMP parallel region.
//
// The compiled step (decode_graph.py) calls our products and attention from inductor's code,
// one call after another: each call forks and joins the threads, allocates its output, and
// between them come inductor's own kernels for the norms, rotary and activations, each a
// parallel region of its own, and the C++ wrapper's bookkeeping. At one stream on a 2-core AMD
// EPYC, 2.2 ms of a 12.1 ms F32 step were not the products, and no weight was read meanwhile
// (BENCHMARKS.md). Here the threads enter once a step: each product is `dot_rows`' tiles
// (dot_tiles.h) handed out in chunks, a thread done with its own share taking from the others'
// (step_threads.h), attention is shared as `decode_attention_rows` shares it (attention_tasks.h),
// and between them the threads wait for each other at a barrier, fetching their next weights
// while they wait (step_threads.h); the small operations are computed by every thread for itself
// where that saves a barrier (a norm of a few rows costs less than one), or by its share. Buffers
// are the model's own, kept from step to step.
//
// The arithmetic is the compiled step's: products summed in float32 and rounded to the model's
// dtype, the norm and rotary and activation computed in float32 from the dtype's values and
// rounded once, residuals added in float32 and rounded. Each row's greedy token is the first of
// equal maxima of its rounded logits, as the sampler's `greedy`.
//
// A step whose rows all want only their greedy token may screen the output matrix: the output
// product is read in a narrower copy (either model's in int8 levels with a scale a row: 28 of
// the default model's 538 MB a token at one stream in float32, 269 in bfloat16, where a step
// only reads; a float32 model's in float16, 57 MB, where AVX2 is all there is), each logit's
// distance from the whole product's is bounded, and only the columns that could still be the
// largest are computed, by the same tile arithmetic as the whole product's (`Screen`). The
// greedy token is the one the whole product gives, bit for bit; a row for which the bound leaves
// too many columns, or whose screened logits are not all finite, has its whole product computed
// after all.
#include <torch/custom_class.h>
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <array>
#include <chrono>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attention_tasks.h"
#include "dot_tiles.h"
#include "step_threads.h"

namespace {

using chatapp_attention::Attention;
using chatapp_attention::kTableColumns;

struct Layer {
  at::Tensor attention_norm, qkv, output, mlp_norm, gate_up, down;
};

#if defined(__AVX512F__)
// 16 elements of T as float32 and back, rounded as static_cast<T> rounds (to nearest, ties to
// even): the norms and activations a vector at a time. The compiler vectorised the float32 loops
// on its own, not bfloat16's conversions (0.4 ms of a 10 ms one-stream step went to the
// activations' alone).
constexpr int64_t kLanes = 16;
template <typename T>
struct Lanes;

template <>
struct Lanes<float> {
  static __m512 load(const float* at) { return _mm512_loadu_ps(at); }
  static void store(float* at, __m512 v) { _mm512_storeu_ps(at, v); }
  static __m512 round(__m512 v) { return v; }
};

#if defined(__AVX512BF16__)
template <>
struct Lanes<c10::BFloat16> {
  static __m512 load(const c10::BFloat16* at) {
    const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
  }
  static void store(c10::BFloat16* at, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  }
  static __m512 round(__m512 v) {
    const __m256i halves = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
  }
};
#endif

// chatapp_attention::exp_nonpositive, 16 at a time.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147181f));
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}
#endif

// Each row's largest logit among some columns, and its column.
struct Best {
  float value;
  int64_t column;
  // The first of the largest of the two, from columns in whichever order: NaN counts as the
  // largest, as in argmax.
  Best larger(const Best& other) const {
    const bool nan = std::isnan(value), other_nan = std::isnan(other.value);
    if (nan != other_nan) return nan ? *this : other;
    if (!nan && value != other.value) return value > other.value ? *this : other;
    return column <= other.column ? *this : other;
  }
};

// The output matrix's screen (see the top): a copy of it in a narrower type and a bound on each
// column's distance from the whole product's logit. A column whose screened logit plus its bound
// falls below the largest screened logit minus its own bound cannot be the largest: the
// candidates are the others.
//
// A float16 screen (a float32 model's) keeps each of the matrix's rows' Euclidean norm, rounded
// up. float16 rounds a value v to within u |v| + a: u its unit roundoff, 2^-11, a what rounding
// near zero may lose (its subnormals are 2^-24 apart: 2^-25). The float32 rows are multiplied as
// they are (F16C widens the weights). For a row x and an output row w of n elements, the float32
// product's logit and the screen's (the rounded weights multiplied and summed by float32's fused
// multiply-adds, each rounding once) differ by at most
//   u sum |x_i w_i| + a |x|_1                 the weights' rounding,
//   + n 2^-24 (2 + u) sum |x_i w_i|           either sum's, float32,
// the near-zero term grown by (1 + n 2^-24) for the screen's sum of it; and sum |x_i w_i| <=
// |x|_2 |w|_2 (Cauchy-Schwarz), |v|_1 <= sqrt(n) |v|_2. So a column's bound is its norm times
// the row's `scale`, plus the row's `offset` (`Margin`), each term doubled: the float32
// arithmetic that computes the bound and compares against it rounds by far less.
//
// An 8-bit screen (either model's dtype) keeps each output row w as int8 levels q and a float32
// scale s, w ~ s q; its product multiplies the rows x as float32 (a bfloat16 model's widened,
// exactly) by q widened, sums in float32 and multiplies the sum by s. Its logit and the whole
// product's (the model's own: float32 products, or bfloat16's, whose float32 sums may flush
// subnormals) differ by at most
//   |x|_2 |w - s q|_2                                       the levels' rounding,
//   + n 2^-24 |x|_2 |w|_2 + n 2^-126                        the whole product's sum,
//   + (n + 1) 2^-24 s |x|_2 |q|_2 + n 2^-149                the screen's sum and scaling,
// so a column's bound is |x|_2 times its `coefficient`, |w - s q|_2 + (n + 1) 2^-24 (|w|_2 +
// s |q|_2), computed once from the matrix in float64 and rounded up, plus n 2^-125: doubled, as
// float16's. A bfloat16 model's greedy token is the first of the largest of its logits rounded to
// bfloat16, where columns a little below the largest float32 logit may tie with it: those whose
// float32 logits reach within 2^-6 of the floor's size below it (`rounded_slack`) are candidates too.
struct Screen {
  // [vocab, hidden] float16 or int8; [vocab] float32: each column's norm, or an 8-bit screen's
  // coefficient; [vocab] float32 an 8-bit screen's scales (else undefined)
  at::Tensor matrix, norms, scales;
  double unit = 0, tiny = 0;  // float16's u and a (above)
  // More candidates than this in a row and its whole product is computed: their products would
  // cost a fair share of the whole's (the default model's greedy bfloat16 rows have had 11 at the
  // median, 243 at most, through an 8-bit screen).
  static constexpr int64_t kMostCandidates = 1024;

  // A row's bound on each column's distance: scale * the column's norm + offset.
  struct Margin {
    float scale, offset;
    float bound(float norm) const { return scale * norm + offset; }
  };

  // The margin of a row of Euclidean norm `x_norm` (rounded up) and `width` elements; its scale
  // not finite where the row's is not.
  Margin margin(double x_norm, int64_t width) const {
    const double n = static_cast<double>(width);
    if (scales.defined()) return {static_cast<float>(2 * x_norm), static_cast<float>(2 * n * 0x1p-125 + 1e-30)};
    const double u = unit, a = tiny;
    const double sums = n * 0x1p-24, root = std::sqrt(n) * (1 + sums);
    // 1e-30 more: a float32 sum flushed to zero, should the CPU flush them.
    return {static_cast<float>(2 * (u + sums * (2 + u)) * x_norm), static_cast<float>(2 * a * root * x_norm + 1e-30)};
  }
};

// Where the first thread's time in the parallel region goes, kept while `timing` is on (the step
// benchmark's split of a step into products and the rest): a product's phase lasts from its
// first tile to the barrier after it (the wait for the other threads included, as a product's
// wall time is), attention's from the rotary to the merge's barrier; then the norms, the
// activations, and the greedy tokens' (the barrier before their last comparison: each chunk's
// largest logit is found as the output product computes it, in the products' time).
enum Phase { kProducts, kAttention, kNorms, kActivations, kGreedy, kPhases };

class PhaseClock {
 public:
  explicit PhaseClock(bool on) : on_(on) {}
  // From now on the time counts to `phase`.
  void enter(Phase phase) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (started_) seconds_[current_] += std::chrono::duration<double>(now - last_).count();
    started_ = true, last_ = now, current_ = phase;
  }
  void stop(std::array<double, kPhases>& into) {
    enter(kGreedy);
    for (int phase = 0; phase < kPhases; ++phase) into[phase] += seconds_[phase];
  }

 private:
  bool on_, started_ = false;
  Phase current_ = kNorms;
  std::chrono::steady_clock::time_point last_;
  std::array<double, kPhases> seconds_{};
};

class DecodeModel : public torch::CustomClassHolder {
 public:
  // tensors: the embedding [vocab, hidden], the final norm [hidden], the output matrix
  // [vocab, hidden], the rotary tables cos and sin [positions, 1, dim] (sin signed as
  // fused_llama.py's `_angles`), then each layer's attention norm, query-key-value matrix
  // [(heads + 2 kv_heads) dim, hidden], output matrix [hidden, heads dim], MLP norm, gate-up
  // matrix [2 intermediate, hidden] and down matrix [hidden, intermediate]; one dtype, contiguous.
  DecodeModel(std::vector<at::Tensor> tensors, int64_t heads, int64_t kv_heads, double eps, double scaling)
      : heads_(heads), kv_heads_(kv_heads), eps_(static_cast<float>(eps)), scaling_(static_cast<float>(scaling)) {
    TORCH_CHECK(tensors.size() >= 5 && (tensors.size() - 5) % 6 == 0, "DecodeModel: 5 tensors, then 6 a layer");
    TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "DecodeModel: heads a multiple of kv_heads");
    dtype_ = tensors[0].scalar_type();
    TORCH_CHECK(dtype_ == at::kFloat || (chatapp_dot::kBFloat16 && dtype_ == at::kBFloat16),
                "DecodeModel: float32", chatapp_dot::kBFloat16 ? " or bfloat16" : "", " tensors");
    // The embedding only has its rows read: an untied one may be a transposed view (fused_llama.py).
    for (const at::Tensor& tensor : tensors)
      TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == dtype_ && tensor.dim() >= 1 &&
                      (tensor.is_contiguous() || &tensor == &tensors[0]),
                  "DecodeModel: every tensor on the CPU, of one dtype, contiguous (but the embedding)");
    TORCH_CHECK(tensors[0].dim() == 2, "DecodeModel: the embedding [vocab, hidden]");
    embedding_ = tensors[0], norm_ = tensors[1], head_ = tensors[2], cos_ = tensors[3], sin_ = tensors[4];
    vocab_ = embedding_.size(0), hidden_ = embedding_.size(1);
    dim_ = cos_.size(-1);
    TORCH_CHECK(dim_ <= chatapp_attention::kMostDim && dim_ % 2 == 0, "DecodeModel: an even head of at most ",
                chatapp_attention::kMostDim, " dims");
    TORCH_CHECK(sin_.sizes() == cos_.sizes() && head_.size(0) == vocab_ && head_.size(1) == hidden_ &&
                    norm_.numel() == hidden_,
                "DecodeModel: the embedding, output matrix, norm and rotary tables disagree");
    for (size_t at = 5; at < tensors.size(); at += 6)
      layers_.push_back({tensors[at], tensors[at + 1], tensors[at + 2], tensors[at + 3], tensors[at + 4],
                         tensors[at + 5]});
    intermediate_ = layers_.empty() ? 0 : layers_[0].down.size(1);
    for (const Layer& layer : layers_)
      TORCH_CHECK(layer.attention_norm.numel() == hidden_ && layer.mlp_norm.numel() == hidden_ &&
                      layer.qkv.size(0) == (heads + 2 * kv_heads) * dim_ && layer.qkv.size(1) == hidden_ &&
                      layer.output.size(0) == hidden_ && layer.output.size(1) == heads * dim_ &&
                      layer.gate_up.size(0) == 2 * intermediate_ && layer.gate_up.size(1) == hidden_ &&
                      layer.down.size(0) == hidden_ && layer.down.size(1) == intermediate_,
                  "DecodeModel: a layer's matrices do not fit the model's sizes");
  }

  // A float32 model's output matrix in float16 and its rows' norms (Screen), for steps whose rows
  // want only their greedy tokens.
  void screen_with(const at::Tensor& matrix, const at::Tensor& norms) {
    TORCH_CHECK(dtype_ == at::kFloat, "DecodeModel.screen_with: a float32 model's");
    TORCH_CHECK(matrix.scalar_type() == at::kHalf, "DecodeModel.screen_with: a float16 matrix");
    TORCH_CHECK(matrix.device().is_cpu() && matrix.is_contiguous() && matrix.sizes() == head_.sizes() &&
                    at::isfinite(matrix).all().item<bool>(),
                "DecodeModel.screen_with: the output matrix's shape, finite, contiguous");
    TORCH_CHECK(norms.device().is_cpu() && norms.scalar_type() == at::kFloat && norms.is_contiguous() &&
                    norms.dim() == 1 && norms.size(0) == vocab_ && at::isfinite(norms).all().item<bool>(),
                "DecodeModel.screen_with: a finite float32 norm for each output row");
    screen_ = {matrix, norms, {}, 0x1p-11, 0x1p-25};
  }

  // Either model's output matrix as int8 levels [vocab, hidden] and a scale for each row (an
  // 8-bit screen: Screen): each column's coefficient is computed here, from the model's own
  // matrix. Any scales and levels make a screen that finds the whole product's greedy tokens;
  // levels near the matrix keep its candidates few.
  void screen_levels(const at::Tensor& levels, const at::Tensor& scales) {
    TORCH_CHECK(levels.device().is_cpu() && levels.scalar_type() == at::kChar && levels.is_contiguous() &&
                    levels.sizes() == head_.sizes(),
                "DecodeModel.screen_levels: int8 levels of the output matrix's shape, contiguous");
    TORCH_CHECK(scales.device().is_cpu() && scales.scalar_type() == at::kFloat && scales.is_contiguous() &&
                    scales.dim() == 1 && scales.size(0) == vocab_ && at::isfinite(scales).all().item<bool>(),
                "DecodeModel.screen_levels: a finite float32 scale for each output row");
    // A row at a time in float64 (the whole matrix in float64 would be 8 bytes a weight).
    at::Tensor coefficients = at::empty({vocab_}, at::kFloat);
    const int8_t* q = levels.const_data_ptr<int8_t>();
    const float* s = scales.const_data_ptr<float>();
    float* coefficient = coefficients.mutable_data_ptr<float>();
    const double sums = (static_cast<double>(hidden_) + 1) * 0x1p-24;
    const auto rows = [&](const auto* head) {
      at::parallel_for(0, vocab_, 256, [&](int64_t first, int64_t end) {
        for (int64_t c = first; c < end; ++c) {
          double rounding = 0, weights = 0, levels_squared = 0;
          for (int64_t i = 0; i < hidden_; ++i) {
            const double w = static_cast<double>(head[c * hidden_ + i]), level = q[c * hidden_ + i];
            rounding += (w - s[c] * level) * (w - s[c] * level);
            weights += w * w, levels_squared += level * level;
          }
          const double magnitudes = std::sqrt(weights) + std::fabs(s[c]) * std::sqrt(levels_squared);
          coefficient[c] = static_cast<float>((std::sqrt(rounding) + sums * magnitudes) * (1 + 1e-6));
        }
      });
    };
    if (dtype_ == at::kFloat)
      rows(head_.const_data_ptr<float>());
    else
      rows(head_.const_data_ptr<c10::BFloat16>());
    TORCH_CHECK(at::isfinite(coefficients).all().item<bool>(),
                "DecodeModel.screen_levels: a finite output matrix");
    screen_ = {levels, coefficients, scales, 0, 0};
  }

  // token_ids, positions [B] int64 (a row's position: the keys it has cached); table [B, 6]:
  // where each row's keys and values lie (decode_attention_rows' table). Writes each layer's
  // new key and value at the row's position; returns the logits [B, vocab] and each row's
  // greedy token [B]. With `greedy_only`, a model with a screen finds the greedy tokens without
  // the logits: the logits returned are then empty [B, 0]. One step at a time: the buffers are
  // the model's.
  std::tuple<at::Tensor, at::Tensor> step(const at::Tensor& token_ids_in, const at::Tensor& positions_in,
                                          const at::Tensor& table, bool greedy_only) {
    TORCH_CHECK(token_ids_in.dim() == 1 && token_ids_in.scalar_type() == at::kLong && positions_in.dim() == 1 &&
                    positions_in.scalar_type() == at::kLong && positions_in.size(0) == token_ids_in.size(0) &&
                    token_ids_in.size(0) > 0,
                "DecodeModel.step: token ids and positions, int64 [B] each");
    const at::Tensor token_ids = token_ids_in.contiguous(), positions = positions_in.contiguous();
    const int64_t rows = token_ids.size(0);
    chatapp_attention::check_table("DecodeModel.step", table, rows, 0, static_cast<int64_t>(layers_.size()));
    const int64_t* ids = token_ids.const_data_ptr<int64_t>();
    const int64_t* at = positions.const_data_ptr<int64_t>();
    chatapp_attention::check_positions("DecodeModel.step", table.const_data_ptr<int64_t>(), at, rows);
    for (int64_t b = 0; b < rows; ++b) {
      TORCH_CHECK(ids[b] >= 0 && ids[b] < vocab_, "DecodeModel.step: token id ", ids[b], " outside the vocabulary");
      TORCH_CHECK(at[b] < cos_.size(0), "DecodeModel.step: position ", at[b], " beyond the rotary tables");
    }
    at::Tensor logits = at::detail::empty_cpu({rows, vocab_}, dtype_);
    at::Tensor greedy = at::detail::empty_cpu({rows}, at::kLong);
    const bool screening = greedy_only && screen_.matrix.defined();
    if (dtype_ == at::kFloat)
      dispatch<float>(ids, at, table.const_data_ptr<int64_t>(), rows, screening, logits, greedy);
#if defined(__AVX512BF16__)
    else dispatch<c10::BFloat16>(ids, at, table.const_data_ptr<int64_t>(), rows, screening, logits, greedy);
#endif
    if (screening) return {at::detail::empty_cpu({rows, 0}, dtype_), greedy};
    return {logits, greedy};
  }

  // Whether steps keep their phases' times (PhaseClock); turning it on starts the sums at zero.
  void set_timing(bool on) {
    timing_ = on;
    phase_seconds_.fill(0);
  }

  // Seconds in products, attention, norms, activations and greedy tokens (PhaseClock), summed
  // over the steps since timing was turned on (the first thread's).
  std::vector<double> phase_seconds() const { return {phase_seconds_.begin(), phase_seconds_.end()}; }

 private:
  template <typename T>
  void dispatch(const int64_t* ids, const int64_t* at, const int64_t* table, int64_t rows, bool screening,
                at::Tensor& logits, at::Tensor& greedy) {
    switch (dim_) {
      case 64: return run<T, 64>(ids, at, table, rows, screening, logits, greedy);
      case 128: return run<T, 128>(ids, at, table, rows, screening, logits, greedy);
      default: return run<T, 0>(ids, at, table, rows, screening, logits, greedy);
    }
  }

  // The step's buffers, in floats' room (a bfloat16 buffer uses half of its own).
  struct Buffers {
    std::vector<float> hidden, qkv, queries, keys, attended, out, gate_up;
    std::vector<std::vector<float>> own;  // a thread's norm output or activations
    std::vector<Best> best;  // [threads, rows]
    // The screen's: the screened logits, each thread's rows widened to float32 for an 8-bit
    // screen's product (a bfloat16 model's), each row's candidates.
    std::vector<float> screened;
    std::vector<std::vector<float>> own_screen;
    std::vector<std::vector<int64_t>> candidates;
  };

  template <typename T>
  static T* room(std::vector<float>& buffer, int64_t elements) {
    buffer.resize(elements);  // a float holds a T at least
    return reinterpret_cast<T*>(buffer.data());
  }

  template <typename T, int64_t Dim>
  // `screening`: the rows' greedy tokens through the screen (Screen), the logits left unwritten.
  void run(const int64_t* ids, const int64_t* at, const int64_t* table, int64_t rows, bool screening,
           at::Tensor& logits_out, at::Tensor& greedy_out) {
    const int64_t hidden = hidden_, dim = dim_, heads = heads_, kv_heads = kv_heads_, group = heads / kv_heads;
    const int64_t width = (heads + 2 * kv_heads) * dim, inner = intermediate_;
    T* h = room<T>(buffers_.hidden, rows * hidden);
    T* qkv = room<T>(buffers_.qkv, rows * width);
    T* queries = room<T>(buffers_.queries, rows * heads * dim);
    T* keys = room<T>(buffers_.keys, rows * kv_heads * dim);
    T* attended = room<T>(buffers_.attended, rows * heads * dim);
    T* out = room<T>(buffers_.out, rows * hidden);
    T* gate_up = room<T>(buffers_.gate_up, rows * 2 * inner);
    T* logits = logits_out.mutable_data_ptr<T>();
    const T* embedding = embedding_.const_data_ptr<T>();
    const int64_t token_stride = embedding_.stride(0), element_stride = embedding_.stride(1);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t i = 0; i < hidden; ++i) h[b * hidden + i] = embedding[ids[b] * token_stride + i * element_stride];

    Attention<Dim, T> attention;
    attention.rows = rows, attention.kv_heads = kv_heads, attention.group = group, attention.dim = dim;
    attention.queries = queries, attention.own_keys = keys, attention.key_row = kv_heads * dim,
    attention.key_head = dim;
    attention.own_values = qkv + (heads + kv_heads) * dim, attention.value_row = width, attention.value_head = dim;
    attention.scaling = scaling_;
    attention.caches.resize(rows);
    attention.counts.resize(rows);
    for (int64_t b = 0; b < rows; ++b)
      attention.counts[b] = std::clamp<int64_t>(at[b], 0, table[b * kTableColumns + chatapp_attention::kCapacity]);

    const int threads = std::max(1, at::get_num_threads());
    attention.plan(threads);
    buffers_.own.resize(threads);
    for (auto& own : buffers_.own) room<T>(own, rows * std::max(hidden, inner));
    buffers_.best.resize(threads * rows);
    const int64_t tile = rows <= chatapp_dot::kFewRows ? chatapp_dot::kFew.outputs : chatapp_dot::kMany.outputs;
    product_tiles_.clear();
    for (size_t index = 0; index < layers_.size(); ++index)
      for (const int64_t outputs : {width, hidden, 2 * inner, hidden}) product_tiles_.push_back(outputs / tile);
    product_tiles_.push_back(vocab_ / tile);
    product_tiles_.push_back(vocab_ / tile);  // the screen's
    shares_.reset(product_tiles_, threads);
    const size_t head_product = 4 * layers_.size(), screen_product = head_product + 1;
    if (screening) {
      if constexpr (!std::is_same_v<T, float>) {  // multiply_screen widens a bfloat16 model's rows
        buffers_.own_screen.resize(threads);
        for (auto& own : buffers_.own_screen) room<float>(own, rows * hidden);
      }
      room<float>(buffers_.screened, rows * vocab_);
      buffers_.candidates.resize(rows);
    }
    const T* cos = cos_.const_data_ptr<T>();
    const T* sin = sin_.const_data_ptr<T>();

#pragma omp parallel num_threads(threads)
    {
      const int thread = omp_get_thread_num(), count = omp_get_num_threads();
      PhaseClock clock(timing_ && thread == 0);
      T* x = reinterpret_cast<T*>(buffers_.own[thread].data());
      chatapp_step::Fetch fetch;
      // Waits for the other threads, fetching the thread's share of product `next` meanwhile.
      const auto meet = [&](size_t next, const at::Tensor& weight) {
        const auto [first, end] = shares_.own(next, thread);
        const int64_t tile_bytes = tile * weight.size(1) * int64_t(weight.element_size());
        fetch.aim(static_cast<const char*>(weight.const_data_ptr()) + first * tile_bytes, (end - first) * tile_bytes);
        barrier_.wait(count, &fetch);
      };
      // h += the product's outputs [first, end), added by the thread that computed them.
      const auto add_to_h = [&](int64_t first, int64_t end) {
        for (int64_t b = 0; b < rows; ++b)
          for (int64_t i = first; i < end; ++i)
            h[b * hidden + i] =
                static_cast<T>(static_cast<float>(h[b * hidden + i]) + static_cast<float>(out[b * hidden + i]));
      };
      const auto nothing = [](int64_t, int64_t) {};
      for (size_t index = 0; index < layers_.size(); ++index) {
        const Layer& layer = layers_[index];
        const size_t product = 4 * index;  // its query-key-value, output, gate-up and down products
        const bool final_layer = index + 1 == layers_.size();
        const at::Tensor& next_qkv = !final_layer ? layers_[index + 1].qkv : screening ? screen_.matrix : head_;
        const size_t next_product = !final_layer ? product + 4 : screening ? screen_product : head_product;
        clock.enter(kNorms);
        normalize(h, layer.attention_norm.const_data_ptr<T>(), rows, x);
        clock.enter(kProducts);
        multiply(product, x, rows, hidden, layer.qkv, qkv, thread, count, nothing);
        meet(product + 1, layer.output);
        clock.enter(kAttention);
        // Rotary for a share of the rows' query and key heads; a key head's key and value also
        // go into the row's cache.
        const int64_t vectors = rows * (heads + kv_heads);
        const auto [first, last] = range(vectors, thread, count);
        for (int64_t vector = first; vector < last; ++vector) {
          const int64_t b = vector / (heads + kv_heads), head = vector % (heads + kv_heads);
          const T* from = qkv + b * width + head * dim;
          T* to = head < heads ? queries + (b * heads + head) * dim : keys + (b * kv_heads + head - heads) * dim;
          rotate(from, cos + at[b] * dim, sin + at[b] * dim, dim, to);
          if (head >= heads) store(table, index, b, head - heads, at[b], to, from + kv_heads * dim);
        }
        if (thread == 0) {
          const chatapp_attention::TableRows<T> cached{table, static_cast<int64_t>(index)};
          for (int64_t b = 0; b < rows; ++b) attention.caches[b] = cached(b);
        }
        meet(product + 1, layer.output);
        {
          const auto [begin, end] = range(attention.tasks(), thread, count);
          attention.run(begin, end);
        }
        meet(product + 1, layer.output);
        {
          const auto [begin, end] = range(attention.query_count(), thread, count);
          attention.merge(begin, end, attended);
        }
        meet(product + 1, layer.output);
        clock.enter(kProducts);
        multiply(product + 1, attended, rows, heads * dim, layer.output, out, thread, count, add_to_h);
        meet(product + 2, layer.gate_up);
        clock.enter(kNorms);
        normalize(h, layer.mlp_norm.const_data_ptr<T>(), rows, x);
        clock.enter(kProducts);
        multiply(product + 2, x, rows, hidden, layer.gate_up, gate_up, thread, count, nothing);
        meet(product + 3, layer.down);
        clock.enter(kActivations);
        activate(gate_up, rows, inner, x);
        clock.enter(kProducts);
        multiply(product + 3, x, rows, inner, layer.down, out, thread, count, add_to_h);
        meet(next_product, next_qkv);
      }
      clock.enter(kNorms);
      normalize(h, norm_.const_data_ptr<T>(), rows, x);
      if (screening) {
        clock.enter(kProducts);
        multiply_screen(screen_product, x, rows, thread, count);
        clock.enter(kGreedy);
        greedy_through_screen(x, rows, thread, count, logits, greedy_out.mutable_data_ptr<int64_t>());
      }
      if (!screening) {
        clock.enter(kProducts);
        Best* best = buffers_.best.data() + thread * rows;
        std::fill(best, best + rows, Best{-INFINITY, vocab_});
        multiply(head_product, x, rows, hidden, head_, logits, thread, count, [&](int64_t first, int64_t end) {
          for (int64_t b = 0; b < rows; ++b) best[b] = best[b].larger(largest(logits + b * vocab_, first, end));
        });
        clock.enter(kGreedy);
#pragma omp barrier
#pragma omp single
        {
          int64_t* greedy = greedy_out.mutable_data_ptr<int64_t>();
          for (int64_t b = 0; b < rows; ++b) {
            Best best = buffers_.best[b];
            for (int other = 1; other < count; ++other) best = best.larger(buffers_.best[other * rows + b]);
            greedy[b] = best.column;
          }
        }
      }
      if (thread == 0) clock.stop(phase_seconds_);
    }
  }

  // The thread's share of the screen's product of the final norm's rows x (Screen) into the
  // screened logits, as the screen's type takes them.
  template <typename T>
  void multiply_screen(size_t product, const T* x, int64_t rows, int thread, int count) {
    float* screened = buffers_.screened.data();
    const auto nothing = [](int64_t, int64_t) {};
    const at::ScalarType type = screen_.matrix.scalar_type();
    if (type == at::kChar) {
      const float* wide = reinterpret_cast<const float*>(x);
      if constexpr (!std::is_same_v<T, float>) {
        float* own = buffers_.own_screen[thread].data();
        for (int64_t i = 0; i < rows * hidden_; ++i) own[i] = static_cast<float>(x[i]);
        wide = own;
      }
      multiply<float, int8_t>(product, wide, rows, hidden_, screen_.matrix, screened, thread, count, nothing);
    } else if constexpr (std::is_same_v<T, float>) {  // float16 (screen_with): a float32 model's alone
      multiply<float, c10::Half>(product, x, rows, hidden_, screen_.matrix, screened, thread, count, nothing);
    }
  }

  // Each row's greedy token from the screened logits (Screen), the thread's share of the rows:
  // the candidates, then their logits by the whole product's tile arithmetic, written where the
  // whole product would write them, and the first of their largest; a row the screen cannot
  // decide gets its whole product, from this thread alone. Called by every thread of the step's
  // region.
  template <typename T>
  void greedy_through_screen(const T* x, int64_t rows, int thread, int count, T* logits, int64_t* greedy) {
    float* screened = buffers_.screened.data();
#pragma omp barrier
    const T* head = head_.const_data_ptr<T>();
    const auto [first, end] = range(rows, thread, count);
    for (int64_t b = first; b < end; ++b) {
      const T* row = x + b * hidden_;
      T* row_logits = logits + b * vocab_;
      std::vector<int64_t>& candidates = buffers_.candidates[b];
      if (!find_candidates(row, screened + b * vocab_, candidates)) {
        constexpr int64_t kWidth = chatapp_dot::kFew.outputs;
        const int64_t whole = vocab_ / kWidth;
        chatapp_dot::tiles<T, chatapp_dot::kFew.rows, kWidth>(row, 1, hidden_, head, row_logits, vocab_, 0, whole);
        chatapp_dot::last_columns<T>(row, 1, hidden_, head, row_logits, vocab_, whole * kWidth);
        greedy[b] = largest(row_logits, 0, vocab_).column;
        continue;
      }
      Best best{-INFINITY, vocab_};
      for (const int64_t column : candidates) {
        chatapp_dot::columns<T, 1, 1>(row, 0, 1, hidden_, head, row_logits, vocab_, column, column + 1);
        best = best.larger({static_cast<float>(row_logits[column]), column});
      }
      greedy[b] = best.column;
    }
  }

  // The columns of one row that may hold its largest logit, in order; false where there are
  // more than Screen::kMostCandidates or a value is not finite. An 8-bit screen's logits are
  // scaled here, in place.
  template <typename T>
  bool find_candidates(const T* x, float* screened, std::vector<int64_t>& candidates) const {
    // The share of the floor's size below it from which a logit rounded to T may tie (Screen).
    constexpr float rounded_slack = std::is_same_v<T, float> ? 0.0f : 0x1p-6f;
    double squares = 0;
    for (int64_t i = 0; i < hidden_; ++i) squares += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    // Rounded up, so that the bound stays one.
    const Screen::Margin margin = screen_.margin(std::sqrt(squares) * (1 + 1e-6), hidden_);
    if (!std::isfinite(margin.scale)) return false;
    if (screen_.scales.defined()) {
      const float* scales = screen_.scales.const_data_ptr<float>();
#pragma omp simd
      for (int64_t c = 0; c < vocab_; ++c) screened[c] *= scales[c];
    }
    const float* norms = screen_.norms.const_data_ptr<float>();
    float floor = -INFINITY;  // the largest screened logit less its bound
    float nothing = 0;  // NaN where some screened logit is not finite
#pragma omp simd reduction(max : floor) reduction(+ : nothing)
    for (int64_t c = 0; c < vocab_; ++c) {
      nothing += screened[c] * 0.0f;
      floor = std::max(floor, screened[c] - margin.bound(norms[c]));
    }
    if (nothing != 0.0f) return false;
    // Below the floor by a share of its size, and by what rounding near zero keeps apart.
    floor -= rounded_slack * (std::fabs(floor) + 0x1p-120f);
    candidates.clear();
    for (int64_t c = 0; c < vocab_; ++c) {
      if (screened[c] + margin.bound(norms[c]) >= floor) {
        if (static_cast<int64_t>(candidates.size()) == Screen::kMostCandidates) return false;
        candidates.push_back(c);
      }
    }
    return true;
  }

  // [first, last) of `total` for a thread: contiguous shares, the first threads' full.
  static std::pair<int64_t, int64_t> range(int64_t total, int thread, int count) {
    const int64_t each = (total + count - 1) / count;
    const int64_t first = std::min(total, thread * each);
    return {first, std::min(total, first + each)};
  }

  // Llama's RMSNorm of each row of h into x: normalised in float32, rounded to T, scaled by the
  // weight and rounded again (fused_llama.py's `rms_norm`; for float32 the roundings do nothing).
  template <typename T>
  void normalize(const T* h, const T* weight, int64_t rows, T* x) const {
    for (int64_t b = 0; b < rows; ++b) {
      const T* row = h + b * hidden_;
      T* to = x + b * hidden_;
      float squares = 0;
      int64_t i = 0;
#if defined(__AVX512F__)
      __m512 sums = _mm512_setzero_ps();
      for (; i + kLanes <= hidden_; i += kLanes) {
        const __m512 v = Lanes<T>::load(row + i);
        sums = _mm512_fmadd_ps(v, v, sums);
      }
      squares = _mm512_reduce_add_ps(sums);
#endif
      for (; i < hidden_; ++i) squares += static_cast<float>(row[i]) * static_cast<float>(row[i]);
      const float scale = 1.0f / std::sqrt(squares / static_cast<float>(hidden_) + eps_);
      i = 0;
#if defined(__AVX512F__)
      const __m512 scales = _mm512_set1_ps(scale);
      for (; i + kLanes <= hidden_; i += kLanes)
        Lanes<T>::store(to + i, _mm512_mul_ps(Lanes<T>::load(weight + i),
                                              Lanes<T>::round(_mm512_mul_ps(Lanes<T>::load(row + i), scales))));
#endif
      for (; i < hidden_; ++i)
        to[i] = static_cast<T>(static_cast<float>(weight[i]) *
                               static_cast<float>(static_cast<T>(static_cast<float>(row[i]) * scale)));
    }
  }

  // One head's rotary embedding: x * cos + x with its halves swapped * sin (sin signed so).
  template <typename T>
  static void rotate(const T* x, const T* cos, const T* sin, int64_t dim, T* to) {
    const int64_t half = dim / 2;
    for (int64_t i = 0; i < dim; ++i) {
      const float swapped = static_cast<float>(x[i < half ? i + half : i - half]);
      to[i] = static_cast<T>(static_cast<float>(x[i]) * static_cast<float>(cos[i]) +
                             swapped * static_cast<float>(sin[i]));
    }
  }

  // A row's new key and value of one key head into its cache at `position` (store_rows' way).
  template <typename T>
  void store(const int64_t* table, size_t layer, int64_t b, int64_t head, int64_t position, const T* key,
             const T* value) const {
    const int64_t* row = table + b * kTableColumns;
    const int64_t at = static_cast<int64_t>(layer) * row[2] + head * row[3] + position * dim_;
    std::copy_n(key, dim_, reinterpret_cast<T*>(static_cast<uintptr_t>(row[0])) + at);
    std::copy_n(value, dim_, reinterpret_cast<T*>(static_cast<uintptr_t>(row[1])) + at);
  }

  // SiLU(gate) * up of each row into x [rows, inner], as g * sigmoid(g) * up with e^-|g| by
  // attention's exponential (std::exp does not vectorise).
  template <typename T>
  static void activate(const T* gate_up, int64_t rows, int64_t inner, T* x) {
    for (int64_t b = 0; b < rows; ++b) {
      const T* gate = gate_up + b * 2 * inner;
      const T* up = gate + inner;
      T* to = x + b * inner;
      int64_t i = 0;
#if defined(__AVX512F__)
      const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
      for (; i + kLanes <= inner; i += kLanes) {
        const __m512 g = Lanes<T>::load(gate + i);
        const __m512 e = exp_nonpositive(_mm512_sub_ps(zero, _mm512_abs_ps(g)));
        const __m512 above = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, zero, _CMP_GE_OQ), e, one);
        const __m512 sigmoid = _mm512_div_ps(above, _mm512_add_ps(one, e));
        Lanes<T>::store(to + i, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), Lanes<T>::load(up + i)));
      }
#endif
      for (; i < inner; ++i) {
        const float g = static_cast<float>(gate[i]);
        const float e = chatapp_attention::exp_nonpositive(-std::fabs(g));
        const float sigmoid = g >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
        to[i] = static_cast<T>(g * sigmoid * static_cast<float>(up[i]));
      }
    }
  }

  // The thread's chunks of product `product` (shares_): rows [R, width] x weight [outputs, width]
  // (of type W: the rows' own, but the screen's) into y [R, outputs] by dot_tiles.h's tiles, each
  // chunk's outputs [first, end) handed to `done` as soon as they are computed.
  template <typename T, typename W = T, typename O, typename Done>
  void multiply(size_t product, const T* x, int64_t rows, int64_t width, const at::Tensor& weight, O* y,
                int thread, int count, Done&& done) {
    if (rows <= chatapp_dot::kFewRows)
      multiply<T, W, chatapp_dot::kFew.rows, chatapp_dot::kFew.outputs>(product, x, rows, width, weight, y, thread,
                                                                          count, done);
    else
      multiply<T, W, chatapp_dot::kMany.rows, chatapp_dot::kMany.outputs>(product, x, rows, width, weight, y,
                                                                            thread, count, done);
  }

  // Chunks of about this many bytes of weights: taking one is a compare-and-swap (tens of ns)
  // against the microseconds of reading it, and the threads end a product within about one
  // chunk's read of each other.
  static constexpr int64_t kChunkBytes = 65536;

  template <typename T, typename W, int R, int B, typename O, typename Done>
  void multiply(size_t product, const T* x, int64_t rows, int64_t width, const at::Tensor& weight, O* y,
                int thread, int count, Done& done) {
    const W* w = weight.const_data_ptr<W>();
    const int64_t outputs = weight.size(0), whole = outputs / B;
    const int64_t chunk = std::max<int64_t>(1, kChunkBytes / (B * width * int64_t(sizeof(W))));
    const auto [own_first, own_end] = shares_.own(product, thread);
    int64_t first = 0, end = 0;
    while (shares_.take(product, thread, chunk, first, end)) {
      // The thread's own chunks follow each other: each fetches the next one's first tile.
      const bool own = first >= own_first && end <= own_end;
      chatapp_dot::tiles<T, R, B>(x, rows, width, w, y, outputs, first, end, own ? own_end : end);
      done(first * B, end * B);
    }
    if (thread == count - 1 && whole * B < outputs) {
      chatapp_dot::last_columns<T>(x, rows, width, w, y, outputs, whole * B);
      done(whole * B, outputs);
    }
  }

  // The first of the largest logits in [first, end): a NaN if there is one (as argmax), else the
  // maximum found by a pass that vectorises, then its first column.
  template <typename T>
  static Best largest(const T* logits, int64_t first, int64_t end) {
    if (first >= end) return {-INFINITY, first};
    bool any_nan = false;
    float top = -INFINITY;
#pragma omp simd reduction(| : any_nan) reduction(max : top)
    for (int64_t i = first; i < end; ++i) {
      const float value = static_cast<float>(logits[i]);
      any_nan |= value != value;
      top = std::max(top, value);
    }
    for (int64_t i = first; i < end; ++i) {
      const float value = static_cast<float>(logits[i]);
      if (any_nan ? value != value : value == top) return {value, i};
    }
    return {top, first};  // every logit -inf
  }

  int64_t heads_, kv_heads_;
  float eps_, scaling_;
  at::ScalarType dtype_;
  at::Tensor embedding_, norm_, head_, cos_, sin_;
  std::vector<Layer> layers_;
  int64_t vocab_ = 0, hidden_ = 0, dim_ = 0, intermediate_ = 0;
  Buffers buffers_;
  Screen screen_;
  std::vector<int64_t> product_tiles_;  // each product's whole tiles, in the step's order
  chatapp_step::Shares shares_;
  chatapp_step::Barrier barrier_;
  bool timing_ = false;
  std::array<double, kPhases> phase_seconds_{};
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(chatapp, m) {
  m.class_<DecodeModel>("DecodeModel")
      .def(torch::init<std::vector<at::Tensor>, int64_t, int64_t, double, double>())
      .def("screen_with", &DecodeModel::screen_with)
      .def("screen_levels", &DecodeModel::screen_levels)
      .def("step", &DecodeModel::step)
      .def("set_timing", &DecodeModel::set_timing)
      .def("phase_seconds", &DecodeModel::phase_seconds);
}
