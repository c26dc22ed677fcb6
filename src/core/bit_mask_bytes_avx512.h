// PRIVATE header: the AVX-512 rows of bit_mask_rows_to_bytes / bit_mask_rows_from_bytes
// (bit_mask_bytes_avx512.cpp, the only unit built with its flags; called after the isa_active()
// check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

// One row: cols bytes at `out`, byte j = bit j of `words` (1 or 0). 64 bytes per mask word (a
// byte move of ones zero-masked by the word), the last word's bytes store-masked.
void mask_row_to_bytes_avx512(const uint64_t* words, int64_t cols, uint8_t* out);

// The inverse: bit j of words[j / 64] = (in[j] != 0); the row's padding bits zero.
void mask_row_from_bytes_avx512(const uint8_t* in, int64_t cols, uint64_t* words);

}  // namespace nms::detail
