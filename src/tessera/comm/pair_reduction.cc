#include "tessera/comm/pair_reduction.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "tessera/comm/pair_socket.h"
#include "tessera/core/error.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::comm::detail {
namespace {

// Elements of T in one chunk.
template <typename T>
constexpr int64_t kChunk = kPairChunkBytes / static_cast<int64_t>(sizeof(T));

// What the pair operations keep for a group communicator (see the header), made by the first of
// them on it: the duplicate their exchanges run on, whether the two members are on different
// hosts (no shared memory between them) and, if they are, the TCP connection the exchanges use
// (null where it could not be made: then MPI's transport). All are collective; the group's
// collectives run in the same order on both members, so both make them at the same point. Group
// communicators live until MPI_Finalize, so a handle is never reused for another group.
struct PairComm {
  MPI_Comm exchange = MPI_COMM_NULL;
  bool spans_hosts = false;
  std::shared_ptr<PairSocket> socket;
};

const PairComm& pair_comm(MPI_Comm comm) {
  static std::mutex mu;
  static std::map<MPI_Comm, PairComm> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(comm);
  if (it == known.end()) {
    PairComm p;
    if (MPI_Comm_dup(comm, &p.exchange) != MPI_SUCCESS)
      throw Error("pair reduction: MPI_Comm_dup failed");
    MPI_Comm shared = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared) != MPI_SUCCESS)
      throw Error("pair reduction: MPI_Comm_split_type failed");
    int on_this_host = 0;
    MPI_Comm_size(shared, &on_this_host);
    MPI_Comm_free(&shared);
    p.spans_hosts = on_this_host == 1;
    if (p.spans_hosts) p.socket = PairSocket::connect(p.exchange);
    it = known.emplace(comm, p).first;
  }
  return it->second;
}

// Waits for `request` without holding a core: a test, then a short sleep, until it is done.
// MPI_Wait (and a blocking send) poll the transport without pause, and between hosts a transfer
// lasts as long as the link needs (35 ms a 4 MiB chunk at 1 Gbit/s), so the receiving thread
// and the sender took cycles from the backward pass the reduction overlaps. Measured with
// bench/dp_overlap between two shaped hosts with one core each (2026-12-04, three runs each):
// the overlapped step 7.0-7.25 s busy, 6.79-6.90 s with 50 us pauses (the forward and backward
// under it 5.6-5.8 s busy, 4.4-4.7 s pausing); the reduction alone after backward 4.94-5.01 s
// busy, 4.55-4.64 s pausing (the link's rate: 4.17 s). A pause of tens of microseconds is
// nothing to a link; the threads take ordinary scheduling for it (OrdinaryScheduling).
// The first 200 us are polled without pause, so a transfer that a fast link completes in
// about that long (a 4 MiB chunk at 100 Gbit/s: 0.34 ms) is not held back by the pauses.
void wait_sleeping(MPI_Request* request) {
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  MPI_Test(request, &done, MPI_STATUS_IGNORE);
  while (!done) {
    if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(200))
      std::this_thread::sleep_for(std::chrono::microseconds(kPairPollMicroseconds));
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
  }
}

// For its lifetime the calling thread is scheduled as an ordinary thread (SCHED_OTHER), and as
// it was before afterwards. The communication thread runs as SCHED_BATCH (comm/runtime.cc: woken
// for a short operation it must not preempt the thread that issued it), and a thread it starts
// inherits that. But between hosts an exchange lasts as long as the link needs, and its two
// threads wake every few tens of microseconds to feed the transport: a SCHED_BATCH thread woken
// under a computing one waits for its tick (milliseconds), so the transfer starved under backward.
// Measured with bench/dp_overlap between two shaped hosts with one core each (2026-12-04): the
// share of the reduction hidden behind backward 46.1 / 52.2% as SCHED_BATCH with 50 us pauses,
// 59.3 / 58.5 / 61.3% ordinary with 50 us, 66.1 / 63.0% ordinary with 20 us; the overlapped step
// 6.85 / 6.85 s, 6.69 / 6.91 / 6.75 s, 6.78 / 6.62 s. Best effort: a thread that cannot change
// its policy keeps it.
class OrdinaryScheduling {
 public:
  OrdinaryScheduling() {
    if (pthread_getschedparam(pthread_self(), &policy_, &param_) != 0 || policy_ == SCHED_OTHER)
      return;
    const sched_param ordinary{};
    changed_ = pthread_setschedparam(pthread_self(), SCHED_OTHER, &ordinary) == 0;
  }
  ~OrdinaryScheduling() {
    if (changed_) pthread_setschedparam(pthread_self(), policy_, &param_);
  }
  OrdinaryScheduling(const OrdinaryScheduling&) = delete;
  OrdinaryScheduling& operator=(const OrdinaryScheduling&) = delete;

 private:
  int policy_ = SCHED_OTHER;
  sched_param param_{};
  bool changed_ = false;
};

void add_into(float* __restrict mine, const float* __restrict theirs, int64_t n) {
  for (int64_t i = 0; i < n; ++i) mine[i] += theirs[i];
}

// Waits until the sender thread's count of chunks gone passes k; returns the count.
int64_t wait_past(const std::atomic<int64_t>& sent, int64_t k) {
  int64_t gone = sent.load(std::memory_order_acquire);
  for (; gone <= k; gone = sent.load(std::memory_order_acquire))
    sent.wait(gone, std::memory_order_acquire);
  return gone;
}

// exchange_and_add (below) between hosts over the pair's TCP connection: `count` elements as
// `chunks` chunks of size(k). The sender thread writes a header (the exchange's number and size)
// and the chunks back to back; this thread checks the peer's header, reads each chunk into its
// place (`recv`, or one chunk-sized buffer when `recv` is null) and adds it once the same chunk of
// `send` has gone. Both block in the kernel, which moves the data meanwhile. A failure on either
// side aborts the connection (so the other's blocked call returns, here and on the peer), joins
// the sender and throws (the sender's error first: it is the cause when both failed).
template <typename T, typename Size, typename Add>
void exchange_over_socket(const T* send, T* recv, int64_t count, int64_t chunks, const Size& size,
                          PairSocket& socket, const Add& add) {
  const int64_t bytes = count * int64_t{sizeof(T)};
  constexpr int64_t kFailed = std::numeric_limits<int64_t>::max();
  const OrdinaryScheduling scheduling;
  const std::unique_ptr<T[]> slot(recv == nullptr ? new T[kChunk<T>] : nullptr);
  std::atomic<int64_t> sent{0};  // chunks of `send` gone, or kFailed
  std::exception_ptr send_error;
  std::thread sender;
  try {
    sender = std::thread([&] {
      const OrdinaryScheduling sender_scheduling;
      try {
        socket.send_header(bytes);
        for (int64_t k = 0; k < chunks; ++k) {
          socket.send_all(send + k * kChunk<T>, size(k) * int64_t{sizeof(T)});
          sent.store(k + 1, std::memory_order_release);
          sent.notify_one();
        }
      } catch (...) {
        send_error = std::current_exception();
        socket.abort();
        sent.store(kFailed, std::memory_order_release);
        sent.notify_one();
      }
    });
  } catch (const std::system_error& e) {
    socket.abort();  // the peer, blocked on this rank's bytes, fails at once instead of waiting
    throw Error(std::string("pair exchange: cannot start its sending thread: ") + e.what());
  }
  try {
    socket.expect_header(bytes);
    for (int64_t k = 0; k < chunks; ++k) {
      T* landing = recv != nullptr ? recv + k * kChunk<T> : slot.get();
      socket.recv_all(landing, size(k) * int64_t{sizeof(T)});
      if (wait_past(sent, k) == kFailed) break;
      add(k * kChunk<T>, size(k), landing);
    }
  } catch (...) {
    socket.abort();
    sender.join();
    if (send_error) std::rethrow_exception(send_error);
    throw;
  }
  sender.join();
  if (send_error) std::rethrow_exception(send_error);
}

// Sends `count` elements of T (MPI type `type`) from `send` to the peer and receives as many from
// it, as chunks of kPairChunkBytes at most, and calls add(at, n, received) for the received
// values of [at, at + n): on one host once, for the whole buffer, after everything has arrived
// (into `recv`); between hosts once a chunk, in order, as each arrives (into `recv`, or with
// `recv` null, allowed only there, into one of two chunk-sized buffers) and only after the same
// chunk of `send` has gone, so that `add` may overwrite `send` (an all-reduce in place) and the
// sum of one chunk overlaps the transfer of the next. `add` must not throw.
//
// Messages are tagged with their chunk's index (an int count of at most 8-byte elements is at
// most 4096 chunks, under MPI's least tag bound of 32767). Tags repeat from one exchange to the
// next on the same communicator; they cannot match across exchanges because the pair's
// operations run one at a time (ProcessGroup's collectives do) and each returns only when its
// messages are done (the sender thread joined), so MPI's ordering of messages with the same
// source, tag and communicator pairs each chunk with its own exchange.
//
// On one host every receive is posted before the first send and one thread waits for them all.
// Between hosts the sends run on a thread of their own while the calling thread receives: over
// the pair's own TCP connection (pair_socket.h) where it has one, both blocking in the kernel;
// otherwise over MPI, one chunk at a time (each waited for before the next is sent), both
// waiting with pauses (wait_sleeping). Why the two threads: with one thread progressing both
// directions, Open MPI 4.1's TCP transport moved back-to-back exchanges at half the link's rate
// each way, as if the link were half duplex (63 MB/s each way on a shaped 1 Gbit/s link, for any
// chunk size, tbf queue bound, TCP congestion control or socket buffer size; an exchange after 10
// ms of silence ran at the link's rate), where the two threads reached 105-110 MB/s, and plain TCP
// sockets 120 MB/s each way on one connection (2026-12-04, docs/distributed.md). The sends must
// not be too small: a send waits for the receiver's answer to its request, and 256 KiB chunks
// moved 32 MB/s there, 1 and 4 MiB 105-110. On one host the second thread made the
// exchange 12x slower (two ranks' four threads spinning on two cores), so there the one-thread
// form stays.
template <typename T, typename Add>
void exchange_and_add(const T* send, T* recv, int64_t count, MPI_Datatype type, int peer,
                      const PairComm& pair, const Add& add) {
  if (count == 0) return;  // no message (a receive posted here would take the next exchange's)
  const int64_t chunks = (count + kChunk<T> - 1) / kChunk<T>;
  const auto size = [count](int64_t k) {
    return static_cast<int>(std::min(kChunk<T>, count - k * kChunk<T>));
  };
  if (pair.socket) return exchange_over_socket(send, recv, count, chunks, size, *pair.socket, add);
  const auto tag = [](int64_t k) { return static_cast<int>(k); };
  const MPI_Comm comm = pair.exchange;
  if (!pair.spans_hosts) {
    std::vector<MPI_Request> reqs(static_cast<size_t>(2 * chunks));
    for (int64_t k = 0; k < chunks; ++k)
      MPI_Irecv(recv + k * kChunk<T>, size(k), type, peer, tag(k), comm, &reqs[k]);
    for (int64_t k = 0; k < chunks; ++k)
      MPI_Isend(send + k * kChunk<T>, size(k), type, peer, tag(k), comm, &reqs[chunks + k]);
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    add(0, count, recv);
    return;
  }
  const OrdinaryScheduling scheduling;
  // Allocated before the sender starts: nothing may throw while it runs.
  const std::unique_ptr<T[]> slots(recv == nullptr ? new T[2 * kChunk<T>] : nullptr);
  std::atomic<int64_t> sent{0};  // chunks of `send` gone
  std::thread sender;
  std::vector<MPI_Request> sends;  // only when no thread could be started
  try {
    sender = std::thread([&] {
      const OrdinaryScheduling sender_scheduling;
      for (int64_t k = 0; k < chunks; ++k) {
        MPI_Request request;
        MPI_Isend(send + k * kChunk<T>, size(k), type, peer, tag(k), comm, &request);
        wait_sleeping(&request);
        sent.store(k + 1, std::memory_order_release);
        sent.notify_one();
      }
    });
  } catch (const std::system_error&) {
    // Out of threads: the same messages, sent nonblocking from this thread (slower, as above,
    // but the peer, which cannot know, still gets every chunk).
    sends.resize(static_cast<size_t>(chunks));
    for (int64_t k = 0; k < chunks; ++k)
      MPI_Isend(send + k * kChunk<T>, size(k), type, peer, tag(k), comm, &sends[k]);
  }
  const auto landing = [&](int64_t k) {
    return recv != nullptr ? recv + k * kChunk<T> : slots.get() + (k % 2) * kChunk<T>;
  };
  // Chunk k + 1's receive is posted before chunk k is summed (its buffer, chunk k - 1's, is free).
  MPI_Request pending[2];
  MPI_Irecv(landing(0), size(0), type, peer, tag(0), comm, &pending[0]);
  for (int64_t k = 0; k < chunks; ++k) {
    if (k + 1 < chunks)
      MPI_Irecv(landing(k + 1), size(k + 1), type, peer, tag(k + 1), comm, &pending[(k + 1) % 2]);
    wait_sleeping(&pending[k % 2]);
    if (!sender.joinable()) wait_sleeping(&sends[k]);
    if (sender.joinable()) wait_past(sent, k);
    add(k * kChunk<T>, size(k), landing(k));
  }
  if (sender.joinable()) sender.join();
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

}  // namespace

bool pair_reduction_applies(int group_size, int64_t count, MPI_Datatype type, MPI_Op op) {
  return group_size == 2 && type == MPI_FLOAT && op == MPI_SUM && count * 4 >= kPairMinBytes;
}

bool pair_spans_hosts(MPI_Comm comm) { return pair_comm(comm).spans_hosts; }

void pair_all_reduce_sum(float* buf, int64_t count, MPI_Comm group_comm) {
  const PairComm& pair = pair_comm(group_comm);
  const int peer = 1 - rank_in(pair.exchange);
  // On one host the peer's values arrive in a buffer as large as buf (not zeroed: every element
  // is received before it is read); between hosts chunk by chunk (exchange_and_add).
  const std::unique_ptr<float[]> theirs(pair.spans_hosts ? nullptr
                                                         : new float[static_cast<size_t>(count)]);
  exchange_and_add(
      buf, theirs.get(), count, MPI_FLOAT, peer, pair,
      [buf](int64_t at, int64_t n, const float* received) { add_into(buf + at, received, n); });
}

void pair_reduce_scatter_sum(const float* in, float* out, int64_t count, MPI_Comm group_comm) {
  // MPI's reduce-scatter takes no overlapping buffers either; here the sum would read values
  // already overwritten.
  if (out < in + 2 * count && in < out + count)
    throw Error("reduce_scatter: the output overlaps the input");
  const PairComm& pair = pair_comm(group_comm);
  const int rank = rank_in(pair.exchange), peer = 1 - rank;
  // The peer's values of this rank's block arrive in `out`; this rank's values are added there.
  const float* mine = in + rank * count;
  exchange_and_add(
      in + (1 - rank) * count, out, count, MPI_FLOAT, peer, pair,
      [out, mine](int64_t at, int64_t n, const float*) { add_into(out + at, mine + at, n); });
}

bool sixteen_bit_pair_applies(int group_size, int64_t count) {
  return group_size == 2 && count * 2 >= kPairMinBytes;
}

namespace {

// kernels::add on `dtype`'s values seen as 16-bit words: out = round(a + b).
void add_sixteen_bit(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n, DType dtype) {
  if (dtype == DType::kBF16)
    kernels::add(reinterpret_cast<bf16*>(out), reinterpret_cast<const bf16*>(a),
                 reinterpret_cast<const bf16*>(b), n);
  else
    kernels::add(reinterpret_cast<fp16*>(out), reinterpret_cast<const fp16*>(a),
                 reinterpret_cast<const fp16*>(b), n);
}

}  // namespace

void pair_all_reduce_sum(void* buf, int64_t count, DType dtype, MPI_Comm group_comm) {
  const PairComm& pair = pair_comm(group_comm);
  const int peer = 1 - rank_in(pair.exchange);
  auto* mine = static_cast<uint16_t*>(buf);
  const std::unique_ptr<uint16_t[]> theirs(
      pair.spans_hosts ? nullptr : new uint16_t[static_cast<size_t>(count)]);
  exchange_and_add(mine, theirs.get(), count, MPI_UINT16_T, peer, pair,
                   [mine, dtype](int64_t at, int64_t n, const uint16_t* received) {
                     add_sixteen_bit(mine + at, mine + at, received, n, dtype);
                   });
}

void pair_reduce_scatter_sum(const void* in, void* out, int64_t count, DType dtype,
                             MPI_Comm group_comm) {
  const auto* all = static_cast<const uint16_t*>(in);
  auto* sum = static_cast<uint16_t*>(out);
  if (sum < all + 2 * count && all < sum + count)
    throw Error("reduce_scatter: the output overlaps the input");
  const PairComm& pair = pair_comm(group_comm);
  const int rank = rank_in(pair.exchange), peer = 1 - rank;
  const uint16_t* mine = all + rank * count;
  exchange_and_add(all + (1 - rank) * count, sum, count, MPI_UINT16_T, peer, pair,
                   [sum, mine, dtype](int64_t at, int64_t n, const uint16_t*) {
                     add_sixteen_bit(sum + at, sum + at, mine + at, n, dtype);
                   });
}

void pair_all_gather(const void* in, void* out, int64_t bytes, MPI_Comm group_comm) {
  const PairComm& pair = pair_comm(group_comm);
  const int rank = rank_in(pair.exchange), peer = 1 - rank;
  const char* mine = static_cast<const char*>(in);
  char* whole = static_cast<char*>(out);
  // MPI's all-gather takes no overlapping buffers either (bar MPI_IN_PLACE, which no caller uses).
  if (mine < whole + 2 * bytes && whole < mine + bytes)
    throw Error("all_gather: the input overlaps the output");
  std::memcpy(whole + rank * bytes, mine, static_cast<size_t>(bytes));
  exchange_and_add(mine, whole + peer * bytes, bytes, MPI_BYTE, peer, pair,
                   [](int64_t, int64_t, const char*) {});
}

}  // namespace tessera::comm::detail
