// How the native decode step's threads (decode_step.cpp) share its products and wait for each
// other.
//
// A step at one stream is ~120 products of a few hundred kilobytes to 56 MB each, with a
// barrier after most: every product's weights must be read before the next one's input exists.
// Shared as `dot_rows` shares a product (contiguous equal ranges, dot_tiles.h), a thread that
// finished first waited at each barrier for the other: at one bf16 stream on a 2-core AMD EPYC,
// 0.3-1.5 ms of a 10 ms step each (on a shared machine a thread held up by anything else holds
// up the other). So each thread starts on its own range and takes it front to back a chunk at a
// time, and a thread done with its own takes chunks from the others' backs (`Shares`); and a
// thread that still waits fetches the weights it will read after the barrier into L2 meanwhile
// (`Barrier`, `Fetch`): they do not depend on what the others compute. Both together, in turns
// with libgomp's barrier and fixed ranges inside one server under the benchmark's load
// (BENCHMARKS.md): 0.95x-0.99x its step, 0.96x at the median.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace chatapp_step {

// The weights a thread multiplies next, fetched into L2 a line at a time while it waits.
class Fetch {
 public:
  // At most this much ahead: a quarter of the L2 of the machines measured (1 MB a core), so that
  // the fetched lines are still there when the product reads them (128 and 512 KB, timed in turns
  // with it in one process, were no better).
  static constexpr int64_t kMostAhead = 262144;

  // The next weights are `bytes` from `at`; aiming at the same ones again keeps what was fetched.
  void aim(const void* at, int64_t bytes) {
    const char* to = static_cast<const char*>(at);
    if (to == at_) return;
    at_ = to, bytes_ = std::min(bytes, kMostAhead), done_ = 0;
  }

  // Asks for one more line of them; false once every line has been asked for.
  bool one() {
    if (done_ >= bytes_) return false;
    _mm_prefetch(at_ + done_, _MM_HINT_T1);
    done_ += 64;
    return true;
  }

 private:
  const char* at_ = nullptr;
  int64_t bytes_ = 0, done_ = 0;
};

// The threads of one parallel region meet here: the last to arrive releases the others. A waiting
// thread spins (a step's barriers are 10-100 us apart, far less than a sleep and a wake-up cost),
// fetching its next weights while there are some, and after a while yields its core to whatever
// else the machine runs.
class Barrier {
 public:
  // Pauses before a waiting thread starts yielding: tens of microseconds on x86 cores (a pause is
  // tens of cycles), longer than a step's usual wait at a barrier; not tuned.
  static constexpr int64_t kSpinsBeforeYield = 2048;

  void wait(int threads, Fetch* next) {
    const uint32_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == threads - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int64_t spins = 0; generation_.load(std::memory_order_acquire) == generation;) {
      if (next != nullptr && next->one()) continue;
      _mm_pause();
      if (++spins > kSpinsBeforeYield) std::this_thread::yield();
    }
  }

 private:
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
};

// Each product's tiles, shared out before the threads start: a thread's own range [first, end)
// (contiguous ranges, the first threads' full, as at::parallel_for shares `dot_rows`' tiles),
// taken from its front a chunk at a time by its thread and from its back by any other thread
// done with its own.
class Shares {
 public:
  // Before the parallel region: products whose whole tiles are `tiles[p]`, among `threads`.
  void reset(const std::vector<int64_t>& tiles, int threads) {
    threads_ = threads;
    const size_t count = tiles.size() * static_cast<size_t>(threads);
    if (count > capacity_) ranges_.reset(new Range[count]), capacity_ = count;
    for (size_t product = 0; product < tiles.size(); ++product) {
      const int64_t whole = tiles[product], each = (whole + threads - 1) / threads;
      for (int thread = 0; thread < threads; ++thread) {
        const int64_t first = std::min(whole, thread * each), end = std::min(whole, first + each);
        ranges_[product * threads + thread].set(first, end);
      }
    }
  }

  // The thread's own range as drawn, [first, end), whatever has been taken of it since.
  std::pair<int64_t, int64_t> own(size_t product, int thread) const {
    const Range& own = range(product, thread);
    return {own.first, own.end};
  }

  // The next chunk of at most `chunk` tiles, [first, end), of the thread's own range, then of the
  // others'; false once every tile of the product is taken.
  bool take(size_t product, int thread, int64_t chunk, int64_t& first, int64_t& end) {
    if (range(product, thread).take_front(chunk, first, end)) return true;
    for (int other = 1; other < threads_; ++other)
      if (range(product, (thread + other) % threads_).take_back(chunk, first, end)) return true;
    return false;
  }

 private:
  // The tiles not yet taken, [front, back), in one word: both ends change by compare-and-swap.
  struct alignas(64) Range {
    std::atomic<uint64_t> bounds{0};
    int64_t first = 0, end = 0;
    void set(int64_t front, int64_t back) {
      first = front, end = back;
      bounds.store(static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(front), std::memory_order_relaxed);
    }
    bool take_front(int64_t chunk, int64_t& from, int64_t& to) { return take(chunk, from, to, true); }
    bool take_back(int64_t chunk, int64_t& from, int64_t& to) { return take(chunk, from, to, false); }

   private:
    bool take(int64_t chunk, int64_t& from, int64_t& to, bool at_front) {
      uint64_t now = bounds.load(std::memory_order_relaxed);
      for (;;) {
        const int64_t front = static_cast<int64_t>(now & 0xffffffffu), back = static_cast<int64_t>(now >> 32);
        if (front >= back) return false;
        from = at_front ? front : std::max(front, back - chunk);
        to = at_front ? std::min(back, front + chunk) : back;
        const uint64_t left = at_front ? static_cast<uint64_t>(back) << 32 | static_cast<uint64_t>(to)
                                       : static_cast<uint64_t>(from) << 32 | static_cast<uint64_t>(front);
        if (bounds.compare_exchange_weak(now, left, std::memory_order_acq_rel, std::memory_order_relaxed))
          return true;
      }
    }
  };

  Range& range(size_t product, int thread) { return ranges_[product * threads_ + thread]; }
  const Range& range(size_t product, int thread) const { return ranges_[product * threads_ + thread]; }

  std::unique_ptr<Range[]> ranges_;
  size_t capacity_ = 0;
  int threads_ = 1;
};

}  // namespace chatapp_step
