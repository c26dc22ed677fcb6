// PRIVATE header: the compressed emission shared by the AVX2 and AVX-512 MVUE kernels of any n:m
// along columns (mvue_avx2.cpp, mvue_avx512.cpp). Defined in emit_lanes.cpp, a unit built without
// ISA flags, so the kernels share it without sharing an inline function across target flags.
// Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

// One pruned group per lane: lanes[i * lane_count + l] is element i (of m) of lane l's group.
// Lane l's kept values (the nonzero ones, padded to n with the lowest unkept positions, as
// zeros) go to v + l * value_ld + slot0 onwards, their in-group indices OR-ed into the index row
// idx + l * index_ld at bits (slot0 + k) * bits (bits <= 6; 0 for m == 1).
// A group's index fields gathered before they are OR-ed into its row (GCC and Clang), used where
// they fit with the row's bit offset (up to 7 bits): n · bits <= kIndexWordBits.
__extension__ typedef unsigned __int128 IndexWord;
inline constexpr int kIndexWordBits = 120;

void mvue_emit_lanes(const float* lanes, int lane_count, int n, int m, int bits, float* v,
                     int64_t value_ld, uint8_t* idx, int64_t index_ld, int64_t slot0);

}  // namespace nms::detail
