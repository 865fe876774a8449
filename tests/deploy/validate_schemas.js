// Validates rendered Kubernetes manifests offline against the OpenAPI schemas bundled in
// kubernetes-models (core APIs), @kubernetes-models/cert-manager and
// @kubernetes-models/prometheus-operator (the CRDs' published schemas):
//   1. JSON-schema validation (types, enums, required fields, formats), per object;
//   2. unknown or misspelled fields: the schemas allow extra properties, so every object is
//      also written as a TypeScript literal typed with the model's interface, and `tsc
//      --noEmit` reports excess properties at any depth.
// usage: node validate_schemas.js OUT_DIR FILE.yaml...   (NODE_PATH = tests/deploy/node_modules)
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const yaml = require("js-yaml");

const [outDir, ...files] = process.argv.slice(2);
if (!outDir || files.length === 0) {
  console.error("usage: validate_schemas.js OUT_DIR FILE.yaml...");
  process.exit(2);
}
const nodeModules = process.env.NODE_PATH;

// apiVersion -> module path prefix that holds one class (and .d.ts) per kind.
function modulePrefix(apiVersion) {
  const crds = {
    "cert-manager.io/": "@kubernetes-models/cert-manager/",
    "monitoring.coreos.com/": "@kubernetes-models/prometheus-operator/",
  };
  for (const [group, mod] of Object.entries(crds)) {
    if (apiVersion.startsWith(group)) return mod + apiVersion;
  }
  return "kubernetes-models/" + apiVersion;
}

const errors = [];
const tsLines = [];
let count = 0;
for (const file of files) {
  const docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
  for (const doc of docs) {
    const id = `${path.basename(file)}: ${doc.kind} ${(doc.metadata || {}).namespace || "-"}/${(doc.metadata || {}).name}`;
    if (!doc.apiVersion || !doc.kind) {
      errors.push(`${id}: no apiVersion/kind`);
      continue;
    }
    const mod = modulePrefix(doc.apiVersion);
    let Model;
    try {
      Model = require(`${mod}/${doc.kind}`)[doc.kind];
    } catch (e) {
      errors.push(`${id}: no schema for ${doc.apiVersion} ${doc.kind} (${mod}/${doc.kind})`);
      continue;
    }
    if (typeof Model !== "function") {
      errors.push(`${id}: ${mod}/${doc.kind} exports no model`);
      continue;
    }
    try {
      new Model(doc).validate();
    } catch (e) {
      errors.push(`${id}: ${e.message}`);
    }
    const v = `o${count}`;
    tsLines.push(`// ${id}`);
    tsLines.push(`import { I${doc.kind} as T${count} } from "${mod}/${doc.kind}";`);
    tsLines.push(`export const ${v}: T${count} = ${JSON.stringify(doc, null, 2)};`);
    count++;
  }
}

// Excess-property check with the models' TypeScript interfaces.
fs.mkdirSync(outDir, { recursive: true });
const tsFile = path.join(outDir, "manifests.ts");
fs.writeFileSync(tsFile, tsLines.join("\n") + "\n");
fs.writeFileSync(
  path.join(outDir, "tsconfig.json"),
  JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      target: "es2020",
      module: "commonjs",
      moduleResolution: "node",
      baseUrl: nodeModules,
      skipLibCheck: true,
      types: [],
    },
    files: [tsFile],
  }),
);
try {
  execFileSync(process.execPath, [path.join(nodeModules, "typescript/bin/tsc"), "-p", outDir, "--pretty", "false"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
} catch (e) {
  const out = (e.stdout || "").toString() + (e.stderr || "").toString();
  // Point each TypeScript error back at its object.
  const src = fs.readFileSync(tsFile, "utf8").split("\n");
  for (const line of out.split("\n").filter((l) => l.trim())) {
    const m = /manifests\.ts\((\d+),\d+\): (.*)$/.exec(line);
    if (!m) {
      errors.push(`tsc: ${line}`);
      continue;
    }
    let i = Number(m[1]) - 1;
    while (i > 0 && !src[i].startsWith("// ")) i--;
    errors.push(`${src[i].slice(3)}: line ${m[1]}: ${m[2]}`);
  }
}

if (errors.length) {
  for (const e of errors) console.error("FAIL " + e);
  console.error(`${errors.length} schema error(s) in ${count} objects`);
  process.exit(1);
}
console.log(`schemas ok: ${count} objects (JSON schema + no unknown fields)`);
