// Uses only installed public headers: mask a matrix 2:4 and verify it.
#include <nmsparse/core/aligned_buffer.h>
#include <nmsparse/mask/standard.h>
#include <nmsparse/mask/verify.h>

#include <cstdio>

int main() {
  nms::Matrix w(8, 8);
  for (int64_t k = 0; k < w.size(); ++k) w.data()[k] = static_cast<float>((k * 37) % 11) - 5.0f;
  const nms::NmPattern p = nms::NmPattern::parse("2:4");
  const nms::BitMask mask = nms::mask_nm_magnitude(w.view(), p);
  const nms::NmVerifyReport r = nms::verify_nm(mask, p);
  std::printf("consumer: density %.2f, rows valid %d\n", r.density(), r.rows_valid());
  return r.rows_valid() && r.density() == 0.5 ? 0 : 1;
}
