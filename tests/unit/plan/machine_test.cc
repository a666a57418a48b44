// Machine descriptions (plan/machine.h): the rate curve's interpolation and the collectives' cost
// by hand, a description read back from its own JSON, and each kind of bad file as one error
// naming the key.
#include "tessera/plan/machine.h"

#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.h"

namespace tessera::plan {
namespace {

TEST(RateCurve, LogLinearBetweenPointsConstantBeyond) {
  RateCurve c;
  c.points = {{100, 10}, {10000, 30}};
  EXPECT_DOUBLE_EQ(c.at(50), 10);
  EXPECT_DOUBLE_EQ(c.at(100), 10);
  EXPECT_NEAR(c.at(1000), 20, 1e-12);  // halfway in log(size)
  EXPECT_DOUBLE_EQ(c.at(10000), 30);
  EXPECT_DOUBLE_EQ(c.at(1e9), 30);
}

TEST(LinkRate, RingCostsByHand) {
  const LinkRate link{1e-5, 1e9};
  // All-reduce on 4 ranks: 3 steps of latency, 2 * 3/4 of the buffer through each rank's link.
  EXPECT_NEAR(link.seconds(CollectiveKind::kAllReduce, 1e6, 4), 3e-5 + 1.5e-3, 1e-15);
  EXPECT_NEAR(link.seconds(CollectiveKind::kReduceScatter, 1e6, 4), 3e-5 + 0.75e-3, 1e-15);
  EXPECT_NEAR(link.seconds(CollectiveKind::kAllGather, 1e6, 2), 1e-5 + 0.5e-3, 1e-15);
  EXPECT_NEAR(link.seconds(CollectiveKind::kSendRecv, 1e6, 2), 1e-5 + 1e-3, 1e-15);
  EXPECT_EQ(link.seconds(CollectiveKind::kAllReduce, 1e6, 1), 0);  // nothing to exchange
}

const char* kGood = R"({
  "name": "two-host test", "kind": "description", "source": "by hand",
  "hosts": 2, "cores_per_host": 8, "memory_per_host_bytes": 1e10,
  "configurations": [
    {"ranks_per_host": 2, "threads_per_rank": 4,
     "kernels": {"fp32": {"gemm_forward": [[64, 1e10], [1024, 5e10]], "add": [[1e6, 1e9]]},
                 "bf16": {"attention_forward": [[128, 2e10]]}},
     "intra_host": {"all_reduce": {"latency_s": 1e-6, "bus_bytes_per_s": 2e10}}}],
  "inter_host": {"send_recv": {"latency_s": 5e-6, "bus_bytes_per_s": 1e9}}
})";

TEST(MachineDescription, ReadsBackItsOwnJson) {
  const MachineDescription m = parse_machine(kGood, "good.json");
  EXPECT_EQ(m.name, "two-host test");
  EXPECT_EQ(m.hosts, 2);
  const HostConfiguration& c = m.configuration(2);
  EXPECT_EQ(c.threads_per_rank, 4);
  EXPECT_DOUBLE_EQ(c.kernels.at(DType::kF32)[static_cast<int>(KernelKind::kGemmForward)].at(1024),
                   5e10);
  EXPECT_DOUBLE_EQ(c.intra_host[static_cast<int>(CollectiveKind::kAllReduce)].bus_bytes_per_s,
                   2e10);
  EXPECT_FALSE(c.intra_host[static_cast<int>(CollectiveKind::kAllGather)].described());
  EXPECT_EQ(c.intra_host.overlap, 1.0);  // left out: a transfer that needs no compute core
  const MachineDescription again = parse_machine(machine_json(m), "again");
  EXPECT_EQ(machine_json(again), machine_json(m));
  EXPECT_DOUBLE_EQ(again.inter_host[static_cast<int>(CollectiveKind::kSendRecv)].latency_s, 5e-6);
}

// The error a description with `from` replaced by `to` gives (empty: none).
std::string error_of(const std::string& from, const std::string& to) {
  std::string text = kGood;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  try {
    parse_machine(text, "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MachineDescription, StorageRatesReadBackAndAreChecked) {
  const std::string storage =
      "\"threads_per_rank\": 4, \"storage\": {\"read_bytes_per_s\": 1.5e9, "
      "\"write_bytes_per_s\": 2e9},";
  std::string text = kGood;
  text.replace(text.find("\"threads_per_rank\": 4,"), 22, storage);
  const MachineDescription m = parse_machine(text, "m.json");
  EXPECT_DOUBLE_EQ(m.configuration(2).storage.read_bytes_per_s, 1.5e9);
  EXPECT_DOUBLE_EQ(m.configuration(2).storage.write_bytes_per_s, 2e9);
  EXPECT_EQ(machine_json(parse_machine(machine_json(m), "again")), machine_json(m));
  EXPECT_FALSE(parse_machine(kGood, "good.json").configuration(2).storage.described());
  EXPECT_EQ(error_of("\"threads_per_rank\": 4,",
                     "\"threads_per_rank\": 4, \"storage\": {\"read_bytes_per_s\": 0},"),
            "m.json.configurations[0].storage.read_bytes_per_s: expected a number > 0");
}

TEST(MachineDescription, ResidentBaselineReadsBackAndIsChecked) {
  std::string text = kGood;
  text.replace(text.find("\"threads_per_rank\": 4,"), 22,
               "\"threads_per_rank\": 4, \"resident_baseline_bytes\": 25165824,");
  const MachineDescription m = parse_machine(text, "m.json");
  EXPECT_DOUBLE_EQ(m.configuration(2).resident_baseline_bytes, 25165824);
  EXPECT_EQ(machine_json(parse_machine(machine_json(m), "again")), machine_json(m));
  EXPECT_EQ(parse_machine(kGood, "good.json").configuration(2).resident_baseline_bytes, 0);
  EXPECT_EQ(error_of("\"threads_per_rank\": 4,",
                     "\"threads_per_rank\": 4, \"resident_baseline_bytes\": -1,"),
            "m.json.configurations[0].resident_baseline_bytes: expected a number > 0");
}

TEST(MachineDescription, BadFilesAreOneLineNamingTheKey) {
  EXPECT_EQ(error_of("\"add\"", "\"addd\""),
            "m.json.configurations[0].kernels.fp32.addd: unknown key (expected gemm_forward, "
            "gemm_input_grad, gemm_weight_grad, attention_forward, attention_backward, "
            "norm_forward, norm_backward, activation_forward, activation_backward, add, dropout, "
            "rope, embedding, cross_entropy, optimizer, grad_norm, zero_fill, page_refault, "
            "attention_dropout)");
  EXPECT_EQ(error_of("\"hosts\": 2,", ""), "m.json: missing key \"hosts\"");
  EXPECT_EQ(error_of("[[64, 1e10], [1024, 5e10]]", "[[64, 1e10], [64, 5e10]]"),
            "m.json.configurations[0].kernels.fp32.gemm_forward[1]: sizes must increase");
  EXPECT_EQ(error_of("[[1e6, 1e9]]", "[[1e6, 0]]"),
            "m.json.configurations[0].kernels.fp32.add[0]: expected [size > 0, rate > 0]");
  EXPECT_EQ(error_of("\"description\"", "\"guess\""),
            "m.json.kind: expected \"measured\" or \"description\", got \"guess\"");
  EXPECT_EQ(error_of("\"bf16\"", "\"int8\""),
            "m.json.configurations[0].kernels.int8: unknown key (expected fp32, bf16, fp16)");
  EXPECT_EQ(error_of("\"bus_bytes_per_s\": 2e10}", "\"bus_bytes_per_s\": 2e10}, \"overlap\": 2"),
            "m.json.configurations[0].intra_host.overlap: expected a fraction in [0, 1]");
  EXPECT_EQ(error_of("\"latency_s\": 1e-6,", "\"latency_s\": -1,"),
            "m.json.configurations[0].intra_host.all_reduce.latency_s: expected a number >= 0");
  EXPECT_EQ(error_of("\"hosts\": 2", "\"hosts\": 2.5"),
            "m.json.hosts: expected a whole number >= 1");
  EXPECT_EQ(error_of("{", "[").rfind("m.json: not valid JSON: ", 0), 0u);
  const MachineDescription m = parse_machine(kGood, "good.json");
  try {
    m.configuration(4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no rates for 4 rank(s) a host (it has: 2)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::plan
