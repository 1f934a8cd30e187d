#include "model/example.hpp"

namespace strata::model {

std::vector<uint64_t> batch::keys() const {
  size_t count = 0;
  for (const auto& e : examples) count += e.features.size();
  std::vector<uint64_t> out;
  out.reserve(count);
  for (const auto& e : examples)
    for (const auto& f : e.features) out.push_back(f.key);
  return out;
}

}  // namespace strata::model
