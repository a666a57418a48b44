// The parts of a checkpoint's run state that are plain data: the model's configuration (so
// tessera-convert can rebuild the model without the training flags) and the loss scaler, as
// JSON objects inside metadata.json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tessera/model/config.h"
#include "tessera/optim/loss_scaler.h"

namespace tessera::checkpoint {

// Every ModelConfig field under its Megatron flag's name without dashes ("num_layers", ...).
nlohmann::json model_config_to_json(const model::ModelConfig& cfg);
// The inverse; tessera::Error naming `where` and the key for a missing or mistyped field.
model::ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where);

nlohmann::json loss_scaler_to_json(const optim::LossScalerState& s);
optim::LossScalerState loss_scaler_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace tessera::checkpoint
