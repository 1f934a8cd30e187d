// The fuzz entries: one per decoder of bytes that come from outside the
// process. Each runs one input through the production path (the same
// functions the servers and the bridge call) and returns 0; a crash, a
// sanitizer report, a leak, a slow input or a memory blow-up is a bug.
//
// libfuzzer_main.cpp wraps one entry for libFuzzer (fuzz build only,
// tests/fuzz/run.sh); fuzz_corpus_test.cpp replays every corpus file of
// every target through the same entries in every `make test`.
// docs/fuzzing.md says how to run them and how to add a crash to a corpus.
//
// Thread-safety: an entry is called by one thread at a time; entries with
// a fixture (a serving store, an actor system) build it on first use.
#pragma once

#include <cstddef>
#include <cstdint>

// Transport frames as the UCX bridge receives them (header + payload).
int strata_fuzz_frame(const uint8_t* data, size_t size);
// Serving wire frames as servers and clients read them off a TCP stream.
int strata_fuzz_wire(const uint8_t* data, size_t size);
// Raw HTTP requests to `strata serve`'s HTTP API.
int strata_fuzz_serving_http(const uint8_t* data, size_t size);
// Raw HTTP requests to the admin API.
int strata_fuzz_admin_http(const uint8_t* data, size_t size);
// Manifest text (YAML), parsed and validated.
int strata_fuzz_manifest(const uint8_t* data, size_t size);
// Data files; the first byte picks the format (Criteo TSV, CSV, libffm).
int strata_fuzz_reader(const uint8_t* data, size_t size);
