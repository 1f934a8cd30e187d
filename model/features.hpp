// Feature keys: a raw feature value hashed together with its slot into a
// uint64 key, so equal strings in different slots are different features.
// Integer features are bucketized by log2 into keys of their own slots.
// Defined once here with golden vectors in tests/model/features_test.cpp:
// changing them invalidates every stored model.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::model {

// Key of categorical value `value` in slot `slot`.
uint64_t categorical_key(uint32_t slot, std::string_view value);
// Key of an integer feature `v` in slot `slot`: bucket = v <= 0 ? v (as
// its own small bucket, clamped at -8) : 1 + floor(log2(v)).
uint64_t integer_key(uint32_t slot, int64_t v);
// libffm's field:feature pair.
uint64_t ffm_key(uint32_t field, uint64_t feature);

}  // namespace strata::model
