#include "tessera/comm/process_group.h"

#include <mpi.h>

#include <cstring>
#include <map>
#include <mutex>
#include <numeric>

#include "tessera/comm/counted_mpi.h"
#include "tessera/comm/flight_recorder.h"
#include "tessera/comm/runtime.h"
#include "tessera/comm/sixteen_bit_reduction.h"

namespace tessera::comm {

using detail::counted_allgather;
using detail::counted_allreduce;
using detail::counted_alltoall;
using detail::counted_alltoallv;
using detail::counted_barrier;
using detail::counted_bcast;
using detail::counted_reduce_scatter;
using detail::Counters;
using detail::mpi_bytes;
using detail::Runtime;

const char* op_name(OpType op) {
  switch (op) {
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kAllToAll:
      return "all_to_all";
    case OpType::kAllToAllv:
      return "all_to_allv";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kCount:
      break;
  }
  return "?";
}

void Work::wait() const {
  if (!state_) return;
  if (!state_->done.load(std::memory_order_acquire)) {
    if (detail::Runtime* rt = detail::Runtime::running()) rt->try_run_inline(state_);
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  if (state_->failed) throw Error(state_->error);
}

bool Work::done() const { return !state_ || state_->done.load(std::memory_order_acquire); }

struct ProcessGroup::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // freed by MPI_Finalize (freeing is collective; see shutdown)
  std::shared_ptr<const detail::GroupInfo> info;  // shared by this group's tasks
  mutable std::mutex mu;  // orders issue: sequence numbers and queue order agree
  int64_t seq = 0;        // collectives issued on this group
  int64_t subgroups_made = 0;
  // Checked point-to-point transfers (check_collectives()): messages sent to / received from
  // each (peer, tag) so far.
  std::map<std::pair<int, int>, int64_t> sent, received;
  std::shared_ptr<Counters> counters = std::make_shared<Counters>();
};

namespace {

// splitmix64: group ids must agree across ranks, so they are derived, never random.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kWorldId = 0x7e55e7a0000001ull;

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kBF16:
    case DType::kF16:
    case DType::kU16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

bool is_half(DType d) { return d == DType::kBF16 || d == DType::kF16; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

const char* reduce_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

std::string site_str(const char* path, unsigned line) {
  const char* slash = std::strrchr(path, '/');
  return std::string(slash ? slash + 1 : path) + ":" + std::to_string(line);
}

std::string site_str(const std::source_location& w) { return site_str(w.file_name(), w.line()); }

// The fixed-size descriptor compared by the collective consistency check.
struct Descriptor {
  int64_t seq;
  int64_t count;
  int32_t op;
  int32_t dtype;
  int32_t root;
  int32_t reduce;
  char site[224];
};

std::string describe(const Descriptor& d) {
  std::string s = std::string(op_name(static_cast<OpType>(d.op))) + "(" +
                  dtype_name(static_cast<DType>(d.dtype));
  if (d.count >= 0) s += ", count " + std::to_string(d.count);
  if (d.root >= 0) s += ", root " + std::to_string(d.root);
  if (d.reduce >= 0) s += std::string(", ") + reduce_name(static_cast<ReduceOp>(d.reduce % 16));
  if (d.reduce >= 16) s += d.reduce / 16 == 1 ? " in bf16" : " in fp16";
  return s + ") at " + d.site;
}

void check_consistency(MPI_Comm comm, const std::string& group, int size, const Descriptor& mine) {
  std::vector<Descriptor> all(size);
  MPI_Allgather(&mine, sizeof(Descriptor), MPI_BYTE, all.data(), sizeof(Descriptor), MPI_BYTE,
                comm);
  for (int r = 1; r < size; ++r) {
    const Descriptor& a = all[0];
    const Descriptor& b = all[r];
    if (a.seq != b.seq || a.count != b.count || a.op != b.op || a.dtype != b.dtype ||
        a.root != b.root || a.reduce != b.reduce) {
      throw Error("collective mismatch on group '" + group + "' at its collective #" +
                  std::to_string(a.seq) + ": rank 0 called " + describe(a) + " but rank " +
                  std::to_string(r) + " called " + describe(b));
    }
  }
}

// Argument checks run on every issue; as a macro the message is built only when one fails
// (building every message eagerly cost ~0.5 us per issue, measured at 1 KiB: 0.72 -> 0.25 us).
#define REQUIRE(ok, message)         \
  do {                               \
    if (!(ok)) throw Error(message); \
  } while (0)

void require_defined(const Tensor& t, const char* what, const char* op) {
  REQUIRE(t.defined(), std::string(op) + ": " + what + " tensor is undefined");
}

void require_reducible(DType d, const char* op) {
  REQUIRE(d != DType::kU16, std::string(op) + ": no reductions on uint16 tensors");
}

// reduce_scatter's input and output: one dtype, the input `n` times the output.
void require_scatter_shapes(const Tensor& in, const Tensor& out, int n, const std::string& group) {
  REQUIRE(in.dtype() == out.dtype(), "reduce_scatter: input is " +
                                         std::string(dtype_name(in.dtype())) + " but output is " +
                                         dtype_name(out.dtype()));
  REQUIRE(in.numel() == n * out.numel(), "reduce_scatter: input has " + std::to_string(in.numel()) +
                                             " elements, expected " + std::to_string(n) + " x " +
                                             std::to_string(out.numel()) + " on group '" + group +
                                             "'");
}

// A reduction in 16 bits: an fp32 tensor summed in bf16 or fp16, or a 16-bit one in its own type.
void require_sum_dtype(DType tensor, DType sum_dtype, const char* op) {
  REQUIRE((sum_dtype == DType::kBF16 || sum_dtype == DType::kF16) &&
              (tensor == DType::kF32 || tensor == sum_dtype),
          std::string(op) + ": a " + dtype_name(tensor) + " tensor cannot be summed in " +
              dtype_name(sum_dtype) +
              " (an fp32 tensor in bf16 or fp16; a 16-bit one in its own "
              "type)");
}

// The consistency check's `reduce` field: the operation, and the 16-bit type it sums in.
int reduce_code(ReduceOp op, DType sum_dtype) {
  return static_cast<int>(op) + 16 * (sum_dtype == DType::kF32    ? 0
                                      : sum_dtype == DType::kBF16 ? 1
                                                                  : 2);
}

}  // namespace

std::string detail::TaskInfo::describe() const {
  std::string s = op;
  if (!label.empty()) s += "('" + label + "')";
  if (peer >= 0) s += " rank " + std::to_string(peer);
  if (seq > 0) s += " #" + std::to_string(seq);
  if (count >= 0) {
    s += std::string(" (") + dtype_name(dtype) + ", " + std::to_string(count) + " elements, at " +
         site_str(file ? file : "?", line) + ")";
  } else if (file) {
    s += std::string(" (in ") + file + ")";
  }
  return s;
}

ProcessGroup::ProcessGroup(int rank, std::unique_ptr<Impl> impl)
    : rank_(rank), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::size() const { return static_cast<int>(impl_->info->members.size()); }
const std::vector<int>& ProcessGroup::world_ranks() const { return impl_->info->members; }
const std::string& ProcessGroup::name() const { return impl_->info->name; }

std::shared_ptr<ProcessGroup> ProcessGroup::world() {
  static std::mutex mu;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard<std::mutex> lock(mu);
  if (!world) {
    Runtime& rt = Runtime::get();
    auto impl = std::make_unique<Impl>();
    impl->comm = rt.world_comm();
    std::vector<int> ranks(rt.world_size());
    std::iota(ranks.begin(), ranks.end(), 0);
    impl->info = rt.register_group("world", kWorldId, std::move(ranks));
    world = std::make_shared<ProcessGroup>(rt.world_rank(), std::move(impl));
  }
  return world;
}

void ProcessGroup::set_check_collectives(bool on) { Runtime::get().check_collectives = on; }
bool ProcessGroup::check_collectives() { return Runtime::get().check_collectives; }
void ProcessGroup::set_timeout(double seconds) {
  REQUIRE(seconds > 0, "distributed timeout must be positive, got " + std::to_string(seconds));
  Runtime::get().timeout_seconds = seconds;
}
double ProcessGroup::timeout() { return Runtime::get().timeout_seconds; }
void ProcessGroup::set_flight_recorder(const std::string& dir, int64_t entries) {
  REQUIRE(entries >= 0, "flight recorder size must be >= 0, got " + std::to_string(entries));
  Runtime& rt = Runtime::get();
  detail::FlightRecorder::instance().configure(entries, dir, rt.world_rank(), rt.world_size());
}

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(impl_->counters->mu);
  return impl_->counters->stats;
}

void ProcessGroup::reset_stats() {
  std::lock_guard<std::mutex> lock(impl_->counters->mu);
  impl_->counters->stats = CommStats{};
}

Work ProcessGroup::enqueue_collective(OpType op, DType dtype, int64_t count, int root, int reduce,
                                      const std::source_location& where,
                                      std::function<void()> run) {
  // `run` holds copies of the Tensor handles, which keeps their storage alive until the task
  // is finished (the Work contract in process_group.h).
  Runtime& rt = Runtime::get();
  detail::Task task;
  task.info.group = impl_->info;
  task.info.op = op_name(op);
  task.info.count = count;
  task.info.dtype = dtype;
  task.info.file = where.file_name();
  task.info.line = where.line();
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t seq = ++impl_->seq;
  task.info.seq = seq;
  const int i = static_cast<int>(op);
  impl_->counters->issue(op);
  if (rt.check_collectives) {
    Descriptor d{};
    d.seq = seq;
    d.count = op == OpType::kAllToAllv ? -1 : count;
    d.op = i;
    d.dtype = static_cast<int32_t>(dtype);
    d.root = root;
    d.reduce = reduce;
    std::string site = site_str(where);
    std::strncpy(d.site, site.c_str(), sizeof d.site - 1);
    task.run = [comm = impl_->comm, name = name(), size = size(), d, run = std::move(run)] {
      check_consistency(comm, name, size, d);
      run();
    };
  } else {
    task.run = std::move(run);
  }
  return rt.submit(std::move(task));
}

Work ProcessGroup::all_reduce(Tensor& t, ReduceOp op, std::source_location where) {
  require_defined(t, "input", "all_reduce");
  require_reducible(t.dtype(), "all_reduce");
  const int count = detail::mpi_count(t.numel(), "all_reduce");
  MPI_Comm comm = impl_->comm;
  const int n = size();
  Tensor tt = t;
  auto run = [=, c = impl_->counters]() mutable {
    if (is_half(tt.dtype())) {
      // Accumulate in fp32: convert, reduce, round back once.
      Tensor buf = tt.to(DType::kF32, MemoryCategory::kComm);
      counted_allreduce(*c, buf.raw(), count, MPI_FLOAT, mpi_op(op), n, comm);
      tt.copy_from(buf);
    } else {
      counted_allreduce(*c, tt.raw(), count, mpi_type(tt.dtype()), mpi_op(op), n, comm);
    }
  };
  return enqueue_collective(OpType::kAllReduce, t.dtype(), t.numel(), -1, static_cast<int>(op),
                            where, std::move(run));
}

Work ProcessGroup::all_reduce(Tensor& t, ReduceOp op, DType sum_dtype, std::source_location where) {
  if (sum_dtype == DType::kF32) return all_reduce(t, op, where);
  require_defined(t, "input", "all_reduce");
  require_sum_dtype(t.dtype(), sum_dtype, "all_reduce");
  const int count = detail::mpi_count(t.numel(), "all_reduce");
  MPI_Comm comm = impl_->comm;
  const int n = size();
  Tensor tt = t;
  auto run = [=, c = impl_->counters]() mutable {
    if (tt.dtype() == sum_dtype)
      detail::all_reduce_sixteen_bit(*c, tt.raw(), count, sum_dtype, op, n, comm);
    else
      detail::all_reduce_fp32_in_sixteen_bits(*c, tt.data<float>(), count, sum_dtype, op, n, comm);
  };
  return enqueue_collective(OpType::kAllReduce, t.dtype(), t.numel(), -1,
                            reduce_code(op, sum_dtype), where, std::move(run));
}

Work ProcessGroup::all_gather(const Tensor& in, Tensor& out, std::source_location where) {
  require_defined(in, "input", "all_gather");
  require_defined(out, "output", "all_gather");
  REQUIRE(in.dtype() == out.dtype(), "all_gather: input is " + std::string(dtype_name(in.dtype())) +
                                         " but output is " + dtype_name(out.dtype()));
  REQUIRE(out.numel() == size() * in.numel(),
          "all_gather: output has " + std::to_string(out.numel()) + " elements, expected " +
              std::to_string(size()) + " x " + std::to_string(in.numel()) + " on group '" + name() +
              "'");
  const int count = detail::mpi_count(in.numel(), "all_gather");
  const int n = size();
  MPI_Comm comm = impl_->comm;
  Tensor a = in, b = out;
  auto run = [=, c = impl_->counters]() mutable {
    counted_allgather(*c, a.raw(), b.raw(), count, mpi_type(a.dtype()), n, comm);
  };
  return enqueue_collective(OpType::kAllGather, in.dtype(), in.numel(), -1, -1, where,
                            std::move(run));
}

Work ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op,
                                  std::source_location where) {
  require_defined(in, "input", "reduce_scatter");
  require_defined(out, "output", "reduce_scatter");
  require_reducible(in.dtype(), "reduce_scatter");
  require_scatter_shapes(in, out, size(), name());
  const int count = detail::mpi_count(out.numel(), "reduce_scatter");
  const int n = size();
  MPI_Comm comm = impl_->comm;
  Tensor a = in, b = out;
  auto run = [=, c = impl_->counters]() mutable {
    if (is_half(a.dtype())) {
      Tensor a32 = a.to(DType::kF32, MemoryCategory::kComm);
      Tensor b32 = Tensor::empty({b.numel()}, DType::kF32, MemoryCategory::kComm);
      counted_reduce_scatter(*c, a32.raw(), b32.raw(), count, MPI_FLOAT, mpi_op(op), n, comm);
      b.copy_from(b32);
    } else {
      counted_reduce_scatter(*c, a.raw(), b.raw(), count, mpi_type(a.dtype()), mpi_op(op), n, comm);
    }
  };
  return enqueue_collective(OpType::kReduceScatter, in.dtype(), out.numel(), -1,
                            static_cast<int>(op), where, std::move(run));
}

Work ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, DType sum_dtype,
                                  std::source_location where) {
  if (sum_dtype == DType::kF32) return reduce_scatter(in, out, op, where);
  require_defined(in, "input", "reduce_scatter");
  require_defined(out, "output", "reduce_scatter");
  require_sum_dtype(in.dtype(), sum_dtype, "reduce_scatter");
  require_scatter_shapes(in, out, size(), name());
  const int count = detail::mpi_count(out.numel(), "reduce_scatter");
  const int n = size();
  MPI_Comm comm = impl_->comm;
  Tensor a = in, b = out;
  auto run = [=, c = impl_->counters]() mutable {
    if (a.dtype() == sum_dtype)
      detail::reduce_scatter_sixteen_bit(*c, a.raw(), b.raw(), count, sum_dtype, op, n, comm);
    else
      detail::reduce_scatter_fp32_in_sixteen_bits(*c, a.data<float>(), b.data<float>(), count,
                                                  sum_dtype, op, n, comm);
  };
  return enqueue_collective(OpType::kReduceScatter, in.dtype(), out.numel(), -1,
                            reduce_code(op, sum_dtype), where, std::move(run));
}

Work ProcessGroup::all_to_all(const Tensor& in, Tensor& out, std::source_location where) {
  require_defined(in, "input", "all_to_all");
  require_defined(out, "output", "all_to_all");
  REQUIRE(in.dtype() == out.dtype(), "all_to_all: input is " + std::string(dtype_name(in.dtype())) +
                                         " but output is " + dtype_name(out.dtype()));
  REQUIRE(in.numel() == out.numel() && in.numel() % size() == 0,
          "all_to_all: input (" + std::to_string(in.numel()) + ") and output (" +
              std::to_string(out.numel()) +
              ") must have the same number of elements, divisible "
              "by the size of group '" +
              name() + "' (" + std::to_string(size()) + ")");
  const int count = detail::mpi_count(in.numel() / size(), "all_to_all");
  const int n = size();
  MPI_Comm comm = impl_->comm;
  Tensor a = in, b = out;
  auto run = [=, c = impl_->counters]() mutable {
    counted_alltoall(*c, a.raw(), b.raw(), count, mpi_type(a.dtype()), n, comm);
  };
  return enqueue_collective(OpType::kAllToAll, in.dtype(), in.numel(), -1, -1, where,
                            std::move(run));
}

Work ProcessGroup::all_to_allv(const Tensor& in, const std::vector<int64_t>& in_counts, Tensor& out,
                               const std::vector<int64_t>& out_counts, std::source_location where) {
  require_defined(in, "input", "all_to_allv");
  require_defined(out, "output", "all_to_allv");
  REQUIRE(in.dtype() == out.dtype(), "all_to_allv: input is " +
                                         std::string(dtype_name(in.dtype())) + " but output is " +
                                         dtype_name(out.dtype()));
  const int n = size();
  REQUIRE(
      static_cast<int>(in_counts.size()) == n && static_cast<int>(out_counts.size()) == n,
      "all_to_allv: need " + std::to_string(n) + " counts per direction on group '" + name() + "'");
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  int64_t s_total = 0, r_total = 0;
  for (int j = 0; j < n; ++j) {
    REQUIRE(in_counts[j] >= 0 && out_counts[j] >= 0, "all_to_allv: negative count");
    sc[j] = detail::mpi_count(in_counts[j], "all_to_allv");
    rc[j] = detail::mpi_count(out_counts[j], "all_to_allv");
    sd[j] = detail::mpi_count(s_total, "all_to_allv displacement");
    rd[j] = detail::mpi_count(r_total, "all_to_allv displacement");
    s_total += in_counts[j];
    r_total += out_counts[j];
  }
  REQUIRE(s_total <= in.numel() && r_total <= out.numel(),
          "all_to_allv: counts sum to " + std::to_string(s_total) + " sent / " +
              std::to_string(r_total) + " received but the tensors hold " +
              std::to_string(in.numel()) + " / " + std::to_string(out.numel()));
  MPI_Comm comm = impl_->comm;
  Tensor a = in, b = out;
  auto run = [=, c = impl_->counters]() mutable {
    counted_alltoallv(*c, a.raw(), sc, sd, b.raw(), rc, rd, mpi_type(a.dtype()), comm);
  };
  return enqueue_collective(OpType::kAllToAllv, in.dtype(), s_total, -1, -1, where, std::move(run));
}

Work ProcessGroup::broadcast(Tensor& t, int root, std::source_location where) {
  require_defined(t, "input", "broadcast");
  REQUIRE(root >= 0 && root < size(), "broadcast: root " + std::to_string(root) +
                                          " is not a rank of group '" + name() + "' (size " +
                                          std::to_string(size()) + ")");
  const int count = detail::mpi_count(t.numel(), "broadcast");
  MPI_Comm comm = impl_->comm;
  Tensor tt = t;
  const bool is_root = rank_ == root;
  auto run = [=, c = impl_->counters]() mutable {
    counted_bcast(*c, tt.raw(), count, mpi_type(tt.dtype()), root, is_root, comm);
  };
  return enqueue_collective(OpType::kBroadcast, t.dtype(), t.numel(), root, -1, where,
                            std::move(run));
}

Work ProcessGroup::barrier(std::source_location where) {
  MPI_Comm comm = impl_->comm;
  return enqueue_collective(OpType::kBarrier, DType::kF32, 0, -1, -1, where,
                            [comm, c = impl_->counters] { counted_barrier(*c, comm); });
}

namespace {

detail::Task p2p_task(OpType op, std::shared_ptr<const detail::GroupInfo> group, const Tensor& t,
                      int peer, const std::source_location& where) {
  detail::Task task;
  task.info.op = op == OpType::kSend ? "send to" : "recv from";
  task.info.peer = peer;
  task.info.peer_world = group->members[peer];
  task.info.group = std::move(group);
  task.info.count = t.numel();
  task.info.dtype = t.dtype();
  task.info.file = where.file_name();
  task.info.line = where.line();
  return task;
}

}  // namespace

namespace {

// A checked transfer travels as one int64 message: this header, then the payload's bytes.
constexpr int kP2pHeader = 5;  // magic, message number on (peer, tag), count, dtype, line
constexpr int64_t kP2pMagic = 0x7e55e7a02b2b;

int64_t packed_elems(const Tensor& t) {
  return kP2pHeader + (static_cast<int64_t>(t.nbytes()) + 7) / 8;
}

}  // namespace

Work ProcessGroup::send(const Tensor& t, int peer, int tag, std::source_location where) {
  require_defined(t, "input", "send");
  REQUIRE(tag >= 0 && tag < 32768, "send: tag " + std::to_string(tag) + " is not in [0, 32768)");
  REQUIRE(peer >= 0 && peer < size() && peer != rank_,
          "send: peer " + std::to_string(peer) + " is not another rank of group '" + name() + "'");
  const int count = detail::mpi_count(t.numel(), "send");
  detail::Task task = p2p_task(OpType::kSend, impl_->info, t, peer, where);
  MPI_Comm comm = impl_->comm;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (check_collectives()) {
    // The receiver compares the header with what it expects (collective consistency check).
    Tensor packed = Tensor::zeros({packed_elems(t)}, DType::kI64, MemoryCategory::kComm);
    int64_t* h = packed.data<int64_t>();
    h[0] = kP2pMagic;
    h[1] = impl_->sent[{peer, tag}]++;
    h[2] = t.numel();
    h[3] = static_cast<int64_t>(t.dtype());
    h[4] = where.line();
    std::memcpy(h + kP2pHeader, t.raw(), t.nbytes());
    const int n = detail::mpi_count(packed.numel(), "send");
    task.start_nonblocking = [packed, n, peer, tag, comm, c = impl_->counters] {
      c->call(OpType::kSend, mpi_bytes(n, MPI_INT64_T), 0);
      MPI_Request r;
      MPI_Isend(packed.raw(), n, MPI_INT64_T, peer, tag, comm, &r);
      return r;
    };
  } else {
    task.start_nonblocking = [t, count, peer, tag, comm, c = impl_->counters] {
      c->call(OpType::kSend, mpi_bytes(count, mpi_type(t.dtype())), 0);
      MPI_Request r;
      MPI_Isend(t.raw(), count, mpi_type(t.dtype()), peer, tag, comm, &r);
      return r;
    };
  }
  impl_->counters->issue(OpType::kSend);
  return Runtime::get().submit(std::move(task));
}

Work ProcessGroup::recv(Tensor& t, int peer, int tag, std::source_location where) {
  require_defined(t, "output", "recv");
  REQUIRE(tag >= 0 && tag < 32768, "recv: tag " + std::to_string(tag) + " is not in [0, 32768)");
  REQUIRE(peer >= 0 && peer < size() && peer != rank_,
          "recv: peer " + std::to_string(peer) + " is not another rank of group '" + name() + "'");
  const int count = detail::mpi_count(t.numel(), "recv");
  detail::Task task = p2p_task(OpType::kRecv, impl_->info, t, peer, where);
  MPI_Comm comm = impl_->comm;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (check_collectives()) {
    // A shorter message shows in the header; a longer one is MPI's truncation error.
    Tensor packed = Tensor::zeros({packed_elems(t)}, DType::kI64, MemoryCategory::kComm);
    const int n = detail::mpi_count(packed.numel(), "recv");
    task.start_nonblocking = [packed, n, peer, tag, comm, c = impl_->counters]() mutable {
      c->call(OpType::kRecv, 0, mpi_bytes(n, MPI_INT64_T));
      MPI_Request r;
      MPI_Irecv(packed.raw(), n, MPI_INT64_T, peer, tag, comm, &r);
      return r;
    };
    const int64_t number = impl_->received[{peer, tag}]++;
    const std::string mine = task.info.describe();
    task.on_complete = [packed, t, number, mine]() mutable -> std::string {
      const int64_t* h = packed.data<int64_t>();
      const bool match = h[0] == kP2pMagic && h[1] == number && h[2] == t.numel() &&
                         h[3] == static_cast<int64_t>(t.dtype());
      if (match) {
        std::memcpy(t.raw(), h + kP2pHeader, t.nbytes());
        return {};
      }
      if (h[0] != kP2pMagic) return mine + ": the message is not a checked transfer";
      return mine + " got message #" + std::to_string(h[1]) + " of " + std::to_string(h[2]) +
             " elements of " + dtype_name(static_cast<DType>(h[3])) + " (sent at line " +
             std::to_string(h[4]) + "), expected message #" + std::to_string(number) +
             ": sends and receives between these ranks do not match";
    };
  } else {
    task.start_nonblocking = [t, count, peer, tag, comm, c = impl_->counters]() mutable {
      c->call(OpType::kRecv, 0, mpi_bytes(count, mpi_type(t.dtype())));
      MPI_Request r;
      MPI_Irecv(t.raw(), count, mpi_type(t.dtype()), peer, tag, comm, &r);
      return r;
    };
  }
  impl_->counters->issue(OpType::kRecv);
  return Runtime::get().submit(std::move(task));
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_subgroups(
    const std::vector<std::vector<int>>& partition, const std::string& name) {
  const int n = size();
  std::vector<int> color_of(n, -1), key_of(n, -1);
  for (size_t c = 0; c < partition.size(); ++c) {
    REQUIRE(!partition[c].empty(),
            "new_subgroups('" + name + "'): part " + std::to_string(c) + " is empty");
    for (size_t k = 0; k < partition[c].size(); ++k) {
      const int r = partition[c][k];
      REQUIRE(r >= 0 && r < n, "new_subgroups('" + name + "'): rank " + std::to_string(r) +
                                   " is not in group '" + this->name() + "' (size " +
                                   std::to_string(n) + ")");
      REQUIRE(color_of[r] < 0,
              "new_subgroups('" + name + "'): rank " + std::to_string(r) + " is in two parts");
      color_of[r] = static_cast<int>(c);
      key_of[r] = static_cast<int>(k);
    }
  }
  for (int r = 0; r < n; ++r) {
    REQUIRE(color_of[r] >= 0, "new_subgroups('" + name + "'): rank " + std::to_string(r) +
                                  " of group '" + this->name() + "' is in no part");
  }
  const int color = color_of[rank_], key = key_of[rank_];
  std::vector<int> ranks;
  for (int r : partition[color]) ranks.push_back(world_ranks()[r]);

  auto impl = std::make_unique<Impl>();
  Runtime& rt = Runtime::get();
  detail::Task task;
  task.info.group = impl_->info;
  task.info.op = "new_subgroups";
  task.info.label = name;
  MPI_Comm parent = impl_->comm;
  MPI_Comm* out = &impl->comm;
  task.run = [parent, color, key, out] { MPI_Comm_split(parent, color, key, out); };
  uint64_t id;
  Work w;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const int64_t seq = ++impl_->seq;
    task.info.seq = seq;
    id = mix(mix(impl_->info->id ^ static_cast<uint64_t>(++impl_->subgroups_made)) +
             static_cast<uint64_t>(color));
    w = rt.submit(std::move(task));
  }
  w.wait();
  impl->info = rt.register_group(name, id, std::move(ranks));
  return std::make_shared<ProcessGroup>(key, std::move(impl));
}

}  // namespace tessera::comm
