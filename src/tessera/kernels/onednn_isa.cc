#include "tessera/kernels/onednn_isa.h"

#if !defined(TESSERA_WITHOUT_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tessera::kernels {

#if defined(TESSERA_WITHOUT_ONEDNN)

// The kernels-only build (scripts/test-arm64.sh) has no oneDNN.
bool cap_onednn_isa(CpuTarget) { return false; }
std::string onednn_isa_name() { return "none"; }
bool onednn_has_bf16_matmul() { return false; }

#else

bool cap_onednn_isa(CpuTarget target) {
  dnnl::cpu_isa isa = dnnl::cpu_isa::all;
  switch (target) {
    case CpuTarget::kBaseline: isa = dnnl::cpu_isa::sse41; break;
    case CpuTarget::kAvx2: isa = dnnl::cpu_isa::avx2; break;
    case CpuTarget::kAvx512: isa = dnnl::cpu_isa::avx512_core; break;
    default: break;  // the best oneDNN has
  }
  return dnnl::set_max_cpu_isa(isa) == dnnl::status::success;
}

std::string onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::all: return "all";
    default: return "other";
  }
}

bool onednn_has_bf16_matmul() {
  // Asked once by creating a small bf16 primitive: oneDNN refuses ("could not create a
  // primitive descriptor") below AVX-512.
  static const bool has = [] {
    active_cpu_target();
    try {
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc md({16, 16}, dt::bf16, dnnl::memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), dnnl::engine(dnnl::engine::kind::cpu, 0));
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

#endif

}  // namespace tessera::kernels
