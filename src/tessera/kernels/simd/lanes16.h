// Lanes16<E>: 16 lanes of E held as native-width (16-byte) GCC vectors, the storage of the
// portable vector layer (vec_generic.h).
//
// Why parts and not one 64-byte vector: a 64-byte GCC vector has no machine mode on SSE2 or
// NEON, so GCC keeps every such value in memory and each operation reloads and stores it. The
// x86-64 baseline GEMM micro-kernel kept its accumulators on the stack that way and ran at 0.6x
// oneDNN's SSE4.1 sgemm (bench/gemm_bench, 2026-12-05). A struct of 16-byte vectors is split
// into registers. Every operation here applies to each part in turn (constant trip counts,
// unrolled), so the lanes' arithmetic is exactly the 64-byte vector's.
//
// Contract: lane i lives in part i / kPer at position i % kPer (lanes in memory order, as a
// plain array of 16 E). Binary operators take two Lanes16 of the same E, or one and a scalar
// (converted to E); comparisons give all-ones / zero signed-integer lanes of E's width, as GCC's
// vector comparisons do. Conversions between element types are named functions below.
//
// Included by vec_generic.h (this file opens its own target region); do not include directly.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the 16-bit <-> 32-bit lane shuffles below assume little-endian lanes");

// Every function of the portable layer is forced inline: each operation is a few statements per
// part, and a call passing a 64-byte struct through the stack would cost more than the
// operation (GCC declined to inline bf16 rounding into a store without it).
#define TESSERA_LANES_INLINE [[gnu::always_inline]] inline

TESSERA_TARGET_BEGIN

template <typename E>
struct Lanes16 {
  static constexpr int kPer = 16 / static_cast<int>(sizeof(E));  // lanes per part
  static constexpr int kParts = 16 / kPer;
  typedef E Part __attribute__((vector_size(16)));
  Part p[kParts];

  [[gnu::always_inline]] E operator[](int i) const { return p[i / kPer][i % kPer]; }
  [[gnu::always_inline]] void set(int i, E x) { p[i / kPer][i % kPer] = x; }
};

// Signed integer lanes of E's width: what a comparison of E lanes gives.
template <typename E>
using MaskLanesOf =
    Lanes16<std::conditional_t<sizeof(E) == 8, int64_t,
                               std::conditional_t<sizeof(E) == 4, int32_t, int16_t>>>;

// Lane 0 of v in every lane of a part.
template <typename Part, std::size_t... I>
TESSERA_LANES_INLINE Part splat_lane0(Part v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, (0 * static_cast<int>(I))...);
}
// Every lane x, bit for bit (-0.0 and NaN payloads kept: no arithmetic touches x). One shuffle
// per part: setting the 16 lanes one by one went through memory (7x slower in a GEMM kernel).
template <typename E>
TESSERA_LANES_INLINE Lanes16<E> broadcast(E x) {
  typename Lanes16<E>::Part one{};
  one[0] = x;
  const typename Lanes16<E>::Part all =
      splat_lane0(one, std::make_index_sequence<Lanes16<E>::kPer>());
  Lanes16<E> r;
#pragma GCC unroll 8
  for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] = all;
  return r;
}

// 16 lanes from memory and back, one part at a time. The parts' offsets are taken in bytes:
// src may be a cast pointer to 16-bit storage types (bf16, fp16), not an array of E.
template <typename E>
TESSERA_LANES_INLINE Lanes16<E> load_lanes(const E* src) {
  Lanes16<E> r;
#pragma GCC unroll 8
  for (int i = 0; i < Lanes16<E>::kParts; ++i)
    std::memcpy(&r.p[i], reinterpret_cast<const unsigned char*>(src) + i * sizeof r.p[i],
                sizeof r.p[i]);
  return r;
}
template <typename E>
TESSERA_LANES_INLINE void store_lanes(E* dst, const Lanes16<E>& x) {
#pragma GCC unroll 8
  for (int i = 0; i < Lanes16<E>::kParts; ++i)
    std::memcpy(reinterpret_cast<unsigned char*>(dst) + i * sizeof x.p[i], &x.p[i], sizeof x.p[i]);
}

// ---- lane-wise operators ---------------------------------------------------------------------
#define TESSERA_LANES16_BINARY(op)                                                              \
  template <typename E>                                                                         \
  TESSERA_LANES_INLINE Lanes16<E> operator op(const Lanes16<E>& a, const Lanes16<E>& b) {       \
    Lanes16<E> r;                                                                               \
    _Pragma("GCC unroll 8") for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] =               \
        a.p[i] op b.p[i];                                                                       \
    return r;                                                                                   \
  }                                                                                             \
  template <typename E>                                                                         \
  TESSERA_LANES_INLINE Lanes16<E> operator op(const Lanes16<E>& a, std::type_identity_t<E> s) { \
    Lanes16<E> r;                                                                               \
    _Pragma("GCC unroll 8") for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] = a.p[i] op s;  \
    return r;                                                                                   \
  }                                                                                             \
  template <typename E>                                                                         \
  TESSERA_LANES_INLINE Lanes16<E> operator op(std::type_identity_t<E> s, const Lanes16<E>& a) { \
    Lanes16<E> r;                                                                               \
    _Pragma("GCC unroll 8") for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] = s op a.p[i];  \
    return r;                                                                                   \
  }                                                                                             \
  template <typename E, typename B>                                                             \
  TESSERA_LANES_INLINE Lanes16<E>& operator op##=(Lanes16<E>& a, const B& b) {                  \
    return a = a op b;                                                                          \
  }
TESSERA_LANES16_BINARY(+)
TESSERA_LANES16_BINARY(-)
TESSERA_LANES16_BINARY(*)
TESSERA_LANES16_BINARY(/)
TESSERA_LANES16_BINARY(&)
TESSERA_LANES16_BINARY(|)
TESSERA_LANES16_BINARY(^)
TESSERA_LANES16_BINARY(<<)
TESSERA_LANES16_BINARY(>>)
#undef TESSERA_LANES16_BINARY

#define TESSERA_LANES16_COMPARE(op)                                                            \
  template <typename E>                                                                        \
  TESSERA_LANES_INLINE MaskLanesOf<E> operator op(const Lanes16<E>& a, const Lanes16<E>& b) {  \
    MaskLanesOf<E> r;                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] =              \
        a.p[i] op b.p[i];                                                                      \
    return r;                                                                                  \
  }                                                                                            \
  template <typename E>                                                                        \
  TESSERA_LANES_INLINE MaskLanesOf<E> operator op(const Lanes16<E>& a,                         \
                                                  std::type_identity_t<E> s) {                 \
    MaskLanesOf<E> r;                                                                          \
    _Pragma("GCC unroll 8") for (int i = 0; i < Lanes16<E>::kParts; ++i) r.p[i] = a.p[i] op s; \
    return r;                                                                                  \
  }
TESSERA_LANES16_COMPARE(==)
TESSERA_LANES16_COMPARE(!=)
TESSERA_LANES16_COMPARE(<)
TESSERA_LANES16_COMPARE(<=)
TESSERA_LANES16_COMPARE(>)
TESSERA_LANES16_COMPARE(>=)
#undef TESSERA_LANES16_COMPARE

// f applied to each part of a, giving the parts of a To (as many parts: the same lane width).
// The one loop behind the unary operators and the same-width conversions below.
template <typename To, typename E, typename F>
TESSERA_LANES_INLINE To map_parts(const Lanes16<E>& a, F f) {
  static_assert(To::kParts == Lanes16<E>::kParts, "map_parts keeps the lane width");
  To r;
#pragma GCC unroll 8
  for (int i = 0; i < To::kParts; ++i) r.p[i] = f(a.p[i]);
  return r;
}

template <typename E>
TESSERA_LANES_INLINE Lanes16<E> operator-(const Lanes16<E>& a) {
  return map_parts<Lanes16<E>>(
      a, [](auto v) __attribute__((always_inline)) { return -v; });
}
template <typename E>
TESSERA_LANES_INLINE Lanes16<E> operator~(const Lanes16<E>& a) {
  return map_parts<Lanes16<E>>(
      a, [](auto v) __attribute__((always_inline)) { return ~v; });
}

// ---- conversions -----------------------------------------------------------------------------
// The same bits as lanes of another type of the same width.
template <typename To, typename E>
TESSERA_LANES_INLINE To bitcast(const Lanes16<E>& a) {
  return map_parts<To>(
      a,
      [](auto v) __attribute__((always_inline)) { return reinterpret_cast<typename To::Part>(v); });
}
// Each lane converted as a scalar cast would (float to int truncates), same lane width.
template <typename To, typename E>
TESSERA_LANES_INLINE To convert_lanes(const Lanes16<E>& a) {
  return map_parts<To>(
      a, [](auto v) __attribute__((always_inline)) {
        return __builtin_convertvector(v, typename To::Part);
      });
}
// Lanes [Off, Off + sizeof...(I)) of a part, as a shorter vector (a shuffle, no memory).
template <int Off, typename Part, std::size_t... I>
TESSERA_LANES_INLINE auto take_lanes(Part v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, (Off + static_cast<int>(I))...);
}
// Lanes [Off, Off + kPer / 2) of x and of y interleaved: x[Off], y[Off], x[Off + 1], ... (SSE2's
// punpckl/h when Off is 0 / kPer / 2). With zero for one operand, little-endian, each lane of the
// other becomes the low (x) or high (y) half of a lane twice as wide; the zero lanes' indices
// follow the interleave's pattern so GCC sees one unpack (an index of 0 for all of them made it
// insert lanes one by one from general registers).
template <int Off, typename Part, std::size_t... I>
TESSERA_LANES_INLINE Part interleave(Part x, Part y, std::index_sequence<I...>) {
  constexpr int kPer = static_cast<int>(sizeof...(I));
  return __builtin_shufflevector(x, y,
                                 ((I % 2 == 0 ? 0 : kPer) + Off + static_cast<int>(I) / 2)...);
}
// Lanes First, First + 2, ... of x then of y: little-endian, the low (First 0) or high (First 1)
// halves of lanes twice as wide.
template <int First, typename Part, std::size_t... I>
TESSERA_LANES_INLINE Part every_other(Part x, Part y, std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, (2 * static_cast<int>(I) + First)...);
}

// Which half of a lane twice as wide an unsigned lane occupies in widen and narrow.
enum class Half { kLow, kHigh };

// Each lane converted to a type twice as wide: fp32 to fp64 exactly; an unsigned lane into the
// low half, zero-extended as a scalar cast would (Half::kLow), or into the high half with the
// low half zero, i.e. shifted left by its width (Half::kHigh). Each source part gives two
// destination parts, from its low and high halves.
template <typename To, Half kHalf = Half::kLow, typename E>
TESSERA_LANES_INLINE To widen(const Lanes16<E>& a) {
  static_assert(To::kParts == 2 * Lanes16<E>::kParts, "widen doubles the lane width");
  static_assert(std::is_unsigned_v<E> || (std::is_floating_point_v<E> && kHalf == Half::kLow));
  constexpr int kPer = Lanes16<E>::kPer;
  using Part = typename Lanes16<E>::Part;
  To r;
#pragma GCC unroll 8
  for (int i = 0; i < Lanes16<E>::kParts; ++i) {
    if constexpr (std::is_floating_point_v<E>) {
      r.p[2 * i] = __builtin_convertvector(
          take_lanes<0>(a.p[i], std::make_index_sequence<kPer / 2>()), typename To::Part);
      r.p[2 * i + 1] = __builtin_convertvector(
          take_lanes<kPer / 2>(a.p[i], std::make_index_sequence<kPer / 2>()), typename To::Part);
    } else {
      const Part x = kHalf == Half::kLow ? a.p[i] : Part{};
      const Part y = kHalf == Half::kLow ? Part{} : a.p[i];
      r.p[2 * i] = reinterpret_cast<typename To::Part>(
          interleave<0>(x, y, std::make_index_sequence<kPer>()));
      r.p[2 * i + 1] = reinterpret_cast<typename To::Part>(
          interleave<kPer / 2>(x, y, std::make_index_sequence<kPer>()));
    }
  }
  return r;
}
// Each unsigned lane's low half (truncated, as a scalar cast would: Half::kLow) or high half
// (shifted right by the narrow width: Half::kHigh), in a type half as wide: two source parts
// make one destination part.
template <typename To, Half kHalf = Half::kLow, typename E>
TESSERA_LANES_INLINE To narrow(const Lanes16<E>& a) {
  static_assert(2 * To::kParts == Lanes16<E>::kParts, "narrow halves the lane width");
  static_assert(std::is_unsigned_v<E>);
  using Part = typename To::Part;
  To r;
#pragma GCC unroll 8
  for (int i = 0; i < To::kParts; ++i)
    r.p[i] = every_other < kHalf == Half::kLow
                 ? 0
                 : 1 > (reinterpret_cast<Part>(a.p[2 * i]), reinterpret_cast<Part>(a.p[2 * i + 1]),
                        std::make_index_sequence<To::kPer>());
  return r;
}
// Whether any lane is non-zero.
template <typename E>
TESSERA_LANES_INLINE bool any_set(const Lanes16<E>& a) {
  typedef uint64_t Words __attribute__((vector_size(16)));
  Words all = reinterpret_cast<Words>(a.p[0]);
#pragma GCC unroll 8
  for (int i = 1; i < Lanes16<E>::kParts; ++i) all |= reinterpret_cast<Words>(a.p[i]);
  return (all[0] | all[1]) != 0;
}

TESSERA_TARGET_END
