// serving_client::connect_manifest: kept apart from client.cpp so that the
// Python module (a shared object) links the client without the manifest
// parser and its dependencies.
#include "client/client.hpp"
#include "deploy/manifest.hpp"

namespace strata::client {

expected<serving_client> serving_client::connect_manifest(const std::filesystem::path& manifest) {
  auto m = deploy::load_manifest(manifest);
  if (!m) return m.err();
  client_options o;
  for (const auto& r : m->serving.replicas) o.replicas.push_back({r.host, r.port});
  if (o.replicas.empty() && m->serving.binary_port != 0)
    o.replicas.push_back({m->serving.bind_address, m->serving.binary_port});
  if (o.replicas.empty())
    return error(errc::invalid_argument,
                 manifest.string() + ": serving.replicas (or serving.binary_port) is needed");
  return connect(std::move(o));
}

}  // namespace strata::client
