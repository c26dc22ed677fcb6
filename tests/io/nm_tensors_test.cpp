#include "nmsparse/io/nm_tensors.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "nmsparse/mask/standard.h"
#include "testing/random.h"

namespace fs = std::filesystem;

namespace nms {
namespace {

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() /
         ("nmsparse_nm_tensors_" + name + "_" + std::to_string(::getpid()));
}

TEST(PackedNmMetadata, RoundTrip) {
  PackedNmMeta m;
  m.pattern = NmPattern::make(3, 8);
  m.axis = NmAxis::kCols;
  m.rows = 16;
  m.cols = 24;
  m.dtype = DType::kBF16;
  m.tensor_shape = {16, 24};
  const PackedNmMeta back = parse_packed_nm_metadata(packed_nm_metadata_json(m), "w");
  EXPECT_EQ(back.pattern, m.pattern);
  EXPECT_EQ(back.axis, m.axis);
  EXPECT_EQ(back.rows, 16);
  EXPECT_EQ(back.cols, 24);
  EXPECT_EQ(back.dtype, DType::kBF16);
  EXPECT_EQ(back.tensor_shape, m.tensor_shape);
}

TEST(PackedNmMetadata, HostileMetadataIsRefused) {
  const std::string good =
      R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4,8],)"
      R"("index_bits":2,"dtype":"F32","tensor_shape":[4,8],"layout":"matrix"})";
  EXPECT_NO_THROW(parse_packed_nm_metadata(good, "w"));
  const std::pair<std::string, std::string> bad[] = {
      {"not json", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {R"({"format":"other"})", "unknown format 'other'"},
      {R"({"format":"nmsparse-nm","version":2})", "version 2 is not supported"},
      {R"({"format":"nmsparse-nm","version":1,"n":5,"m":4})", "exceeds group size"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"diag"})", "axis must be"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4]})",
       "shape must have 2 dimensions"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4,8],"index_bits":3})",
       "index_bits 3"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4,8],"index_bits":2,"dtype":"I8"})",
       "values dtype"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4,8],"index_bits":2,"dtype":"F32","tensor_shape":[4,9],"layout":"matrix"})",
       "does not map"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[4,6],"index_bits":2,"dtype":"F32","tensor_shape":[4,6],"layout":"matrix"})",
       "not a multiple of m"},
      {R"({"format":"nmsparse-nm","version":1,"n":2,"m":4,"axis":"rows","shape":[-4,8]})",
       "not a non-negative integer"},
  };
  for (const auto& [text, fragment] : bad) {
    try {
      parse_packed_nm_metadata(text, "w");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

TEST(PackedNm, WriteFindReadRoundTrip) {
  Matrix w = testing::random_matrix(8, 16, 3);
  const NmPattern p = NmPattern::make(2, 4);
  apply_mask(w.view(), mask_nm_magnitude(w.view(), p));
  const CompressedNm c = nm_compress(w.view(), p);
  PackedNmMeta meta{p, NmAxis::kRows, 8, 16, DType::kF32, {8, 16}, MatrixLayout::kMatrix};
  const fs::path path = scratch("roundtrip");
  {
    SafetensorsWriter writer(path, packed_nm_specs("layer", meta),
                             {{packed_nm_metadata_key("layer"), packed_nm_metadata_json(meta)}});
    write_packed_nm(writer, "layer", meta, c);
    writer.commit();
  }
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto entries = find_packed_nm(f);
  ASSERT_EQ(entries.size(), 1u);
  const Matrix back = nm_decompress(read_packed_nm(f, entries[0]));
  for (int64_t k = 0; k < w.size(); ++k) ASSERT_EQ(back.data()[k], w.data()[k]);
  fs::remove(path);
}

TEST(PackedNm, MissingPartIsAnError) {
  PackedNmMeta meta{NmPattern::make(2, 4), NmAxis::kRows, 4, 8, DType::kF32, {4, 8},
                    MatrixLayout::kMatrix};
  const fs::path path = scratch("missing");
  const auto specs = packed_nm_specs("layer", meta);
  write_safetensors(path, {{specs[0], std::vector<std::byte>(4 * 4 * 4)}},
                    {{packed_nm_metadata_key("layer"), packed_nm_metadata_json(meta)}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_THROW(find_packed_nm(f), Error);
  fs::remove(path);
}

// Other annotations share the "nmsparse." prefix (training checkpoints carry
// "nmsparse.train.config"): without a ".values" or ".indices" part they are not packed tensors.
TEST(PackedNm, OtherPrefixedMetadataIsNotAPackedTensor) {
  const fs::path path = scratch("annotation");
  write_safetensors(path, {{{"model.w", DType::kF32, {2}}, std::vector<std::byte>(8)}},
                    {{"nmsparse.train.config", "{\"model\": \"mlp\"}"}, {"nmsparse", "{}"}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(find_packed_nm(f).empty());
  fs::remove(path);
}

TEST(Sparse24InSafetensors, RoundTrip) {
  Matrix w = testing::random_matrix(4, 16, 4);
  apply_mask(w.view(), mask_nm_magnitude(w.view(), NmPattern::make(2, 4)));
  const Sparse24Bitmask s = sparse24_from_dense(w.view());
  const fs::path path = scratch("s24");
  {
    SafetensorsWriter writer(path, sparse24_specs("w", 4, 16, DType::kF32));
    write_sparse24(writer, "w", s);
    writer.commit();
  }
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto entries = find_sparse24(f);
  ASSERT_EQ(entries.size(), 1u);
  const Matrix back = sparse24_to_dense(read_sparse24(f, entries[0]));
  for (int64_t k = 0; k < w.size(); ++k) ASSERT_EQ(back.data()[k], w.data()[k]);
  fs::remove(path);
}

TEST(TensorMatrix, ConvIsNhwcAndInvertible) {
  const std::vector<int64_t> shape = {2, 3, 2, 2};  // Cout, Cin, kh, kw
  const auto ms = tensor_matrix_shape(shape);
  ASSERT_TRUE(ms);
  EXPECT_EQ(ms->layout, MatrixLayout::kConv);
  EXPECT_EQ(ms->rows, 2);
  EXPECT_EQ(ms->cols, 12);
  std::vector<float> t(24), m(24), back(24);
  for (int k = 0; k < 24; ++k) t[k] = static_cast<float>(k);
  tensor_to_matrix(t.data(), shape, ms->layout, m.data());
  // matrix(o, s*Cin + c) = tensor(o, c, s): o=1, s=3, c=2 -> tensor index 1*12 + 2*4 + 3 = 23.
  EXPECT_EQ(m[1 * 12 + 3 * 3 + 2], 23.0f);
  matrix_to_tensor(m.data(), shape, ms->layout, back.data());
  EXPECT_EQ(back, t);
  EXPECT_FALSE(tensor_matrix_shape({5}));
  EXPECT_EQ(tensor_matrix_shape({2, 3, 4})->rows, 6);
}

}  // namespace
}  // namespace nms
