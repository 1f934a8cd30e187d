// `strata datagen`: synthetic Criteo-layout TSV from a planted logistic
// model (model/datagen.hpp), with a progress line on stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "deploy/commands.hpp"
#include "deploy/status_line.hpp"
#include "model/datagen.hpp"

namespace strata::cli {

void add_datagen_command(CLI::App& app, int& exit_code) {
  auto config = std::make_shared<model::datagen_config>();
  auto out = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "datagen",
      "synthetic Criteo-layout data (TSV) with a planted model; writes PATH and PATH.planted");
  cmd->add_option("--out", *out, "output file (TSV)")->required();
  cmd->add_option("--rows", config->rows, "examples to write")->capture_default_str();
  cmd->add_option("--keys", config->distinct_keys, "distinct categorical values, all 26 slots")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{26}, uint64_t{1} << 40));
  cmd->add_option("--seed", config->seed, "random seed")->capture_default_str();
  cmd->add_option("--zipf", config->zipf, "Zipf exponent of key popularity")->capture_default_str();
  cmd->callback([config, out, &exit_code] {
    config->output = *out;
    status_line line;
    const auto start = std::chrono::steady_clock::now();
    const uint64_t total = config->rows;
    auto quality = model::generate(*config, [&](uint64_t done) {
      char text[160];
      std::snprintf(text, sizeof text, "datagen: %llu/%llu rows (%.0f%%)",
                    static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                    total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
      line.update(text);
    });
    line.done();
    if (!quality) {
      std::cerr << "strata datagen: " << quality.err().to_string() << '\n';
      exit_code = 1;
      return;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("wrote %llu rows (%llu distinct keys, seed %llu) to %s in %.1f s\n",
                static_cast<unsigned long long>(config->rows),
                static_cast<unsigned long long>(config->distinct_keys),
                static_cast<unsigned long long>(config->seed), out->c_str(), seconds);
    std::printf("planted-model AUC: %.4f\nplanted-model logloss: %.4f\n", quality->auc,
                quality->logloss);
  });
}

}  // namespace strata::cli
