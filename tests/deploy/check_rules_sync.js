// The PrometheusRule in the kustomize base must carry exactly the groups of the plain rules
// file that promtool checks and unit-tests (deploy/prometheus/sync-prometheusrule.sh
// regenerates it). Also: every alert has a severity label and summary/description.
// And every alert has promtool unit tests where it fires and where it stays quiet.
// usage: node check_rules_sync.js monta-rules.yaml monta-rules_test.yaml RENDERED.yaml
"use strict";
const fs = require("fs");
const assert = require("assert");
const yaml = require("js-yaml");

const [rulesFile, testFile, crFile] = process.argv.slice(2);
const plain = yaml.load(fs.readFileSync(rulesFile, "utf8"));
const crs = yaml.loadAll(fs.readFileSync(crFile, "utf8")).filter((d) => d && d.kind === "PrometheusRule");
if (crs.length !== 1) {
  console.error(`FAIL expected one PrometheusRule in ${crFile}, found ${crs.length}`);
  process.exit(1);
}
try {
  assert.deepStrictEqual(crs[0].spec.groups, plain.groups);
} catch (e) {
  console.error("FAIL PrometheusRule spec.groups differ from " + rulesFile +
    " (run deploy/prometheus/sync-prometheusrule.sh):\n" + e.message);
  process.exit(1);
}
const problems = [];
const alerts = plain.groups.flatMap((g) => g.rules).filter((r) => r.alert);
for (const r of alerts) {
  if (!["warning", "critical", "info"].includes((r.labels || {}).severity)) problems.push(`${r.alert}: severity label`);
  for (const a of ["summary", "description"]) if (!(r.annotations || {})[a]) problems.push(`${r.alert}: ${a} annotation`);
}
for (const name of ["MontaNodeEfficiencyLow", "MontaCurveStale", "MontaBenchmarkFailures", "MontaPlannerDown", "MontaNodeStale"]) {
  if (!alerts.some((r) => r.alert === name)) problems.push(`missing alert ${name}`);
}
const unit = yaml.load(fs.readFileSync(testFile, "utf8"));
const cases = unit.tests.flatMap((t) => t.alert_rule_test || []);
for (const r of alerts) {
  const mine = cases.filter((c) => c.alertname === r.alert);
  if (!mine.some((c) => (c.exp_alerts || []).length > 0)) problems.push(`${r.alert}: no unit test where it fires`);
  if (!mine.some((c) => (c.exp_alerts || []).length === 0)) {
    problems.push(`${r.alert}: no unit test where it stays quiet`);
  }
}
if (problems.length) {
  for (const p of problems) console.error("FAIL " + p);
  process.exit(1);
}
console.log(`rules in sync: ${alerts.length} alerts in ${plain.groups.length} group(s)`);
