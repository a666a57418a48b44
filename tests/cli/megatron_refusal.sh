#!/bin/bash
# Command-line test of the refusal of Megatron-LM checkpoints (docs/checkpoints.md): tiny fake
# trees laid out as Megatron saves them (legacy mp_rank_*/model_optim_rng.pt and torch_dist's
# .metadata / *.distcp / common.pt / metadata.json) given to tessera-train --load and to
# tessera-convert exit 2 with one line naming the format and the conversion route.
# Usage: megatron_refusal.sh BUILD_BIN_DIR
BIN_DIR="${1:?usage: megatron_refusal.sh BUILD_BIN_DIR}"
BIN="$BIN_DIR/tessera-train"
CONVERT="$BIN_DIR/tessera-convert"
source "$(dirname "$0")/lib.bash" megatron-refusal
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

legacy="$TMP/legacy" dist="$TMP/dist"
mkdir -p "$legacy/iter_0000100/mp_rank_00" "$legacy/iter_0000100/mp_rank_01" "$dist/iter_0000100"
echo 100 > "$legacy/latest_checkpointed_iteration.txt"
touch "$legacy/iter_0000100/mp_rank_00/model_optim_rng.pt" "$legacy/iter_0000100/mp_rank_01/model_optim_rng.pt"
echo 100 > "$dist/latest_checkpointed_iteration.txt"
touch "$dist/iter_0000100/.metadata" "$dist/iter_0000100/__0_0.distcp" "$dist/iter_0000100/common.pt"
echo '{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}' \
  > "$dist/iter_0000100/metadata.json"

FLAGS=(--mock-data --model llama-tiny --lr 1e-3 --micro-batch-size 1 --train-iters 1)
# one_line CODE FILE PATTERN: exit code 2 and exactly one stderr line, matching PATTERN.
one_line() {
  [ "$1" -eq 2 ] && [ "$(wc -l < "$2")" -eq 1 ] && grep -q "$3" "$2" || {
    echo "  exit $1; stderr:" >&2
    sed 's/^/    /' "$2" >&2
    return 1
  }
}
route="convert it to a Hugging Face model directory (Megatron-LM's tools/checkpoint/convert.py"
for kind in legacy torch_dist; do
  dir=$legacy
  [ $kind = torch_dist ] && dir=$dist
  check "$kind: tessera-train --load" \
    expect_error 1 "$dir: a Megatron-LM $kind checkpoint .*$route" --load "$dir"
  check "  not the metadata.json message" bash -c "! grep -q 'metadata.json does not exist' '$TMP/err'"
  "$CONVERT" --from tessera "$dir" --to hf "$TMP/out.hf" >/dev/null 2>"$TMP/err"
  check "$kind: tessera-convert --from tessera" one_line $? "$TMP/err" "Megatron-LM $kind checkpoint.*$route"
  "$CONVERT" --from hf "$dir" --to tessera "$TMP/out.ck" >/dev/null 2>"$TMP/err"
  check "$kind: tessera-convert --from hf" one_line $? "$TMP/err" "Megatron-LM $kind checkpoint.*$route"
done

echo "megatron_refusal: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
