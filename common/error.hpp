// strata's one error type.
//
// Every fallible synchronous API returns `expected<T>` (or `status` for no
// value). Across actor messages the same codes travel as caf::error (added
// with the actor runtime). A code exists only if a caller can react to it
// differently from the others; the message says what failed and where (path,
// key, table, line). A cache miss is a result, never an error.
//
// Thread-safety: plain values, no shared state.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class errc : uint8_t {
  invalid_argument = 1,  // the caller passed something unusable (bad config, size mismatch)
  io_error,              // the OS refused a read/write/open; message names the path
  disk_full,             // no space left (ENOSPC / MDB_MAP_FULL); message names the path
  corrupt_data,          // a checksum, size or format check failed; names key/table/path
  format_mismatch,       // stored data written by an incompatible format or layout
  not_found,             // a named thing (file, table, environment) does not exist
  capacity_exceeded,     // a fixed-capacity structure cannot take more
  unavailable,           // a peer or backend is absent (e.g. no GPU)
};

std::string_view to_string(errc code);

class error {
 public:
  error(errc code, std::string message) : code_(code), message_(std::move(message)) {}
  errc code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt_data: row checksum mismatch for key 42 in table 'ads' (/data/shard0)"
  std::string to_string() const;

 private:
  errc code_;
  std::string message_;
};

// A minimal std::expected (C++23) for C++20: a value or an error.
template <class T>
class [[nodiscard]] expected {
 public:
  expected(T value) : v_(std::move(value)) {}
  expected(error err) : v_(std::move(err)) {}
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] expected<void> {
 public:
  expected() = default;
  expected(error err) : err_(std::move(err)), ok_(false) {}
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const error& err() const { return err_; }

 private:
  error err_{errc::invalid_argument, {}};
  bool ok_ = true;
};

using status = expected<void>;

// Invariant violations (bugs, never bad input) go through this one macro.
// It stays on in release builds: a parameter server that silently corrupts
// a model is worse than one that stops.
[[noreturn]] void assertion_failed(const char* expr, const char* file, int line, const char* msg);

}  // namespace strata

#define STRATA_ASSERT(cond, msg)                                    \
  do {                                                              \
    if (!(cond)) [[unlikely]]                                       \
      ::strata::assertion_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (false)

// Propagates the error of an expected<...> expression out of the caller.
#define STRATA_TRY(expr)                                      \
  do {                                                        \
    auto strata_try_result_ = (expr);                         \
    if (!strata_try_result_) return strata_try_result_.err(); \
  } while (false)
