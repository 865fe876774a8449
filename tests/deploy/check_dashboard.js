// Checks deploy/grafana/monta-alltoall.json:
//   - it parses, has a schemaVersion, unique panel ids, and every panel has a gridPos;
//   - every PromQL expression (panel targets and variable queries) uses only Monta's metric
//     names (as the planner and agent export them; histograms with _bucket/_sum/_count) or
//     Prometheus built-ins such as `up`;
//   - every template variable used ($x, ${x}, [[x]]) is defined (or is a Grafana built-in);
//   - the required variables (DS_PROMETHEUS datasource, node, scope, verify_scope) exist and
//     every panel and target uses the ${DS_PROMETHEUS} datasource;
//   - every expression over the verify metrics keeps their scope (layer, op) apart.
// Writes the expressions, with variables replaced by sample values, as recording rules into
// OUT_RULES so that the caller can have `promtool check rules` parse them.
// usage: node check_dashboard.js DASHBOARD.json OUT_RULES.yaml
"use strict";
const fs = require("fs");

const [file, outRules] = process.argv.slice(2);
const failures = [];
const fail = (m) => failures.push(m);

const counters = ["monta_strategy_decisions_total", "monta_benchmark_tasks_total", "monta_admission_reviews_total",
  "monta_rpc_requests_total", "monta_agent_benchmark_runs_total", "monta_verify_runs_total"];
const gauges = ["monta_node_state", "monta_node_lease_age_seconds", "monta_collective_busbw_bytes_per_second",
  "monta_alltoall_efficiency_ratio", "monta_curve_age_seconds", "monta_agent_registered",
  "monta_prediction_error_ratio", "monta_plan_regret_ratio", "monta_store_follower_lag_seconds"];
const histograms = ["monta_strategy_decision_duration_seconds", "monta_strategy_predicted_speedup_ratio",
  "monta_admission_duration_seconds", "monta_rpc_duration_seconds"];
const builtins = ["up", "scrape_duration_seconds", "scrape_samples_scraped"];
const allowed = new Set([...counters, ...gauges, ...builtins,
  ...histograms.flatMap((h) => [`${h}_bucket`, `${h}_sum`, `${h}_count`])]);

// PromQL words that are not metric names.
const promqlWords = new Set(("sum min max avg group stddev stdvar count count_values bottomk topk quantile " +
  "by without on ignoring group_left group_right bool and or unless offset atan2 " +
  "abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year " +
  "days_in_month delta deriv exp floor histogram_count histogram_sum histogram_fraction histogram_quantile " +
  "holt_winters hour idelta increase irate label_join label_replace ln log2 log10 minute month " +
  "predict_linear rate resets round scalar sgn sort sort_desc sqrt time timestamp vector year " +
  "avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time " +
  "stddev_over_time stdvar_over_time last_over_time present_over_time inf nan label_values").split(/\s+/));

let dash;
try {
  dash = JSON.parse(fs.readFileSync(file, "utf8"));
} catch (e) {
  console.error(`FAIL ${file} does not parse: ${e.message}`);
  process.exit(1);
}

if (typeof dash.schemaVersion !== "number" || dash.schemaVersion < 36) fail("schemaVersion >= 36");
const vars = ((dash.templating || {}).list || []);
const varNames = new Set(vars.map((v) => v.name));
const grafanaBuiltins = new Set(["__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
  "__range_ms", "__from", "__to", "__dashboard", "__name", "__org", "__user", "timeFilter", "__all"]);
const ds = vars.find((v) => v.name === "DS_PROMETHEUS");
if (!ds || ds.type !== "datasource" || ds.query !== "prometheus") fail("variable DS_PROMETHEUS: a prometheus datasource variable");
for (const name of ["node", "scope"]) {
  const v = vars.find((x) => x.name === name);
  if (!v || v.type !== "query") fail(`variable ${name}: a query variable`);
}

// Panels, rows' nested panels included.
const panels = [];
(function walk(list) {
  for (const p of list || []) {
    panels.push(p);
    walk(p.panels);
  }
})(dash.panels);
const ids = new Set();
const exprs = []; // [where, expr]
for (const p of panels) {
  const where = `panel ${p.id} "${p.title}"`;
  if (ids.has(p.id)) fail(`${where}: duplicate id`);
  ids.add(p.id);
  if (!p.gridPos || ["h", "w", "x", "y"].some((k) => typeof p.gridPos[k] !== "number")) fail(`${where}: gridPos`);
  if (p.type === "row") continue;
  if (!p.datasource || p.datasource.uid !== "${DS_PROMETHEUS}") fail(`${where}: datasource \${DS_PROMETHEUS}`);
  if (!p.targets || p.targets.length === 0) fail(`${where}: no targets`);
  for (const t of p.targets || []) {
    if (!t.datasource || t.datasource.uid !== "${DS_PROMETHEUS}") fail(`${where} ${t.refId}: datasource \${DS_PROMETHEUS}`);
    if (!t.expr) fail(`${where} ${t.refId}: no expr`);
    else exprs.push([`${where} ${t.refId}`, t.expr]);
  }
}
for (const v of vars.filter((x) => x.type === "query")) {
  const q = typeof v.query === "string" ? v.query : (v.query || {}).query;
  const m = /^label_values\((?:(.+),\s*)?(\w+)\)$/.exec(q || "");
  if (!m) fail(`variable ${v.name}: expected label_values(...), got ${q}`);
  else if (m[1]) exprs.push([`variable ${v.name}`, m[1]]);
}

// Metric names used by an expression.
function metricNames(expr) {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // strings
    .replace(/\$\{\w+(?::\w+)?\}|\$\w+|\[\[\w+\]\]/g, "5m") // variables
    .replace(/\[[^\]]*\]/g, "") // range selectors
    .replace(/\{[^}]*\}/g, "") // label matchers
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ""); // label lists
  const names = new Set();
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const w = m[0];
    if (promqlWords.has(w.toLowerCase())) continue;
    if (/^\d/.test(w) || /^(e\d+|[0-9]+[smhdwy])$/.test(w)) continue;
    names.add(w);
  }
  return names;
}
const used = new Set();
for (const [where, expr] of exprs) {
  const names = metricNames(expr);
  if (names.size === 0) fail(`${where}: no metric in ${expr}`);
  for (const n of names) {
    used.add(n);
    if (!allowed.has(n)) fail(`${where}: unknown metric ${n} in ${expr}`);
  }
}

// Variables used anywhere in the dashboard must be defined.
const text = JSON.stringify(dash);
for (const m of text.matchAll(/\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]/g)) {
  const name = m[1] || m[2] || m[3];
  if (!varNames.has(name) && !grafanaBuiltins.has(name)) fail(`variable $${name} is used but not defined`);
}

// Required panels (by what they show).
for (const [what, metric] of [["busbw", "monta_collective_busbw_bytes_per_second"],
  ["efficiency", "monta_alltoall_efficiency_ratio"], ["decisions", "monta_strategy_decisions_total"],
  ["predicted speedup", "monta_strategy_predicted_speedup_ratio_bucket"], ["node state", "monta_node_state"],
  ["benchmark failures", "monta_benchmark_tasks_total"], ["RPC latency", "monta_rpc_duration_seconds_bucket"],
  ["admission outcomes", "monta_admission_reviews_total"]]) {
  if (!used.has(metric)) fail(`no panel shows ${what} (${metric})`);
}
if (!panels.some((p) => p.type === "heatmap" || p.type === "state-timeline")) fail("no heat map / state timeline across nodes");
// A verify run's numbers mean different things per scope (one MoE layer or one dispatch op): every
// expression over them keeps the scope apart, by a matcher or a grouping on it.
for (const [where, expr] of exprs) {
  if (!/monta_(prediction_error_ratio|plan_regret_ratio|verify_runs_total)/.test(expr)) continue;
  if (where.startsWith("variable")) continue;
  if (!/scope/.test(expr)) fail(`${where}: verify metrics without their scope label in ${expr}`);
}
if (!vars.some((v) => v.name === "verify_scope")) fail("variable verify_scope: the verify panels' scope");

// Expressions as recording rules, for `promtool check rules` to parse.
const sample = (e) => e.replace(/\$__rate_interval|\$__interval|\$__range/g, "5m").replace(/\$\{?(\w+)\}?/g, ".*");
const lines = ["groups:", "- name: dashboard", "  rules:"];
exprs.forEach(([where, e], i) => {
  lines.push(`  - record: dashboard:expr_${i}`);
  lines.push(`    expr: ${JSON.stringify(sample(e))}`);
});
fs.writeFileSync(outRules, lines.join("\n") + "\n");

if (failures.length) {
  for (const f of failures) console.error("FAIL " + f);
  process.exit(1);
}
console.log(`dashboard ok: ${panels.length} panels, ${exprs.length} expressions, metrics: ${[...used].sort().join(" ")}`);
