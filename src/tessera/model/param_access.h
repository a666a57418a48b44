// The interface through which a ChunkRunner (chunk_runner.h) asks for a model unit's parameters;
// implemented by ZeRO 3 (distributed/zero3_params.h). Its own header so that an implementation
// depends on the contract only.
#pragma once

#include <vector>

namespace tessera::model {

// Lets ZeRO stage 3 materialise a unit's parameters just before they are used and drop them
// after. A unit is a range of the flat buffers (GPTModel::units()): the embeddings, each layer,
// the final norm and output layer; when a pipeline splits tied embeddings, the word embedding
// (first stage) and its copy (last stage) are units of their own. Every acquire(u) is matched by
// a release(u); a unit may be acquired again before it is released (the tied embedding in the
// output layer). begin_pass() announces the units the next pass acquires, in order (a chunk's
// forward: its embeddings and layers; its backward: the head, the layers in reverse), so the
// next one can be fetched while the current one computes.
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // `order` is valid during the call only.
  virtual void begin_pass(const std::vector<int>& order) = 0;
  virtual void acquire(int unit) = 0;
  virtual void release(int unit) = 0;
};

}  // namespace tessera::model
