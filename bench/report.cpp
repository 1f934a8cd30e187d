#include "bench/report.hpp"

#include <cstdio>
#include <ostream>

namespace strata::bench {

void bench_report::add(bench_result result) {
  results_.push_back(std::move(result));
  if (stream_ == nullptr) return;
  if (json_) {
    *stream_ << to_json(results_.back()) << '\n';
  } else {
    std::vector<bench_result> one{results_.back()};
    bench_report tmp;
    tmp.results_ = std::move(one);
    tmp.print_table(*stream_);
  }
  stream_->flush();
}

static std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

static std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string bench_report::to_json(const bench_result& r) {
  return "{\"name\":\"" + escape(r.name) + "\",\"value\":" + number(r.value) + ",\"unit\":\"" +
         escape(r.unit) + "\",\"baseline\":\"" + escape(r.baseline) +
         "\",\"baseline_value\":" + number(r.baseline_value) + ",\"ratio\":" + number(r.ratio()) +
         "}";
}

void bench_report::print_json(std::ostream& out) const {
  for (const auto& r : results_) out << to_json(r) << '\n';
}

void bench_report::print_table(std::ostream& out) const {
  char line[256];
  for (const auto& r : results_) {
    std::snprintf(line, sizeof line, "%-26s %14.4g %-10s vs %-15s %14.4g  ratio %6.2fx\n",
                  r.name.c_str(), r.value, r.unit.c_str(), r.baseline.c_str(), r.baseline_value,
                  r.ratio());
    out << line;
  }
}

}  // namespace strata::bench
