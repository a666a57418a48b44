// ProcessGroup under MPI: every collective for every dtype against the result computed locally
// from every rank's (deterministic) input, on the world group and on subgroups; point-to-point;
// communication accounting (the buffers handed to MPI, against hand-worked byte counts); overlap
// of communication with computation; the collective consistency check firing on a deliberately
// wrong program. The check is on for the whole binary (so every other test also proves it
// raises no false alarm).
// ranks: 1 2 4 8
#include "tessera/comm/process_group.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dist_main.h"
#include "tessera/comm/pair_reduction.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::comm {
namespace {

const std::vector<DType> kNumericTypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32,
                                          DType::kI64};
const std::vector<DType> kAllTypes = {DType::kF32, DType::kBF16, DType::kF16,
                                      DType::kI32, DType::kI64,  DType::kU16};

// Element i of rank r's input. Float values are multiples of 1/4 in [-2, 2], so they are exact in
// bf16/fp16 and so are sums over <= 8 ranks (|sum| <= 16 needs 7 significant bits): every
// expected value below is exact and compared with ==.
double value(DType d, int r, int64_t i) {
  const int64_t u = (r * 31 + i * 7) % 17 - 8;
  switch (d) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return 0.25 * static_cast<double>(u);
    case DType::kI32:
      return 100003.0 * static_cast<double>(u);
    case DType::kI64:
      return std::ldexp(static_cast<double>(u), 40);  // needs 64 bits
    case DType::kU16:
      return static_cast<double>(u + 8 + 17 * r);
  }
  return 0;
}

void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    case DType::kBF16:
      t.data<bf16>()[i] = bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      t.data<fp16>()[i] = fp16(static_cast<float>(v));
      break;
    case DType::kI32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      t.data<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kU16:
      t.data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
  }
}

double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kBF16:
      return to_f32(t.data<bf16>()[i]);
    case DType::kF16:
      return to_f32(t.data<fp16>()[i]);
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kU16:
      return t.data<uint16_t>()[i];
  }
  return 0;
}

// A tensor holding value(d, r, offset + i) for i in [0, n).
Tensor input(DType d, int r, int64_t n, int64_t offset = 0) {
  Tensor t = Tensor::empty({n}, d);
  for (int64_t i = 0; i < n; ++i) set(t, i, value(d, r, offset + i));
  return t;
}

// Checks t[begin + k] == expected(k) for k in [0, count). Counts mismatches instead of stopping
// at the first: returning early would leave the other ranks waiting in the next collective.
void expect_elements(const Tensor& t, int64_t begin, int64_t count,
                     const std::function<double(int64_t)>& expected) {
  int64_t bad = 0, first = -1;
  for (int64_t k = 0; k < count; ++k) {
    if (get(t, begin + k) != expected(k)) {
      if (bad++ == 0) first = k;
    }
  }
  EXPECT_EQ(bad, 0) << "first mismatch at element " << begin + first << ": got "
                    << (first >= 0 ? get(t, begin + first) : 0) << ", expected "
                    << (first >= 0 ? expected(first) : 0);
}

double reduce_over_ranks(DType d, int n, int64_t i, ReduceOp op) {
  double acc = op == ReduceOp::kSum ? 0.0 : -INFINITY;
  for (int r = 0; r < n; ++r) {
    const double v = value(d, r, i);
    acc = op == ReduceOp::kSum ? acc + v : std::max(acc, v);
  }
  return acc;
}

// Runs every collective on `g` for every dtype and several sizes (0, 1, odd, not multiples of
// the group size) and checks the results element by element.
void check_all_collectives(ProcessGroup& g) {
  const int n = g.size(), me = g.rank();
  for (DType d : kNumericTypes) {
    for (int64_t count : {0, 1, 7, 33, 1001}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        SCOPED_TRACE(std::string("all_reduce ") + dtype_name(d) + " count " +
                     std::to_string(count) + (op == ReduceOp::kSum ? " sum" : " max"));
        Tensor t = input(d, me, count);
        g.all_reduce(t, op).wait();
        expect_elements(t, 0, count, [&](int64_t i) { return reduce_over_ranks(d, n, i, op); });
      }
    }
    for (int64_t block : {0, 1, 3, 17}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        SCOPED_TRACE(std::string("reduce_scatter ") + dtype_name(d) + " block " +
                     std::to_string(block));
        Tensor in = input(d, me, n * block);
        Tensor out = Tensor::empty({block}, d);
        g.reduce_scatter(in, out, op).wait();
        expect_elements(out, 0, block,
                        [&](int64_t i) { return reduce_over_ranks(d, n, me * block + i, op); });
      }
    }
  }
  for (DType d : kAllTypes) {
    for (int64_t count : {0, 1, 5, 33}) {
      SCOPED_TRACE(std::string("all_gather / broadcast ") + dtype_name(d) + " count " +
                   std::to_string(count));
      Tensor in = input(d, me, count);
      Tensor out = Tensor::empty({n * count}, d);
      g.all_gather(in, out).wait();
      for (int r = 0; r < n; ++r) {
        expect_elements(out, r * count, count, [&](int64_t i) { return value(d, r, i); });
      }
      for (int root = 0; root < n; ++root) {
        Tensor t = input(d, me, count);
        g.broadcast(t, root).wait();
        expect_elements(t, 0, count, [&](int64_t i) { return value(d, root, i); });
      }
    }
    for (int64_t block : {0, 1, 3, 9}) {
      SCOPED_TRACE(std::string("all_to_all ") + dtype_name(d) + " block " + std::to_string(block));
      // Block j of rank r's input is value(r, j*block + k); it lands in block r of rank j.
      Tensor in = input(d, me, n * block);
      Tensor out = Tensor::empty({n * block}, d);
      g.all_to_all(in, out).wait();
      for (int r = 0; r < n; ++r) {
        expect_elements(out, r * block, block,
                        [&](int64_t k) { return value(d, r, me * block + k); });
      }
    }
    {
      SCOPED_TRACE(std::string("all_to_allv ") + dtype_name(d));
      // Rank r sends c(r, j) elements to rank j (0, 1 or 2; uneven), element k of that block
      // being value(r, 100*j + k). Spare capacity at the end of both buffers stays untouched.
      auto c = [](int r, int j) { return static_cast<int64_t>((r + 2 * j) % 3); };
      std::vector<int64_t> in_counts(n), out_counts(n);
      int64_t s_total = 0, r_total = 0;
      for (int j = 0; j < n; ++j) {
        in_counts[j] = c(me, j);
        out_counts[j] = c(j, me);
        s_total += in_counts[j];
        r_total += out_counts[j];
      }
      Tensor in = Tensor::empty({s_total + 2}, d);
      for (int j = 0, k0 = 0; j < n; k0 += static_cast<int>(in_counts[j]), ++j) {
        for (int64_t k = 0; k < in_counts[j]; ++k) set(in, k0 + k, value(d, me, 100 * j + k));
      }
      Tensor out = Tensor::zeros({r_total + 3}, d);
      g.all_to_allv(in, in_counts, out, out_counts).wait();
      int64_t pos = 0;
      for (int r = 0; r < n; ++r) {
        expect_elements(out, pos, out_counts[r],
                        [&](int64_t k) { return value(d, r, 100 * me + k); });
        pos += out_counts[r];
      }
      expect_elements(out, pos, 3, [](int64_t) { return 0.0; });
    }
  }
  g.barrier().wait();
}

std::shared_ptr<ProcessGroup> world() { return ProcessGroup::world(); }

TEST(ProcessGroup, WorldGroup) {
  auto w = world();
  int size = 0, rank = 0;
  // Only comm/ calls MPI in the library; a test may compare with MPI's own view.
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(w->size(), size);
  EXPECT_EQ(w->rank(), rank);
  EXPECT_EQ(w->name(), "world");
  for (int r = 0; r < size; ++r) EXPECT_EQ(w->world_ranks()[r], r);
  EXPECT_EQ(ProcessGroup::world().get(), w.get());
}

TEST(ProcessGroup, EveryCollectiveOnWorld) { check_all_collectives(*world()); }

TEST(ProcessGroup, EveryCollectiveOnSubgroups) {
  auto w = world();
  const int n = w->size();
  // Odd ranks then even ranks, each list in descending order: group order is list order.
  std::vector<int> evens, odds;
  for (int r = n - 1; r >= 0; --r) (r % 2 ? odds : evens).push_back(r);
  std::vector<std::vector<int>> partition = {evens};
  if (!odds.empty()) partition.insert(partition.begin(), odds);
  auto g = w->new_subgroups(partition, "parity");
  const std::vector<int>& mine = w->rank() % 2 ? odds : evens;
  EXPECT_EQ(g->name(), "parity");
  ASSERT_EQ(g->size(), static_cast<int>(mine.size()));
  EXPECT_EQ(g->world_ranks(), mine);
  EXPECT_EQ(mine[g->rank()], w->rank());
  check_all_collectives(*g);

  // Singletons: every collective is a local copy.
  std::vector<std::vector<int>> singles;
  for (int r = 0; r < n; ++r) singles.push_back({r});
  auto s = w->new_subgroups(singles, "self");
  EXPECT_EQ(s->size(), 1);
  EXPECT_EQ(s->world_ranks(), std::vector<int>{w->rank()});
  check_all_collectives(*s);

  // A subgroup of a subgroup: its world ranks map through the parent's.
  std::vector<std::vector<int>> halves = {{0}, {}};
  for (int r = 1; r < g->size(); ++r) halves[1].push_back(r);
  if (halves[1].empty()) halves.pop_back();
  auto first = g->new_subgroups(halves, "nested");
  EXPECT_EQ(first->world_ranks()[first->rank()], w->rank());
  Tensor t = Tensor::empty({1}, DType::kI64);
  t.data<int64_t>()[0] = w->rank();
  first->all_reduce(t, ReduceOp::kSum).wait();
  int64_t expected = 0;
  for (int r : first->world_ranks()) expected += r;
  EXPECT_EQ(t.data<int64_t>()[0], expected);
}

TEST(ProcessGroup, SixteenBitReductionsAccumulateInFp32) {
  auto w = world();
  const int n = w->size();
  if (n < 4) GTEST_SKIP() << "needs >= 4 ranks for the rounding to show";
  // Rank 0 holds 1, the others eps/4 (eps = the format's spacing at 1). Summed in 16 bits, every
  // addition of eps/4 to 1 rounds away and the result is 1; accumulated in fp32 (exact here)
  // and rounded once, the result is the 16-bit value nearest 1 + (n-1)·eps/4, which is > 1
  // for n >= 4.
  for (DType d : {DType::kBF16, DType::kF16}) {
    const float eps = d == DType::kBF16 ? 0x1p-7f : 0x1p-10f;
    Tensor t = Tensor::empty({3}, d);
    for (int64_t i = 0; i < 3; ++i) set(t, i, w->rank() == 0 ? 1.0 : eps / 4);
    w->all_reduce(t, ReduceOp::kSum).wait();
    Tensor ref32 = Tensor::empty({1}, DType::kF32);
    ref32.data<float>()[0] = 1.0f + static_cast<float>(n - 1) * eps / 4;
    const double expected = get(ref32.to(d, MemoryCategory::kOther), 0);
    EXPECT_GT(expected, 1.0);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(get(t, i), expected) << dtype_name(d);
  }
}

// The two-rank all-reduce by exchange (comm/pair_reduction.h), which the runtime takes when the
// pair spans two hosts (tests/cli/multihost.sh runs it there, bitwise against one host): here
// called directly on pairs of one host, against each element's IEEE sum and MPI_Allreduce's bits.
TEST(ProcessGroup, TwoRankAllReduceByExchangeIsMpisFp32Sum) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  if (n < 2 || (n % 2 == 1 && me == n - 1)) {
    MPI_Comm none = MPI_COMM_NULL;  // the odd one out takes part in the split only
    MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none);
    GTEST_SKIP();
  }
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me / 2, me, &pair);
  EXPECT_FALSE(tessera::comm::detail::pair_spans_hosts(pair));  // both ranks on this host
  const int peer = me ^ 1;
  for (int64_t count : {int64_t{300001}, int64_t{10} << 20}) {  // 1.2 MB; 40 MiB = 10 chunks
    auto inputs_of = [count](int world_rank) {
      std::mt19937 rng(static_cast<unsigned>(2000 + world_rank));
      std::normal_distribution<float> normal;
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = normal(rng);
      return v;
    };
    const std::vector<float> mine = inputs_of(me), theirs = inputs_of(peer);
    std::vector<float> exchanged = mine, reference = mine;
    tessera::comm::detail::pair_all_reduce_sum(exchanged.data(), count, pair);
    MPI_Allreduce(MPI_IN_PLACE, reference.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  pair);
    int64_t not_sum = 0, not_mpi = 0;
    for (int64_t i = 0; i < count; ++i) {
      const float sum = mine[i] + theirs[i];
      not_sum += std::memcmp(&sum, &exchanged[i], sizeof(float)) != 0;
      not_mpi += std::memcmp(&reference[i], &exchanged[i], sizeof(float)) != 0;
    }
    EXPECT_EQ(not_sum, 0) << count;
    EXPECT_EQ(not_mpi, 0) << count;
  }
  // Not freed: the exchanges keep a duplicate keyed by the handle, which must not be reused for
  // another communicator (the contract in pair_reduction.h; group communicators live until
  // MPI_Finalize too).
}

// A two-rank fp32 sum reduce-scatter of 1 MiB or more a block runs as chunked exchanges
// (comm/pair_reduction.h): each element must be the one fp32 sum of the two ranks' values, as
// MPI's gives it, for block sizes that are and are not whole chunks; and a point-to-point
// receive pending on the same group (tag 0, as the exchanges' first chunk) must get the peer's
// send, not a chunk.
TEST(ProcessGroup, TwoRankReduceScatterOfLargeBlocksIsTheFp32Sum) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  if (n < 2) GTEST_SKIP();
  std::vector<std::vector<int>> pairs;
  for (int r = 0; r + 1 < n; r += 2) pairs.push_back({r, r + 1});
  if (n % 2) pairs.push_back({n - 1});
  auto g = w->new_subgroups(pairs, "pairs");
  if (g->size() != 2) GTEST_SKIP();
  const int peer_world = g->world_ranks()[1 - g->rank()];
  // Rank r's input element i: random normal values (their sums round), the same on any rank.
  auto inputs_of = [](int world_rank, int64_t count) {
    std::mt19937 rng(static_cast<unsigned>(1000 + world_rank));
    std::normal_distribution<float> normal;
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = normal(rng);
    return v;
  };
  for (int64_t block : {int64_t{300001}, int64_t{5} << 20}) {  // 1.2 MB; 20 MiB = 5 chunks
    const std::vector<float> mine = inputs_of(me, 2 * block),
                             theirs = inputs_of(peer_world, 2 * block);
    Tensor in = Tensor::empty({2 * block}, DType::kF32), out = Tensor::empty({block}, DType::kF32);
    std::copy(mine.begin(), mine.end(), in.data<float>());
    Tensor note = input(DType::kF32, me, 7), got = Tensor::empty({7}, DType::kF32);
    Work r = g->recv(got, 1 - g->rank());
    Work rs = g->reduce_scatter(in, out, ReduceOp::kSum);
    Work s = g->send(note, 1 - g->rank());
    rs.wait();
    r.wait();
    s.wait();
    const int64_t at = g->rank() * block;
    int64_t wrong = 0;
    for (int64_t i = 0; i < block; ++i) {
      const float expected = mine[at + i] + theirs[at + i];
      if (std::memcmp(&expected, out.data<float>() + i, sizeof(float)) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "block " << block;
    expect_elements(got, 0, 7, [&](int64_t i) { return value(DType::kF32, peer_world, i); });
  }
}

TEST(ProcessGroup, PointToPoint) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  if (n < 2) GTEST_SKIP();
  // A ring where everyone sends before receiving; 2^18 floats is far above the eager limit, so a
  // blocking send on the one communication thread would deadlock.
  for (int64_t count : {int64_t{1}, int64_t{1} << 18}) {
    Tensor out = input(DType::kF32, me, count);
    Tensor in = Tensor::empty({count}, DType::kF32);
    Work s = w->send(out, (me + 1) % n);
    Work r = w->recv(in, (me + n - 1) % n);
    r.wait();
    s.wait();
    const int from = (me + n - 1) % n;
    expect_elements(in, 0, count, [&](int64_t i) { return value(DType::kF32, from, i); });
  }
  // Messages between two ranks are matched in issue order.
  if (me < 2) {
    const int peer = 1 - me;
    std::vector<Tensor> got;
    std::vector<Work> works;
    for (int k = 0; k < 4; ++k) {
      if (me == 0) works.push_back(w->send(input(DType::kBF16, k, 5), peer));
      got.push_back(Tensor::empty({5}, DType::kBF16));
      if (me == 1) works.push_back(w->recv(got.back(), peer));
    }
    for (auto& x : works) x.wait();
    if (me == 1) {
      for (int k = 0; k < 4; ++k) {
        expect_elements(got[k], 0, 5, [&](int64_t i) { return value(DType::kBF16, k, i); });
      }
    }
  }
}

// The accounting counts the buffers handed to MPI, per call: worked out by hand below for a group
// of n (S = 4000 bytes of fp32). The ring formula once recorded instead (all_reduce 2(n-1)/n·S,
// reduce_scatter (n-1)/n·S, ...) differs from these at every n (at n = 1 it was 0 throughout).
TEST(ProcessGroup, CommunicationAccounting) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  std::vector<std::vector<int>> all(1);
  for (int r = 0; r < n; ++r) all[0].push_back(r);
  auto g = w->new_subgroups(all, "acct");
  Tensor f = Tensor::zeros({1000}, DType::kF32);   // 4000 bytes
  Tensor h = Tensor::zeros({1000}, DType::kBF16);  // 2000 bytes; reduced as a 4000-byte fp32 copy
  Tensor gathered = Tensor::empty({1000 * n}, DType::kF32);
  Tensor gathered16 = Tensor::empty({1000 * n}, DType::kBF16);
  g->all_reduce(f, ReduceOp::kSum);
  g->all_reduce(h, ReduceOp::kSum);
  g->all_gather(f, gathered);
  g->all_gather(h, gathered16);  // data movement: bf16 as it is
  g->reduce_scatter(gathered, f, ReduceOp::kSum);
  g->reduce_scatter(gathered16, h, ReduceOp::kSum);  // fp32 copies on both sides
  Tensor shuffled = Tensor::empty({1000 * n}, DType::kF32);
  g->all_to_all(gathered, shuffled);
  // all_to_allv: j+1 int32 elements to member j, me+1 from each member (own block included).
  std::vector<int64_t> in_counts(n), out_counts(n, me + 1);
  for (int j = 0; j < n; ++j) in_counts[j] = j + 1;
  Tensor vin = Tensor::zeros({n * (n + 1) / 2}, DType::kI32);
  Tensor vout = Tensor::zeros({n * (me + 1)}, DType::kI32);
  g->all_to_allv(vin, in_counts, vout, out_counts);
  g->broadcast(f, 0);
  g->barrier().wait();  // everything issued before it has made its MPI calls
  const CommStats s = g->stats();
  const auto expect_op = [&](OpType op, int64_t calls, int64_t sent, int64_t received) {
    SCOPED_TRACE(op_name(op));
    EXPECT_EQ(s.issued_of(op), calls);
    EXPECT_EQ(s.calls_of(op), calls);
    EXPECT_EQ(s.sent_bytes_of(op), sent);
    EXPECT_EQ(s.received_bytes_of(op), received);
  };
  expect_op(OpType::kAllReduce, 2, 4000 + 4000, 4000 + 4000);
  // The consistency check is on in this binary: its descriptor all-gathers are not counted.
  expect_op(OpType::kAllGather, 2, 4000 + 2000, 4000 * n + 2000 * n);
  expect_op(OpType::kReduceScatter, 2, 4000 * n + 4000 * n, 4000 + 4000);
  expect_op(OpType::kAllToAll, 1, 4000 * n, 4000 * n);
  expect_op(OpType::kAllToAllv, 1, 4 * n * (n + 1) / 2, 4 * n * (me + 1));
  expect_op(OpType::kBroadcast, 1, me == 0 ? 4000 : 0, me == 0 ? 0 : 4000);
  expect_op(OpType::kBarrier, 1, 0, 0);
  EXPECT_EQ(s.total_sent_bytes(),
            8000 + 6000 + 8000 * n + 4000 * n + 2 * n * (n + 1) + (me == 0 ? 4000 : 0));
  EXPECT_EQ(s.total_received_bytes(),
            8000 + 6000 * n + 8000 + 4000 * n + 4 * n * (me + 1) + (me == 0 ? 0 : 4000));
  // The ring model's volume, derived from the measured buffers (nccl-tests' S of each op).
  EXPECT_EQ(ring_bytes(OpType::kAllReduce, n, s.sent_bytes_of(OpType::kAllReduce)),
            2 * (n - 1) * 8000 / n);
  EXPECT_EQ(ring_bytes(OpType::kAllGather, n, s.received_bytes_of(OpType::kAllGather)),
            (n - 1) * 6000);
  EXPECT_EQ(ring_bytes(OpType::kBroadcast, n, 4000), 4000);
  EXPECT_EQ(ring_bytes(OpType::kBarrier, n, 0), 0);
  EXPECT_THROW(ring_bytes(OpType::kAllToAllv, n, 4000), Error);
  // The world group's counters are separate.
  w->reset_stats();
  EXPECT_EQ(w->stats().total_sent_bytes(), 0);
  EXPECT_EQ(g->stats().calls_of(OpType::kAllReduce), 2);
  if (n >= 2 && me < 2) {
    // A checked transfer hands MPI one int64 buffer: a 40-byte header, then the payload rounded
    // up to 8 bytes (10 int64 = 80 bytes -> 120; 5 bf16 = 10 bytes -> 56).
    Tensor p = Tensor::zeros({10}, DType::kI64), q = Tensor::zeros({5}, DType::kBF16);
    (me == 0 ? g->send(p, 1) : g->recv(p, 0)).wait();
    (me == 0 ? g->send(q, 1) : g->recv(q, 0)).wait();
    // Unchecked, the payload itself.
    ProcessGroup::set_check_collectives(false);
    (me == 0 ? g->send(p, 1) : g->recv(p, 0)).wait();
    ProcessGroup::set_check_collectives(true);
    const CommStats t = g->stats();
    EXPECT_EQ(t.calls_of(me == 0 ? OpType::kSend : OpType::kRecv), 3);
    EXPECT_EQ(t.calls_of(me == 0 ? OpType::kRecv : OpType::kSend), 0);
    EXPECT_EQ(t.sent_bytes_of(OpType::kSend), me == 0 ? 120 + 56 + 80 : 0);
    EXPECT_EQ(t.received_bytes_of(OpType::kRecv), me == 1 ? 120 + 56 + 80 : 0);
  }
}

TEST(ProcessGroup, CommunicationOverlapsCompute) {
  auto w = world();
  const int n = w->size();
  Tensor t = Tensor::empty({1 << 16}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 1.0f;
  Work work = w->all_reduce(t, ReduceOp::kSum);
  // Compute in chunks, asking after each whether the all-reduce completed. Had communication
  // progressed only inside wait() (no communication thread), done() could not become true here.
  // The chunk cap only bounds a broken runtime; a working one finishes long before it.
  std::vector<float> x(4096, 1.0f);
  bool done_during_compute = false;
  for (int64_t chunk = 0; chunk < 2'000'000 && !done_during_compute; ++chunk) {
    for (float& v : x) v = v * 0.999f + 0.001f;
    done_during_compute = work.done();
  }
  EXPECT_TRUE(done_during_compute);
  EXPECT_GT(x[0], 0.0f);
  work.wait();
  expect_elements(t, 0, t.numel(), [&](int64_t) { return n; });
}

TEST(ProcessGroup, WorkHandles) {
  Work none;
  EXPECT_TRUE(none.done());
  none.wait();
  auto w = world();
  Tensor t = Tensor::zeros({8}, DType::kF32);
  Work a = w->all_reduce(t, ReduceOp::kSum);
  Work b = a;  // copies share the operation
  b.wait();
  EXPECT_TRUE(a.done());
  // Operations complete in issue order.
  std::vector<Work> works;
  for (int k = 0; k < 20; ++k) works.push_back(w->all_reduce(t, ReduceOp::kMax));
  works.back().wait();
  for (auto& x : works) EXPECT_TRUE(x.done());
}

TEST(ProcessGroup, BadArgumentsThrowAtIssue) {
  auto w = world();
  const int n = w->size();
  Tensor in = Tensor::zeros({3}, DType::kF32);
  Tensor wrong = Tensor::zeros({3 * n + 1}, DType::kF32);
  EXPECT_THROW(w->all_gather(in, wrong), Error);
  EXPECT_THROW(w->reduce_scatter(wrong, in, ReduceOp::kSum), Error);
  Tensor half = Tensor::zeros({3 * n}, DType::kBF16);
  Tensor full = Tensor::zeros({3 * n}, DType::kF32);
  EXPECT_THROW(w->all_gather(in, half), Error);
  EXPECT_THROW(w->broadcast(in, n), Error);
  EXPECT_THROW(w->send(in, w->rank()), Error);
  Tensor u = Tensor::zeros({3}, DType::kU16);
  EXPECT_THROW(w->all_reduce(u, ReduceOp::kSum), Error);
  std::vector<std::vector<int>> too_many(1);
  for (int r = 0; r <= n; ++r) too_many[0].push_back(r);
  EXPECT_THROW(w->new_subgroups(too_many, "x"), Error) << "rank n is not in the group";
  if (n > 1) {
    EXPECT_THROW(w->new_subgroups({{0}}, "x"), Error) << "must cover every rank";
  }
  if (n > 1) {
    std::vector<std::vector<int>> dup(n, std::vector<int>{0});
    EXPECT_THROW(w->new_subgroups(dup, "x"), Error);
  }
  // Nothing was queued: the group still works.
  w->all_reduce(full, ReduceOp::kSum).wait();
}

TEST(ProcessGroup, MismatchDetectorNamesBothCallSites) {
  auto w = world();
  const int n = w->size(), me = w->rank();
  ASSERT_TRUE(ProcessGroup::check_collectives());
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  // Same call site, different counts on rank 0 and the others.
  Tensor t = Tensor::zeros({me == 0 ? 10 : 11}, DType::kF32);
  w->reset_stats();
  Work a = w->all_reduce(t, ReduceOp::kSum);
  try {
    a.wait();
    FAIL() << "mismatch not detected";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("collective mismatch on group 'world'"), std::string::npos) << m;
    EXPECT_NE(m.find("count 10"), std::string::npos) << m;
    EXPECT_NE(m.find("count 11"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 called all_reduce"), std::string::npos) << m;
  }
  // The refused operation was issued but handed MPI nothing.
  EXPECT_EQ(w->stats().issued_of(OpType::kAllReduce), 1);
  EXPECT_EQ(w->stats().calls_of(OpType::kAllReduce), 0);
  EXPECT_EQ(w->stats().total_sent_bytes(), 0);
  // Different operations from different lines: both call sites are named, on every rank.
  Tensor u = Tensor::zeros({4}, DType::kF32);
  // clang-format off: the two calls must stay on consecutive lines
  const int line_reduce = __LINE__ + 1;
  Work b = me == 0 ? w->all_reduce(u, ReduceOp::kMax)
                   : w->broadcast(u, 0);
  // clang-format on
  const int line_bcast = line_reduce + 1;
  try {
    b.wait();
    FAIL() << "mismatch not detected";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("process_group_test.cc:" + std::to_string(line_reduce)), std::string::npos)
        << m;
    EXPECT_NE(m.find("process_group_test.cc:" + std::to_string(line_bcast)), std::string::npos)
        << m;
    EXPECT_NE(m.find("but rank 1 called broadcast"), std::string::npos) << m;
  }
  // The mismatched operations were skipped everywhere, so the group is still in step.
  Tensor v = Tensor::empty({5}, DType::kI32);
  for (int i = 0; i < 5; ++i) v.data<int32_t>()[i] = me;
  w->all_reduce(v, ReduceOp::kSum).wait();
  EXPECT_EQ(v.data<int32_t>()[4], n * (n - 1) / 2);
}

// Checked transfers (the consistency check is on in this binary): tags keep messages apart
// whatever order they are received in, and a receive that does not match its send (dtype or
// count) fails with both descriptions instead of delivering garbage.
TEST(ProcessGroup, PointToPointTagsAndChecks) {
  auto w = world();
  const int me = w->rank();
  ASSERT_TRUE(ProcessGroup::check_collectives());
  if (w->size() < 2) GTEST_SKIP();
  if (me == 0) {
    Work a = w->send(input(DType::kF32, 1, 6), 1, /*tag=*/1);
    Work b = w->send(input(DType::kF32, 2, 6), 1, /*tag=*/2);
    a.wait();
    b.wait();
  } else if (me == 1) {
    Tensor two = Tensor::empty({6}, DType::kF32), one = Tensor::empty({6}, DType::kF32);
    w->recv(two, 0, 2).wait();  // received before tag 1, though sent after it
    w->recv(one, 0, 1).wait();
    expect_elements(one, 0, 6, [&](int64_t i) { return value(DType::kF32, 1, i); });
    expect_elements(two, 0, 6, [&](int64_t i) { return value(DType::kF32, 2, i); });
  }
  const int send_line = __LINE__ + 2;
  if (me == 0) {
    w->send(input(DType::kBF16, 3, 4), 1, 7).wait();  // 4 bf16 elements...
  } else if (me == 1) {
    Tensor t = Tensor::empty({5}, DType::kF32);  // ...received as 5 fp32 ones
    try {
      w->recv(t, 0, 7).wait();
      FAIL() << "mismatch not detected";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(
          m.find("got message #0 of 4 elements of bf16 (sent at line " + std::to_string(send_line)),
          std::string::npos)
          << m;
      EXPECT_NE(m.find("recv from rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("do not match"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace tessera::comm

int main(int argc, char** argv) {
  tessera::comm::ProcessGroup::world();
  tessera::comm::ProcessGroup::set_check_collectives(true);
  // A failing test may leave ranks out of step; the watchdog then ends the job in a minute.
  tessera::comm::ProcessGroup::set_timeout(60);
  return tessera::testing::run_distributed_tests(argc, argv);
}
