// tessera-train: trains a GPT/LLaMA-style model. Flags follow Megatron-LM; see docs/training.md.
#include "tessera/train/trainer.h"

int main(int argc, char** argv) { return tessera::train::train_main(argc, argv); }
