// Validates a multi-document Kubernetes YAML stream offline with the npm
// package kubernetes-models (its bundled OpenAPI schemas; no cluster, no
// download). Usage: node k8s_check.js FILE. Prints "ok: Kind/name ..." or
// the first invalid object and its errors (exit 1). Exit 2 when the
// packages are missing (the caller skips with that reason). Test-only:
// deploy/install-deps.sh installs kubernetes-models and yaml (pinned in
// tests/deploy/npm) into .ci/tools.
let YAML, models;
try {
  YAML = require("yaml");
  models = {
    "v1/ConfigMap": require("kubernetes-models/v1").ConfigMap,
    "v1/Secret": require("kubernetes-models/v1").Secret,
    "v1/Service": require("kubernetes-models/v1").Service,
    "v1/PersistentVolumeClaim": require("kubernetes-models/v1").PersistentVolumeClaim,
    "apps/v1/StatefulSet": require("kubernetes-models/apps/v1").StatefulSet,
  };
} catch (e) {
  console.error("k8s_check: " + e.message.split("\n")[0]);
  process.exit(2);
}
const fs = require("fs");
const docs = YAML.parseAllDocuments(fs.readFileSync(process.argv[2], "utf8"));
const seen = [];
for (const doc of docs) {
  if (doc.errors.length) {
    console.log("invalid YAML: " + doc.errors[0].message);
    process.exit(1);
  }
  const obj = doc.toJS();
  if (obj === null) continue;
  const Model = models[obj.apiVersion + "/" + obj.kind];
  if (!Model) {
    console.log("unexpected object " + obj.apiVersion + "/" + obj.kind);
    process.exit(1);
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    console.log("invalid " + obj.kind + "/" + (obj.metadata || {}).name + ": " + e.message);
    process.exit(1);
  }
  seen.push(obj.kind + "/" + obj.metadata.name);
}
console.log("ok: " + seen.join(" "));
