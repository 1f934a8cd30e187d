// `strata_client`: the Python face of client/client.hpp (docs/serving.md).
//
//   import numpy as np, strata_client
//   c = strata_client.Client(["127.0.0.1:7100", "127.0.0.1:7101"])
//   rows = c.lookup("ads", np.array([1, 2, 3], dtype=np.uint64))  # (3, dim) float32
//   rows, versions = c.lookup_with_versions("ads", keys)
//   c.prefetch("ads", keys)
//   c.push("ads", keys, grads)   # (len(keys), dim) float32, to a training gateway
//   c.tables()                   # [{"name": "ads", "dim": 9}]
//   c.keys("ads", 10)            # up to 10 stored keys, uint64 array
//   strata_client.key("C1", "68fd1e64")  # the key strata stores that value under
//
// Keys are taken as a contiguous uint64 array without a copy (other
// integer arrays are converted once). The returned float32 array owns the
// client's row buffer (moved into it, not copied). Network calls release
// the GIL. One Client per thread.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>

#include "client/client.hpp"
#include "model/features.hpp"

namespace py = pybind11;
using strata::client::serving_client;

namespace {

using key_array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using grad_array = py::array_t<float, py::array::c_style | py::array::forcecast>;

[[noreturn]] void raise(const strata::error& e) {
  if (e.code() == strata::errc::unavailable) throw std::runtime_error("strata: " + e.message());
  throw std::invalid_argument("strata: " + e.message());  // ValueError
}

std::span<const uint64_t> keys_of(const key_array& keys) {
  if (keys.ndim() != 1) throw std::invalid_argument("strata: keys must be a 1-d array");
  return {keys.data(), static_cast<size_t>(keys.size())};
}

// Moves a vector into a numpy array of `shape` (the array owns it).
template <class T>
py::array_t<T> to_array(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule free_it(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), free_it);
}

py::tuple lookup(serving_client& c, const std::string& table, const key_array& keys) {
  strata::client::rows rows;
  strata::status ok;
  {
    py::gil_scoped_release unlocked;
    ok = c.lookup_into(table, keys_of(keys), rows);
  }
  if (!ok) raise(ok.err());
  const auto n = static_cast<py::ssize_t>(rows.versions.size());
  return py::make_tuple(to_array(std::move(rows.weights), {n, py::ssize_t(rows.dim)}),
                        to_array(std::move(rows.versions), {n}));
}

}  // namespace

PYBIND11_MODULE(strata_client, m) {
  m.doc() = "strata serving client: embedding lookups over the binary protocol, with failover";
  // The C++ feature hashes themselves (model/features.hpp), not a copy.
  m.def(
      "key",
      [](const py::object& slot, const py::object& value) -> uint64_t {
        if (py::isinstance<py::int_>(slot)) {
          const auto n = slot.cast<int64_t>();
          if (n < 0 || n > int64_t{UINT32_MAX})
            throw std::invalid_argument("strata: unknown slot " + std::to_string(n));
          // A numbered slot: an int value is an integer feature, a str a categorical one.
          if (py::isinstance<py::int_>(value))
            return strata::model::integer_key(static_cast<uint32_t>(n), value.cast<int64_t>());
          return strata::model::categorical_key(static_cast<uint32_t>(n),
                                                value.cast<std::string>());
        }
        const std::string text =
            py::isinstance<py::str>(value) ? value.cast<std::string>() : py::str(value).cast<std::string>();
        auto k = strata::model::feature_key(slot.cast<std::string>(), text);
        if (!k) raise(k.err());
        return *k;
      },
      py::arg("slot"), py::arg("value"),
      "The key strata stores a feature value under (docs/model.md): slot \"I1\"..\"I13\" "
      "(integer) or \"C1\"..\"C26\" (categorical) of criteo_tsv data, or a slot number "
      "(an int value: integer feature, a str: categorical). ValueError names an unknown slot");
  py::class_<serving_client>(m, "Client")
      .def(py::init([](const std::vector<std::string>& replicas, double timeout_s) {
             strata::client::client_options o;
             for (const auto& r : replicas) {
               auto e = strata::wire::parse_endpoint(r);
               if (!e) raise(e.err());
               o.replicas.push_back(*e);
             }
             o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
             auto c = serving_client::connect(std::move(o));
             if (!c) raise(c.err());
             return std::move(*c);
           }),
           py::arg("replicas"), py::arg("timeout_s") = 5.0,
           "Connect to the first answering replica of [\"host:port\", ...]")
      .def(
          "lookup",
          [](serving_client& c, const std::string& table, const key_array& keys) -> py::object {
            py::tuple both = lookup(c, table, keys);
            return both[0];
          },
          py::arg("table"), py::arg("keys"),
          "Rows of the keys as a (len(keys), dim) float32 array; unknown keys get the "
          "table's default vector")
      .def("lookup_with_versions", &lookup, py::arg("table"), py::arg("keys"),
           "(rows, versions): versions are uint64, 0 for the default vector")
      .def(
          "prefetch",
          [](serving_client& c, const std::string& table, const key_array& keys) {
            strata::status ok;
            {
              py::gil_scoped_release unlocked;
              ok = c.prefetch(table, keys_of(keys));
            }
            if (!ok) raise(ok.err());
          },
          py::arg("table"), py::arg("keys"), "Ask the serving node to bring keys into its cache")
      .def(
          "push",
          [](serving_client& c, const std::string& table, const key_array& keys,
             const grad_array& grads, uint64_t id) {
            const auto k = keys_of(keys);
            if (grads.ndim() != 2 || static_cast<size_t>(grads.shape(0)) != k.size())
              throw std::invalid_argument(
                  "strata: grads must be a (len(keys), dim) array, one row per key");
            strata::status ok;
            {
              py::gil_scoped_release unlocked;
              ok = c.push(table, k, {grads.data(), static_cast<size_t>(grads.size())}, id);
            }
            if (!ok) raise(ok.err());
          },
          py::arg("table"), py::arg("keys"), py::arg("grads"), py::arg("id") = 0,
          "Apply gradients (len(keys), dim) float32 to the keys' rows on a training cluster's "
          "gateway (async mode); returns once applied. Every push carries a push id (`id`, or "
          "a fresh random one for 0) that the shards apply once: a lost connection or a push "
          "applied only in part is re-sent with the same id; after an error, push(..., "
          "id=c.last_push_id) again is safe")
      .def(
          "tables",
          [](serving_client& c) {
            strata::expected<std::vector<strata::wire::table_info>> got =
                std::vector<strata::wire::table_info>{};
            {
              py::gil_scoped_release unlocked;
              got = c.tables();
            }
            if (!got) raise(got.err());
            py::list out;
            for (const auto& t : *got) {
              py::dict d;
              d["name"] = t.name;
              d["dim"] = t.dim;
              out.append(d);
            }
            return out;
          },
          "The served tables: [{\"name\": str, \"dim\": int}]")
      .def(
          "keys",
          [](serving_client& c, const std::string& table, uint32_t limit) {
            strata::expected<std::vector<uint64_t>> got = std::vector<uint64_t>{};
            {
              py::gil_scoped_release unlocked;
              got = c.list_keys(table, limit);
            }
            if (!got) raise(got.err());
            const auto n = static_cast<py::ssize_t>(got->size());
            return to_array(std::move(*got), {n});
          },
          py::arg("table"), py::arg("limit") = 10,
          "Up to `limit` (1..1000) keys stored in the table, a uint64 array: keys to look up")
      .def_property_readonly("last_push_id", &serving_client::last_push_id)
      .def_property_readonly("replica", &serving_client::current_replica)
      .def_property_readonly("failovers", &serving_client::failovers);
}
