// GET /metrics of tessera-serve: the serving loop's counters and the process's memory in
// Prometheus' text exposition format (version 0.0.4), named as vLLM names its own
// (vllm:num_requests_running becomes tessera:num_requests_running), each labelled with the
// served model's name, so dashboards built for vLLM need only the prefix changed:
//
//   tessera:num_requests_running     gauge    sequences in the running batch
//   tessera:num_requests_waiting     gauge    accepted, not yet in the batch
//   tessera:kv_cache_usage_perc      gauge    fraction of the KV-cache blocks in use (0-1)
//   tessera:kv_cache_blocks          gauge    blocks in the pool (this rank's)
//   tessera:kv_cache_free_blocks     gauge    blocks free
//   tessera:prompt_tokens_total      counter  prompt tokens of accepted requests
//   tessera:generation_tokens_total  counter  tokens generated
//   tessera:request_success_total    counter  finished requests, by finished_reason (stop, length)
//   tessera:request_aborted_total    counter  requests ended because their client went away
//   tessera:request_refused_total    counter  requests the engine refused
//   tessera:engine_steps_total       counter  engine steps
//   tessera:memory_bytes             gauge    tensor memory now, by category (core/memory.h)
//   process_resident_memory_bytes    gauge    the process's resident set (Prometheus' name)
#pragma once

#include <string>

#include "tessera/core/memory.h"
#include "tessera/inference/serving.h"

namespace tessera::inference {

std::string prometheus_metrics(const ServingStats& stats, const MemorySnapshot& memory,
                               int64_t resident_bytes, const std::string& model_name);

}  // namespace tessera::inference
