// `strata render k8s MANIFEST [--image I] [--namespace N] [--ssd-size S]
// [--storage-class C] [--data-size S] [--checkpoint-size S]
// [--shared-storage-class C]`: Kubernetes objects for the manifest's cluster on
// stdout (deploy/render_k8s.hpp). The manifest is validated first; its
// secrets are read (or created, with create_if_missing) from this machine
// and rendered only into Secrets.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "deploy/commands.hpp"
#include "deploy/render_k8s.hpp"

namespace strata::cli {

void add_render_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("render", "deployment objects for a manifest");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto opts = std::make_shared<deploy::k8s_options>();
  auto* k8s = cmd->add_subcommand(
      "k8s", "Kubernetes objects: ConfigMap, Secret, headless Service, a StatefulSet per node");
  k8s->add_option("manifest", *path, "the manifest")->required();
  k8s->add_option("--image", opts->image, "container image with strata (default strata:latest)");
  k8s->add_option("--namespace", opts->namespace_name, "metadata.namespace of every object");
  k8s->add_option("--ssd-size", opts->ssd_size, "size of each SSD volume claim (default 100Gi)");
  k8s->add_option("--storage-class", opts->storage_class, "storage class of the SSD volumes");
  k8s->add_option("--data-size", opts->data_size, "size of the data volume (default 100Gi)");
  k8s->add_option("--checkpoint-size", opts->checkpoint_size,
                  "size of the shared checkpoint volume (default 100Gi)");
  k8s->add_option("--shared-storage-class", opts->shared_storage_class,
                  "storage class of the shared data and checkpoint volumes (ReadOnlyMany, "
                  "ReadWriteMany: e.g. NFS)");
  k8s->callback([path, opts, &exit_code] {
    auto m = deploy::load_manifest(*path);
    if (!m) {
      std::fprintf(stderr, "strata render k8s: %s\n", m.err().message().c_str());
      exit_code = 1;
      return;
    }
    auto fail = [&](const error& e) {
      std::fprintf(stderr, "strata render k8s: %s\n", e.message().c_str());
      exit_code = 1;
    };
    std::ifstream in(*path);
    std::stringstream text;
    text << in.rdbuf();
    // The secrets go into Secrets only; notes (a file created, a Secret to
    // create with kubectl) go to stderr, the objects to stdout.
    std::ostringstream notes;
    auto secrets = deploy::read_k8s_secrets(*m, notes);
    std::fputs(notes.str().c_str(), stderr);
    if (!secrets) return fail(secrets.err());
    auto objects = deploy::render_k8s(*m, text.str(), *opts, *secrets);
    if (!objects) return fail(objects.err());
    std::fputs(objects->c_str(), stdout);
    // The data the pods read is not on any volume yet.
    if (!m->data.path.empty() && !m->generate)
      std::fprintf(stderr,
                   "strata render k8s: copy %s into PersistentVolumeClaim %s-data as %s before "
                   "the pods start (they read %s/%s)\n",
                   m->data.path.c_str(), deploy::k8s_name(m->cluster.name).c_str(),
                   m->data.path.filename().c_str(), deploy::k8s_data_dir,
                   m->data.path.filename().c_str());
  });
}

}  // namespace strata::cli
