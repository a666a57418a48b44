// Tensor-parallel serving keeps every rank's Engine in the same state by replaying, on each
// rank, what the serving rank (rank 0 of the group) decided before each step: a StepPlan —
// the requests that arrived (in order) and the generations that end early (a client went away,
// a stop string matched, a timeout). Engine ids are handed out in submit order and an Engine's
// refusals depend only on the request, so ranks that apply the same plans in the same order hold
// the same batch, take the same collectives in step() and sample the same tokens (the logits
// are gathered whole on every rank, engine.h).
//
// On the wire a plan is a flat list of int64 words (doubles by their bit patterns, so sampling
// parameters arrive exact), sent point to point from rank 0 to each other rank as a length and
// then the words. A receiving rank waits without spinning (the runtime polls pending transfers
// with sleeps), which matters while a server is idle: rank 0 sends an empty plan (a heartbeat)
// at least every `heartbeat_seconds()` so no receive outlives the watchdog's timeout.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/inference/engine.h"

namespace tessera::inference {

struct StepPlan {
  std::vector<GenerationRequest> submits;                   // submitted in this order
  std::vector<std::pair<uint64_t, FinishReason>> finishes;  // then ended, in this order
  bool stop = false;                                        // the server is shutting down
  bool empty() const { return submits.empty() && finishes.empty() && !stop; }
};

std::vector<int64_t> encode_plan(const StepPlan& plan);
// tessera::Error when `words` is not a plan encode_plan wrote (truncated or corrupt).
StepPlan decode_plan(std::span<const int64_t> words);

// From rank 0 of `group` to every other member (call on rank 0; blocks until sent).
void send_plan(comm::ProcessGroup& group, const StepPlan& plan);
// On a member other than rank 0: the next plan rank 0 sent.
StepPlan receive_plan(comm::ProcessGroup& group);

// Seconds between heartbeats: a quarter of the watchdog's timeout, at most 30.
double heartbeat_seconds();

// Applies `plan` to `engine` as the serving rank did: each submit (a refused request is skipped
// here; rank 0 reports it), then each finish. Returns the ids of the accepted submits, in order
// (0 for a refused one) and in `errors` the refusals' messages (same length as plan.submits).
std::vector<uint64_t> apply_plan(Engine& engine, StepPlan plan, std::vector<std::string>& errors);

}  // namespace tessera::inference
