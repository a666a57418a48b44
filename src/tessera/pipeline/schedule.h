// Pipeline schedules as data (Megatron-LM's forward_backward_pipelining_* functions, written as
// lists): each rank's actions for one iteration are computed up front, so a test can run every
// rank's list together without a model (every receive has its send, nothing deadlocks) and count
// the bubble, and the executor (pipeline/executor.h) only walks its list.
//
// Vocabulary: P pipeline ranks, M micro-batches per iteration, V model chunks per rank (virtual
// stages; 1 unless interleaved). Rank r's local chunk c holds model chunk j = c*P + r, so model
// chunks go round-robin over the ranks (Megatron's interleaved assignment); model chunk 0 starts
// with the embeddings and model chunk V*P - 1 ends with the output layer and loss. The
// activation of model chunk j goes to the rank holding j + 1; its gradient comes back.
//
// Compute orders (a rank's sequence of forwards F and backwards B):
//   gpipe:       F(0) .. F(M-1), then B(0) .. B(M-1).
//   1f1b:        warmup = min(P - r - 1, M) forwards, then alternating F, B, then the remaining
//                backwards (PipeDream-Flush).
//   interleaved: the M*V virtual micro-batches k are visited in groups of P micro-batches per
//                chunk: forward k is micro-batch (k / (P*V))*P + k % P of chunk (k / P) % V,
//                backward k the same micro-batch of chunk V - 1 - (k / P) % V; warmup =
//                min(2(P - r - 1) + (V - 1)P, M*V) forwards (all M*V when M = P, as Megatron),
//                then alternating, then cooldown.
//                Requires M to be a multiple of P (Megatron's rule with its default group size).
// Communication: the receive an operation needs is posted one compute operation ahead (so the
// transfer overlaps the previous compute), sends are issued right after the compute that
// produced them; both are nonblocking. Only a compute operation waits (for its own receive).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::pipeline {

enum class ScheduleKind { kGPipe, kOneFOneB, kInterleaved };

// Parses --pipeline-schedule ("gpipe", "1f1b", "interleaved"); tessera::Error otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
const char* schedule_name(ScheduleKind kind);

enum class Action {
  kRecvActivation,  // post the receive of the chunk's input (from the previous model chunk)
  kForward,         // wait for that input, run the chunk's forward
  kSendActivation,  // send the chunk's output to the next model chunk
  kRecvGrad,        // post the receive of the gradient of the chunk's output
  kBackward,        // wait for it, run the chunk's backward (the loss's too on the last chunk)
  kSendGrad,        // send the gradient of the chunk's input to the previous model chunk
};
const char* action_name(Action a);

struct Step {
  Action action;
  int microbatch;  // 0 .. M-1
  int chunk;       // local chunk 0 .. V-1
  int peer = -1;   // pipeline rank sent to / received from (communication actions)
};

struct ScheduleShape {
  int pp_size = 1;           // P
  int num_microbatches = 1;  // M
  int virtual_stages = 1;    // V
};

// Checks the shape for `kind`: P, M, V >= 1; V > 1 only with interleaved (which needs V >= 2
// and M a multiple of P). tessera::Error naming the flags otherwise.
void validate_schedule(ScheduleKind kind, const ScheduleShape& shape);

// The actions of pipeline rank `rank` for one iteration (validate_schedule first).
std::vector<Step> build_schedule(ScheduleKind kind, const ScheduleShape& shape, int rank);

// The model chunk (0 .. V*P - 1) of local chunk `chunk` on `rank`.
inline int model_chunk(const ScheduleShape& s, int rank, int chunk) {
  return chunk * s.pp_size + rank;
}

// What running every rank's list together gives, with each forward taking `forward_time` and
// each backward `backward_time`, communication free, a compute operation starting as soon as
// its rank is free and its input has been sent.
struct Simulation {
  bool deadlock = false;            // some rank waits forever (or a receive has no matching send)
  std::string problem;              // what went wrong, empty when nothing did
  double makespan = 0;              // time when the last rank finishes
  std::vector<double> idle;         // per rank: makespan - its compute time
  std::vector<int> peak_in_flight;  // per rank: most micro-batch chunks forwarded, not yet
                                    // backwarded (whose activations are held)
  std::vector<double> finish;       // per rank: when its last compute operation ends
  std::vector<double> busy;         // per rank: its compute time
  // The bubble: mean over ranks of idle / makespan.
  double bubble_fraction() const;
};
// Simulates the lists of every rank (lists[r] for rank r). Also checks that every message, named
// by (activation or gradient, micro-batch, receiving model chunk), is sent exactly once and
// received exactly once, and that each send goes to the rank that receives it (the peer fields).
Simulation simulate(const ScheduleShape& shape, const std::vector<std::vector<Step>>& lists,
                    double forward_time = 1.0, double backward_time = 2.0);

// The same with times of their own (the step-time model, plan/step_time.h): `compute(rank,
// chunk, forward)` seconds for each forward or backward of local chunk `chunk` on `rank`, and
// every message arriving `transfer` seconds after its send.
struct OperationTimes {
  std::function<double(int rank, int chunk, bool forward)> compute;
  double transfer = 0;
};
Simulation simulate(const ScheduleShape& shape, const std::vector<std::vector<Step>>& lists,
                    const OperationTimes& times);

// The bubble fraction of the theory, for comparison: (P - 1) / (V*M + P - 1) (GPipe and 1F1B
// with V = 1; Narayanan et al. 2021, whose bubble time (P - 1)/V per micro-batch time gives this
// fraction of the iteration).
double theoretical_bubble(const ScheduleShape& shape);

}  // namespace tessera::pipeline
