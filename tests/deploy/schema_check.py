#!/usr/bin/env python3
"""Checks manifests against deploy/manifest.schema.json (JSON Schema 2020-12).

Usage: schema_check.py SCHEMA FILE...   One line per file: "FILE: valid" or
"FILE: invalid: <first error>". Exit 0 when it could judge every file (the
verdicts are the output), 77 when jsonschema or PyYAML is missing (the
caller skips with that reason). A test-only tool: Debian's
python3-jsonschema and python3-yaml (deploy/install-deps.sh installs them).
"""
import json
import sys

try:
    import jsonschema
    import yaml
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"schema_check: {e}", file=sys.stderr)
    sys.exit(77)


def main() -> int:
    schema = json.load(open(sys.argv[1]))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sys.argv[2:]:
        try:
            doc = yaml.safe_load(open(path))
        except yaml.YAMLError as e:
            print(f"{path}: invalid: YAML: {e}".replace("\n", " "))
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            print(f"{path}: invalid: {where}: {errors[0].message}".replace("\n", " "))
        else:
            print(f"{path}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
