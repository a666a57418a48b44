// Megatron-LM's own checkpoint formats, recognised so that `--load` and tessera-convert refuse
// them with one line naming the format and the way through Hugging Face, instead of failing
// on a file Tessera's format would have (metadata.json). Tessera reads neither format (both are
// torch pickles, and torch_dist adds PyTorch Distributed Checkpoint's .distcp files).
//
// Recognised, in `dir` itself or in the iteration directory its tracker names
// (latest_checkpointed_iteration.txt: a number N for iter_%07d, or "release" for release/):
//   legacy     (--ckpt-format torch): mp_rank_XX[_YYY]/model_optim_rng.pt (or model_rng.pt),
//              or dir itself one such mp_rank directory;
//   torch_dist (--ckpt-format torch_dist, Megatron-Core's distributed checkpoint, the default):
//              .metadata, *.distcp files, common.pt, or a metadata.json naming a
//              "sharded_backend" (Megatron's; Tessera's metadata.json has no such key).
#pragma once

#include <string>

namespace tessera::checkpoint {

// "legacy" or "torch_dist" for a Megatron-LM checkpoint at `dir` (a --save directory or one
// iteration's directory), "" for anything else. Never throws: unreadable entries count as
// absent.
std::string megatron_checkpoint_format(const std::string& dir);

// Throws tessera::Error (one line: `dir`, the format, what Tessera cannot do and the conversion
// route through Hugging Face) when megatron_checkpoint_format(dir) is not "".
void refuse_megatron_checkpoint(const std::string& dir);

}  // namespace tessera::checkpoint
