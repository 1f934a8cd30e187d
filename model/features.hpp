// Feature keys: a raw feature value hashed together with its slot into a
// uint64 key, so equal strings in different slots are different features.
// Integer features are bucketized by log2 into keys of their own slots.
// Defined once here with golden vectors in tests/model/features_test.cpp:
// changing them invalidates every stored model.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/error.hpp"

namespace strata::model {

// Key of categorical value `value` in slot `slot`.
uint64_t categorical_key(uint32_t slot, std::string_view value);
// Key of an integer feature `v` in slot `slot`: bucket = v <= 0 ? v (as
// its own small bucket, clamped at -8) : 1 + floor(log2(v)).
uint64_t integer_key(uint32_t slot, int64_t v);
// An integer column's value as the readers take it: "42", "-1", or a float
// with an integral meaning such as DeepCTR's "260.0" (floored). False when
// it is neither.
bool parse_integer_value(std::string_view s, int64_t& out);
// libffm's field:feature pair.
uint64_t ffm_key(uint32_t field, uint64_t feature);

// The slot a slot name stands for, by the names feature_key takes:
// "I1".."I13" -> 0..12, "C1".."C26" -> 13..38, a plain number -> itself.
// invalid_argument names an unknown slot and the names it takes.
expected<uint32_t> slot_index(std::string_view slot);

// The key a user's feature value has in the trained table, by the
// criteo_tsv reader's slot names: "I1".."I13" are the integer columns
// (slots 0..12, `value` parsed as the reader does, "260.0" floored),
// "C1".."C26" the categorical ones (slots 13..38, `value`'s raw bytes). A
// plain slot number ("13") is a categorical slot of any format (csv: the
// listed integer columns come first). invalid_argument names an unknown
// slot (and the names it takes) or an integer value that does not parse.
// `strata key` and the Python module's key() call this.
expected<uint64_t> feature_key(std::string_view slot, std::string_view value);

}  // namespace strata::model
