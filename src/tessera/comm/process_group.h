// ProcessGroup: collectives and point-to-point transfers between the ranks of an MPI job.
//
// Runtime model (see docs/distributed.md):
//  - The first ProcessGroup::world() call initialises MPI with MPI_THREAD_MULTIPLE (required:
//    the communication thread runs the operations while a watchdog thread polls a separate
//    control communicator and may end the job; Open MPI 4.1 provides it) and starts two
//    threads per process: the communication thread and the watchdog.
//  - Every operation is queued and executed in issue order on the ONE communication thread of
//    the process (the CPU analogue of a CUDA communication stream), so computation on the
//    caller's threads overlaps communication whatever MPI's progress engine does. (Shortcut:
//    wait() on a collective that has not started, at the head of an idle queue, runs it on the
//    waiting thread, in the same order. Issuing does not preempt the caller to start the
//    communication thread, see runtime.cc: when every core is busy, an operation the caller
//    does not wait for starts at the next scheduler tick at the latest.) Only the
//    communication thread calls MPI for data transfers and group creation; the watchdog uses
//    its own duplicated communicator (nonblocking calls only), and ending the job (MPI_Abort,
//    or under Open MPI's mpirun a plain exit, which mpirun turns into killing every rank) may
//    happen on any thread.
//  - Each call returns a Work handle at once. The caller's tensors (their storage) must stay
//    alive and must not be modified (nor, for outputs, read) until wait() returns or done() is
//    true. Copying a Tensor handle into the call is what keeps storage alive here: the
//    operation holds a copy of every Tensor handle it was given until it completes, so only
//    concurrent writes/reads are the caller's responsibility.
//  - Collectives must be issued in the same order on every member of a group (as with MPI and
//    NCCL). Issuing from several threads on one group is allowed but their order is then the
//    order in which the calls took the group's lock.
//  - 16-bit floating-point reductions (all_reduce, reduce_scatter on bf16/fp16) accumulate in
//    fp32: the input is converted to an fp32 buffer (MemoryCategory::kComm), reduced by MPI in
//    fp32 and converted back (round to nearest even), so the result is the correctly rounded
//    fp32 sum/max and does not depend on the reduction order beyond fp32 rounding. Such a
//    reduction hands MPI fp32 buffers (twice the tensor's bytes; see CommStats).
//  - Reductions in 16 bits, asked for by the `sum_dtype` overloads of all_reduce and
//    reduce_scatter (DeepSpeed's communication_data_type, Megatron's --grad-reduce-in-bf16 and
//    its 16-bit tensor-parallel reductions): the values are sent as bf16 or fp16 and every
//    partial sum the reduction forms is rounded to that type (nearest even), as NCCL does. Half
//    the bytes of an fp32 reduction; the result depends on MPI's reduction order and, for more
//    than two members, is not the correctly rounded sum. A 16-bit tensor is reduced in place in
//    its own type; an fp32 one goes through 16-bit copies of at most kSixteenBitPieceElements
//    elements at a time (MemoryCategory::kComm, sixteen_bit_reduction_scratch_bytes) and gets
//    the 16-bit result widened back exactly. With two members every element is round(round(a) +
//    round(b)): the bits do not depend on the algorithm.
//  - Supported dtypes: fp32, bf16, fp16 for everything; int32 and int64 for everything
//    (reductions in integer arithmetic); uint16 for data movement only (no reductions).
//  - Bad arguments (mismatched sizes or dtypes, a peer or root out of range) throw
//    tessera::Error from the issuing call, before anything is queued.
//  - A single call moves at most 2^31-1 elements per peer (MPI's int counts).
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::comm {

enum class ReduceOp { kSum, kMax };

// Operation types, for accounting and messages.
enum class OpType {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllv,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kCount
};
const char* op_name(OpType op);  // "all_reduce", "all_gather", ...

// Handle to a queued operation. Copies share the same operation. A default-constructed Work is
// already done. Thread-safe.
class Work {
 public:
  Work() = default;
  // Blocks until the operation completed. If it failed (e.g. the collective consistency check
  // found a mismatch) rethrows the failure as tessera::Error, on every call.
  void wait() const;
  // True once the operation completed (successfully or not); never blocks.
  bool done() const;

  struct State;  // implementation detail (process_group.cc)
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// Communication accounting of one group: what this rank handed to MPI, per operation type.
//  - issued[op]: operations issued on the group (counted by the issuing call, whether or not
//    they have run yet; one that the collective consistency check refuses counts here only).
//  - calls[op]: the MPI calls made to move those operations' data (MPI_Allreduce,
//    MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall(v), MPI_Bcast, MPI_Isend, MPI_Irecv,
//    MPI_Barrier), each counted on the thread that makes it, just before it is made. One per
//    operation today; an operation split into several MPI calls counts each. (A two-rank fp32
//    sum reduce_scatter with 1 MiB or more a block runs as chunked exchanges instead of the one
//    MPI call, comm/pair_reduction.h: counted as that call, with its bytes.)
//  - sent_bytes[op] / received_bytes[op]: for each of those calls, count × size of the MPI
//    datatype of the buffer MPI reads from (send side) and of the one it writes to (receive
//    side), as passed to MPI. With n the group size and S the bytes of the full tensor as MPI
//    gets it (for 16-bit all_reduce and reduce_scatter, the fp32 copies of the precision rule
//    above: twice the tensor's bytes; 16-bit data movement passes the tensor itself):
//      all_reduce      S / S           (in place: one buffer, read and written)
//      all_gather      S/n / S         (the input / the output, this rank's own block included)
//      reduce_scatter  S / S/n         (the input / the output)
//      all_to_all      S / S           (own block included)
//      all_to_allv     sum(in_counts) / sum(out_counts) elements (own block included)
//      broadcast       S / 0 on the root, 0 / S elsewhere
//      send            S / 0; recv 0 / S (the buffer's capacity). With the consistency check
//                      on, the one int64 buffer actually passed: 40-byte header + S rounded up
//                      to 8 bytes.
//      barrier         0 / 0
// Not counted: the consistency check's descriptor all-gather, the watchdog's control messages,
// group creation and shutdown, and whatever MPI moves internally to carry out a call (the ring
// or tree steps on the links, intermediate copies): for the link volume of a bandwidth-optimal
// algorithm see ring_bytes(). After wait() returns on an operation, its calls are counted, and
// so are those of every operation issued before it in the process (they run in issue order).
struct CommStats {
  static constexpr int kOps = static_cast<int>(OpType::kCount);
  std::array<int64_t, kOps> issued{};
  std::array<int64_t, kOps> calls{};
  std::array<int64_t, kOps> sent_bytes{};
  std::array<int64_t, kOps> received_bytes{};

  int64_t issued_of(OpType op) const { return issued[static_cast<int>(op)]; }
  int64_t calls_of(OpType op) const { return calls[static_cast<int>(op)]; }
  int64_t sent_bytes_of(OpType op) const { return sent_bytes[static_cast<int>(op)]; }
  int64_t received_bytes_of(OpType op) const { return received_bytes[static_cast<int>(op)]; }
  int64_t total_sent_bytes() const;      // over every operation type
  int64_t total_received_bytes() const;  // over every operation type
};

// A model, not a measurement: the bytes ONE rank sends over the links for one operation on a
// group of n under the bandwidth-optimal (ring) algorithm, for an operation on a full buffer of
// `full_bytes` = S (nccl-tests' convention: the all_reduce tensor, the all_gather output, the
// reduce_scatter and all_to_all input):
//   all_reduce 2(n-1)/n · S;  all_gather, reduce_scatter, all_to_all (n-1)/n · S;
//   broadcast, send S (from the root / the sender);  recv, barrier 0.
// all_to_allv has no such S (its volume is the counts sent to other ranks): tessera::Error.
// Integer division, floor. Bus bandwidth is ring_bytes / time (nccl-tests), and for large n these
// are the ZeRO paper's communication volumes; MPI may pick another algorithm, moving other
// volumes.
int64_t ring_bytes(OpType op, int n, int64_t full_bytes);

// Elements of an fp32 tensor reduced in 16 bits per piece (one MPI call each; see the contract
// above), and the kComm scratch such a reduction takes: an all_reduce of `numel` elements, or a
// reduce_scatter of an input of `numel` on a group of n (for the memory report's theory). 4 Mi
// elements (8 MiB of bf16): between two hosts over a 1 Gbit/s link, pieces of 1 Mi elements made a
// 40 MiB reduce-scatter in bf16 slower than the fp32 one (349 against 176 ms), 4 Mi faster (92-120
// ms; bench/comm --sum-dtype bf16, docs/distributed.md).
inline constexpr int64_t kSixteenBitPieceElements = int64_t{1} << 22;
int64_t sixteen_bit_reduction_scratch_bytes(OpType op, int n, int64_t numel);

// Entries the flight recorder keeps by default (PyTorch's flight recorder is commonly run with
// TORCH_NCCL_TRACE_BUFFER_SIZE=2000).
inline constexpr int64_t kDefaultFlightRecorderEntries = 2000;

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // The world group (all ranks of MPI_COMM_WORLD, named "world"). The first call initialises
  // MPI (MPI_THREAD_MULTIPLE; throws tessera::Error if MPI was already initialised with less)
  // and starts the communication and watchdog threads; later calls return the same group.
  // Reads TESSERA_CHECK_COLLECTIVES=1 and TESSERA_DISTRIBUTED_TIMEOUT_SECONDS=<s> once here.
  static std::shared_ptr<ProcessGroup> world();

  // Collective over this group (every member calls it with the same `partition`): `partition`
  // is a list of disjoint rank lists (ranks are *this group's* ranks) covering all members;
  // returns the subgroup that contains the caller, named `name` (e.g. "tp", "dp"), whose
  // ranks are in the order of its list. Like MPI_Comm_split. Blocks until the group exists.
  // Throws tessera::Error if the partition is not a partition of [0, size()).
  std::shared_ptr<ProcessGroup> new_subgroups(const std::vector<std::vector<int>>& partition,
                                              const std::string& name);

  int rank() const { return rank_; }
  int size() const;
  const std::vector<int>& world_ranks() const;  // in group order
  const std::string& name() const;

  // In place over all members.
  Work all_reduce(Tensor& t, ReduceOp op,
                  std::source_location where = std::source_location::current());
  // The same, sent and summed in `sum_dtype` (see "Reductions in 16 bits" above): for an fp32
  // tensor kF32, kBF16 or kF16; for a 16-bit tensor kF32 (the overload above) or its own type.
  Work all_reduce(Tensor& t, ReduceOp op, DType sum_dtype,
                  std::source_location where = std::source_location::current());
  // out = concatenation of every member's `in`, in rank order; out.numel() == size()*in.numel().
  Work all_gather(const Tensor& in, Tensor& out,
                  std::source_location where = std::source_location::current());
  // out = block rank() of the reduction of every member's `in`; in.numel() == size()*out.numel().
  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op,
                      std::source_location where = std::source_location::current());
  Work reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, DType sum_dtype,
                      std::source_location where = std::source_location::current());
  // Block j of `in` goes to member j, block i of `out` comes from member i; in and out have the
  // same numel, divisible by size().
  Work all_to_all(const Tensor& in, Tensor& out,
                  std::source_location where = std::source_location::current());
  // Counts in elements per peer (size() entries each): the first sum(in_counts) elements of
  // `in` are sent, packed in peer order; the first sum(out_counts) elements of `out` receive,
  // packed in peer order. in_counts[j] on rank i must equal out_counts[i] on rank j.
  Work all_to_allv(const Tensor& in, const std::vector<int64_t>& in_counts, Tensor& out,
                   const std::vector<int64_t>& out_counts,
                   std::source_location where = std::source_location::current());
  // t on every member = t on `root` (a rank of this group).
  Work broadcast(Tensor& t, int root, std::source_location where = std::source_location::current());
  // Point to point; peer is a rank of this group. A receive takes the first message from `peer`
  // with the same `tag` (0 <= tag < 32768) not taken yet: messages with equal tags match in
  // issue order, different tags keep messages that travel together apart (a pipeline's
  // activations and gradients). Under the collective consistency check each transfer carries a
  // header (its number on (peer, tag), element count, dtype, call line) that the receiver
  // compares with its own call: a mismatch fails the receive's Work with both descriptions.
  Work send(const Tensor& t, int peer, int tag = 0,
            std::source_location where = std::source_location::current());
  Work recv(Tensor& t, int peer, int tag = 0,
            std::source_location where = std::source_location::current());
  Work barrier(std::source_location where = std::source_location::current());

  // This group's accounting (a snapshot; see CommStats for what is counted) and its reset to
  // zero. Each group counts its own operations only.
  CommStats stats() const;
  void reset_stats();

  // Process-wide switches. They are read when an operation is issued, so set them at the same
  // point of the program on every rank (e.g. right after world()).
  //
  // Collective consistency check (off by default; TESSERA_CHECK_COLLECTIVES=1 turns it on):
  // before each collective the members all-gather a fixed-size descriptor (sequence number on
  // this group, op, dtype, count, root, call site) and compare; on a mismatch the operation is
  // not executed and its Work fails on every member with a tessera::Error naming the first
  // divergent call with both ranks' call sites. The group stays usable afterwards. Sends and
  // receives are checked pairwise (see send()).
  static void set_check_collectives(bool on);
  static bool check_collectives();
  // Watchdog: an operation that has been executing longer than `seconds` (default 600) makes
  // the watchdog ask the group's members how far they got, print one message naming the
  // operation, the group and the ranks that did not arrive, and abort the job with exit code
  // kWatchdogExitCode. TESSERA_DISTRIBUTED_TIMEOUT_SECONDS overrides the default.
  static void set_timeout(double seconds);
  static double timeout();
  // Flight recorder (off by default): the process keeps its last `entries` operations (group,
  // op, sequence number, elements, call site, issue/start/end times) and dumps them to
  // DIR/flight_recorder.rank<R>.json when the watchdog ends the job (every rank it can reach
  // dumps too) or on a fatal signal; tools/tessera-flight reads the dumps. An empty dir or 0
  // entries turns it off. TESSERA_FLIGHT_RECORDER_DIR / TESSERA_FLIGHT_RECORDER_SIZE set it too.
  static void set_flight_recorder(const std::string& dir,
                                  int64_t entries = kDefaultFlightRecorderEntries);

  // Internal: groups are made by world() and new_subgroups(). The group's name, id and members
  // are impl's (one record, shared with the runtime's tasks).
  struct Impl;
  ProcessGroup(int rank, std::unique_ptr<Impl> impl);
  ~ProcessGroup();

 private:
  Work enqueue_collective(OpType op, DType dtype, int64_t count, int root, int reduce,
                          const std::source_location& where, std::function<void()> run);

  int rank_;
  std::unique_ptr<Impl> impl_;
};

// Exit code of a job aborted by the watchdog (mpirun returns it).
inline constexpr int kWatchdogExitCode = 124;

// Ends the runtime cleanly: drains the communication queue, stops the threads, MPI_Finalize.
// Call once at exit on every rank (after this no group may be used). A no-op if world() was
// never called.
void shutdown();

// Aborts every rank of the job with exit code `code` after printing `message` once on stderr
// (used for user errors detected on some ranks). Rank 0 prints at once and ends the job;
// another rank waits up to 2 s to be taken down by rank 0 (which normally detected the same
// error) and otherwise prints the message itself and ends the job. mpirun then exits with
// `code`. (Under Open MPI's mpirun the job is ended by exiting with `code` without
// MPI_Finalize, which mpirun turns into killing every rank; elsewhere by MPI_Abort.)
// Works before world() (then only this process exits) and from any thread.
[[noreturn]] void abort_job(const std::string& message, int code);

// A tool's work on this rank of `world`: a tessera::Error from `body` on a job of several ranks
// ends the job through abort_job ("<tool>: error: <what>" once, exit code 2 on every rank),
// where each rank printing its own copy of the same error would give one line per rank; another
// exception ends it the same way with "internal error" and exit code 1 (rather than leaving the
// other ranks in a collective). On a job of one either propagates (run_tool prints it).
int run_on_ranks(const ProcessGroup& world, const char* tool, const std::function<int()>& body);

}  // namespace tessera::comm
