// Checks the rendered manifests against Monta's deployment contract (what the schemas
// cannot say): webhook conventions, cross-object references, least privilege, the
// agent's node identity and host access, and the GPU overlay's choices.
// usage: node check_policy.js base|gpu|dev|ha RENDERED.yaml   (NODE_PATH = tests/deploy/node_modules)
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");

const [variant, file] = process.argv.slice(2);
const objs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
const failures = [];
let checks = 0;
function check(cond, msg) {
  checks++;
  if (!cond) failures.push(msg);
}
function one(kind, name) {
  const found = objs.filter((o) => o.kind === kind && (!name || o.metadata.name === name));
  check(found.length === 1, `exactly one ${kind}${name ? " " + name : ""} (found ${found.length})`);
  return found[0] || {};
}
const NS = "monta-system";
const clusterScoped = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding",
  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]);
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => (labels || {})[k] === v);
const podSpec = (o) => ((o.spec || {}).template || {}).spec || {};
const container = (o, name) => (podSpec(o).containers || []).find((c) => c.name === name) || {};
const portByName = (c, name) => (c.ports || []).find((p) => p.name === name);

// --- namespaces -----------------------------------------------------------------------
for (const o of objs) {
  const id = `${o.kind} ${o.metadata.name}`;
  if (clusterScoped.has(o.kind)) check(!o.metadata.namespace, `${id}: cluster-scoped, no namespace`);
  else check(o.metadata.namespace === NS, `${id}: in namespace ${NS}`);
}
one("Namespace", NS);

// --- planner ----------------------------------------------------------------------------
const planner = one("Deployment", "monta-planner");
const pc = container(planner, "planner");
const pspec = podSpec(planner);
const ha = variant === "ha";
check(planner.spec.replicas === (ha ? 3 : 1),
  ha ? "ha planner: three replicas" : "planner: one replica (state lives in the process)");
check(pspec.serviceAccountName === "monta-planner", "planner: own ServiceAccount");
check(pspec.securityContext.runAsNonRoot === true, "planner: runAsNonRoot");
check(pc.securityContext.readOnlyRootFilesystem === true, "planner: read-only root fs");
check(pc.securityContext.allowPrivilegeEscalation === false, "planner: no privilege escalation");
check(JSON.stringify(pc.securityContext.capabilities) === JSON.stringify({ drop: ["ALL"] }),
  "planner: drops ALL capabilities, adds none");
// Probes reach the plaintext health port: the kubelet presents no client certificate.
for (const p of ["startupProbe", "readinessProbe", "livenessProbe"]) {
  check(pc[p] && pc[p].grpc && pc[p].grpc.port === 7404, `planner: ${p} is a grpc probe on the health port 7404`);
}
// A replica is ready while it leads or its cache is in sync (every replica serves reads
// and the webhook); without an election the plain service says the same.
check(((pc.readinessProbe || {}).grpc || {}).service === (ha ? "monta.v1.Planner.read" : undefined),
  ha ? "ha planner: readiness on monta.v1.Planner.read" : "planner: readiness on the default health service");
check(pc.resources && pc.resources.requests && pc.resources.requests.cpu && pc.resources.requests.memory &&
  pc.resources.limits && pc.resources.limits.memory, "planner: cpu/memory requests and a memory limit");
for (const [name, port] of [["grpc", 7400], ["metrics", 7401], ["webhook", 8443], ["health", 7404]]) {
  check((portByName(pc, name) || {}).containerPort === port, `planner: container port ${name}=${port}`);
}
const args = pc.args || [];
check(!args.includes("--insecure"), "planner: never --insecure");
for (const want of ["--listen=0.0.0.0:7400", "--metrics_listen=0.0.0.0:7401", "--health_listen=0.0.0.0:7404"]) {
  check(args.includes(want), `planner: arg ${want}`);
}
const flag = (name) => (args.find((a) => a.startsWith(`--${name}=`)) || "").split("=")[1];
const svc = one("Service", "monta-planner");
check(matches(svc.spec.selector, planner.spec.template.metadata.labels), "Service selects the planner pods");
const svcPorts = Object.fromEntries((svc.spec.ports || []).map((p) => [p.name, p]));
for (const [name, port] of [["grpc", 7400], ["metrics", 7401], ["webhook", 443]]) {
  check(svcPorts[name] && svcPorts[name].port === port, `Service port ${name}=${port}`);
  const target = svcPorts[name] && svcPorts[name].targetPort;
  check(portByName(pc, target) || (pc.ports || []).some((p) => p.containerPort === target),
    `Service port ${name} targets a planner container port`);
}
check(portByName(pc, svcPorts.webhook && svcPorts.webhook.targetPort).containerPort === 8443,
  "Service 443 -> planner 8443");
const pdb = one("PodDisruptionBudget", "monta-planner");
check(matches(pdb.spec.selector.matchLabels, planner.spec.template.metadata.labels), "PDB selects the planner");
check(pdb.spec.maxUnavailable === 1 && pdb.spec.minAvailable === undefined,
  "PDB: one replica may be evicted (a drain never blocks)");

// --- store: SQLite in the pod, or etcd (the ha overlay) -----------------------------------
if (!ha) {
  check(flag("store") === undefined && objs.every((o) => o.kind !== "StatefulSet"),
    `${variant}: one planner on SQLite, no etcd`);
} else {
  check(flag("store") === "etcd", "ha planner: --store=etcd");
  const env = Object.fromEntries((pc.env || []).map((e) => [e.name, e]));
  check(env.POD_NAME && env.POD_NAME.valueFrom.fieldRef.fieldPath === "metadata.name" &&
    flag("replica_id") === "$(POD_NAME)", "ha planner: --replica_id is the pod's name");
  const strategy = planner.spec.strategy || {};
  check(strategy.type === "RollingUpdate" && (strategy.rollingUpdate || {}).maxUnavailable === 1,
    "ha planner: rolling update, one replica away at a time (two keep serving)");
  const anti = (((pspec.affinity || {}).podAntiAffinity || {}).requiredDuringSchedulingIgnoredDuringExecution || []);
  check(anti.some((t) => t.topologyKey === "kubernetes.io/hostname" &&
    matches(t.labelSelector.matchLabels, planner.spec.template.metadata.labels)),
    "ha planner: replicas on different nodes (required pod anti-affinity)");
  // Mutual TLS to etcd with etcd's own CA, from a mounted cert-manager secret.
  const etcdClient = one("Certificate", "monta-etcd-planner");
  const etcdCa = one("Certificate", "monta-etcd-ca");
  check(etcdCa.spec.isCA === true && (etcdClient.spec.issuerRef || {}).name === "monta-etcd-ca" &&
    one("Issuer", "monta-etcd-ca").spec.ca.secretName === etcdCa.spec.secretName,
    "ha: the planner's etcd client certificate comes from etcd's own CA");
  check((etcdClient.spec.usages || []).includes("client auth"), "ha: etcd client certificate for client auth");
  const etcdVol = (pspec.volumes || []).find((v) => v.secret && v.secret.secretName === etcdClient.spec.secretName);
  const etcdMount = etcdVol && (pc.volumeMounts || []).find((m) => m.name === etcdVol.name);
  check(etcdMount && etcdMount.readOnly === true && flag("etcd_ca_file") === `${etcdMount.mountPath}/ca.crt` &&
    flag("etcd_cert_file") === `${etcdMount.mountPath}/tls.crt` && flag("etcd_key_file") === `${etcdMount.mountPath}/tls.key`,
    "ha planner: --etcd_ca_file/--etcd_cert_file/--etcd_key_file point into the mounted client certificate");
  check(!args.includes("--etcd_insecure"), "ha planner: never --etcd_insecure");
  // etcd: three members, one per node, mutual TLS for clients and peers.
  const etcd = one("StatefulSet", "monta-etcd");
  const ec = container(etcd, "etcd");
  const espec = podSpec(etcd);
  const ecmd = ec.command || [];
  const eflag = (name) => (ecmd.find((a) => a.startsWith(`--${name}=`)) || "").split("=").slice(1).join("=");
  check(etcd.spec.replicas === 3 && etcd.spec.podManagementPolicy === "Parallel", "ha etcd: three members, started together");
  const members = [0, 1, 2].map((i) => `monta-etcd-${i}.${etcd.spec.serviceName}.${NS}.svc`);
  check(JSON.stringify(flag("etcd_endpoints").split(",")) === JSON.stringify(members.map((m) => `${m}:2379`)),
    "ha planner: --etcd_endpoints names the three members' stable DNS names");
  check(eflag("initial-cluster") === members.map((m, i) => `monta-etcd-${i}=https://${m}:2380`).join(","),
    "ha etcd: --initial-cluster names the three members over https");
  const headless = one("Service", etcd.spec.serviceName);
  check(headless.spec.clusterIP === "None" && headless.spec.publishNotReadyAddresses === true &&
    matches(headless.spec.selector, etcd.spec.template.metadata.labels), "ha etcd: headless Service of the members");
  for (const f of ["--client-cert-auth", "--peer-client-cert-auth"]) check(ecmd.includes(f), `ha etcd: ${f}`);
  const server = one("Certificate", "monta-etcd-server");
  check((server.spec.issuerRef || {}).name === "monta-etcd-ca" &&
    (server.spec.dnsNames || []).includes(`*.${etcd.spec.serviceName}.${NS}.svc`),
    "ha etcd: server certificate from etcd's CA covers the members' names");
  const stls = (espec.volumes || []).find((v) => v.secret && v.secret.secretName === server.spec.secretName);
  const stlsMount = stls && (ec.volumeMounts || []).find((m) => m.name === stls.name);
  check(stlsMount && stlsMount.readOnly === true &&
    ["trusted-ca-file", "peer-trusted-ca-file"].every((f) => eflag(f) === `${stlsMount.mountPath}/ca.crt`) &&
    ["cert-file", "peer-cert-file"].every((f) => eflag(f) === `${stlsMount.mountPath}/tls.crt`) &&
    ["key-file", "peer-key-file"].every((f) => eflag(f) === `${stlsMount.mountPath}/tls.key`),
    "ha etcd: client and peer TLS files from the mounted server certificate");
  check(eflag("listen-client-urls").startsWith("https://") && eflag("listen-peer-urls").startsWith("https://"),
    "ha etcd: clients and peers over https only");
  check(eflag("auto-compaction-mode") === "periodic" && eflag("auto-compaction-retention"),
    "ha etcd: automatic compaction");
  const eanti = (((espec.affinity || {}).podAntiAffinity || {}).requiredDuringSchedulingIgnoredDuringExecution || []);
  check(eanti.some((t) => t.topologyKey === "kubernetes.io/hostname"), "ha etcd: members on different nodes");
  check((etcd.spec.volumeClaimTemplates || []).some((t) => (ec.volumeMounts || []).some((m) => m.name === t.metadata.name &&
    eflag("data-dir").startsWith(m.mountPath))), "ha etcd: --data-dir on the member's own volume");
  check(ec.securityContext.readOnlyRootFilesystem === true && espec.securityContext.runAsNonRoot === true &&
    JSON.stringify(ec.securityContext.capabilities) === JSON.stringify({ drop: ["ALL"] }), "ha etcd: hardened like the planner");
  const epdb = one("PodDisruptionBudget", "monta-etcd");
  check(epdb.spec.minAvailable === 2 && matches(epdb.spec.selector.matchLabels, etcd.spec.template.metadata.labels),
    "ha etcd: PDB keeps two of three (the quorum)");
  const enp = one("NetworkPolicy", "monta-etcd");
  check((enp.spec.ingress || []).some((r) => (r.ports || []).some((p) => p.port === 2379) &&
    (r.from || []).every((f) => f.podSelector && matches(f.podSelector.matchLabels, planner.spec.template.metadata.labels))),
    "ha etcd: clients from the planner pods");
  check((enp.spec.ingress || []).every((r) => !(r.ports || []).some((p) => p.port === 2379 || p.port === 2380) ||
    (r.from || []).every((f) => f.podSelector && !f.namespaceSelector)), "ha etcd: 2379/2380 only from pods of this namespace");
}

// --- webhook TLS (cert-manager) ---------------------------------------------------------
const cert = one("Certificate", "monta-planner-webhook");
const issuer = one("Issuer", cert.spec && cert.spec.issuerRef && cert.spec.issuerRef.name);
check(issuer.spec && issuer.spec.selfSigned !== undefined, "Issuer is self-signed");
check((cert.spec.issuerRef || {}).kind === "Issuer", "Certificate uses the namespaced Issuer");
check((cert.spec.dnsNames || []).includes(`${svc.metadata.name}.${NS}.svc`), "Certificate covers the Service DNS name");
const tlsVol = (pspec.volumes || []).find((v) => v.secret && v.secret.secretName === cert.spec.secretName);
check(tlsVol, "planner mounts the Certificate's secret");
const tlsMount = tlsVol && (pc.volumeMounts || []).find((m) => m.name === tlsVol.name);
check(tlsMount && tlsMount.readOnly === true, "TLS secret mounted read-only");
check(tlsMount && flag("tls_cert") === `${tlsMount.mountPath}/tls.crt` && flag("tls_key") === `${tlsMount.mountPath}/tls.key`,
  "--tls_cert/--tls_key point into the mounted secret");

// --- gRPC mutual TLS (cert-manager CA) -----------------------------------------------------
const caCert = one("Certificate", "monta-ca");
check(caCert.spec && caCert.spec.isCA === true, "monta-ca Certificate is a CA");
check((caCert.spec.issuerRef || {}).name === "monta-selfsigned", "monta-ca is self-signed (bootstrap Issuer)");
const caIssuer = one("Issuer", "monta-ca");
check(caIssuer.spec && caIssuer.spec.ca && caIssuer.spec.ca.secretName === caCert.spec.secretName,
  "Issuer monta-ca signs with the monta-ca Certificate's secret");
const grpcCert = one("Certificate", "monta-planner-grpc");
check((grpcCert.spec.issuerRef || {}).name === "monta-ca", "planner gRPC certificate from the monta CA");
check((grpcCert.spec.dnsNames || []).includes(`${svc.metadata.name}.${NS}.svc`),
  "planner gRPC certificate covers the Service DNS name agents dial");
const grpcVol = (pspec.volumes || []).find((v) => v.secret && v.secret.secretName === grpcCert.spec.secretName);
const grpcMount = grpcVol && (pc.volumeMounts || []).find((m) => m.name === grpcVol.name);
check(grpcMount && grpcMount.readOnly === true, "planner mounts its gRPC certificate read-only");
check(grpcMount && flag("tls_ca_file") === `${grpcMount.mountPath}/ca.crt` &&
  flag("tls_cert_file") === `${grpcMount.mountPath}/tls.crt` && flag("tls_key_file") === `${grpcMount.mountPath}/tls.key`,
  "planner --tls_ca_file/--tls_cert_file/--tls_key_file point into the gRPC certificate's secret");
const denyList = one("ConfigMap", "monta-planner-deny-list");
const denyVol = (pspec.volumes || []).find((v) => v.configMap && v.configMap.name === denyList.metadata.name);
const denyMount = denyVol && (pc.volumeMounts || []).find((m) => m.name === denyVol.name);
check(denyMount && denyMount.readOnly === true && !denyMount.subPath,
  "planner mounts its deny list read-only, as a directory (a subPath would never update)");
check(denyMount && Object.keys(denyList.data || {}).some((k) => flag("deny_list_file") === `${denyMount.mountPath}/${k}`),
  "planner --deny_list_file points into the mounted deny-list ConfigMap");
const operatorCert = one("Certificate", "monta-operator");
check((operatorCert.spec.uris || []).every((u) => u.startsWith("spiffe://monta/operator/")) &&
  (operatorCert.spec.uris || []).length === 1, "operator certificate names one spiffe://monta/operator/ identity");
check((operatorCert.spec.issuerRef || {}).name === "monta-ca", "operator certificate from the monta CA");

// --- NetworkPolicy: only agents (nodes), the API server and Prometheus reach the planner ----
const np = one("NetworkPolicy", "monta-planner");
check(matches(np.spec.podSelector.matchLabels, planner.spec.template.metadata.labels), "NetworkPolicy selects the planner");
check(JSON.stringify(np.spec.policyTypes) === '["Ingress"]', "NetworkPolicy restricts ingress");
const allowedPorts = new Set([7400, 7401, 7404, 8443]);
for (const [i, rule] of (np.spec.ingress || []).entries()) {
  check((rule.from || []).length > 0, `NetworkPolicy rule ${i}: names its sources (no allow-all)`);
  check((rule.ports || []).length > 0 && rule.ports.every((p) => allowedPorts.has(p.port)),
    `NetworkPolicy rule ${i}: only the planner's ports`);
  if ((rule.ports || []).some((p) => p.port === 7401)) {
    check(rule.from.every((f) => f.podSelector && f.podSelector.matchLabels &&
      f.podSelector.matchLabels["app.kubernetes.io/name"] === "prometheus"), "NetworkPolicy: /metrics from Prometheus only");
  }
}

// --- admission webhooks -----------------------------------------------------------------
const expectedRules = JSON.stringify([
  { apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"], scope: "Namespaced" },
  { apiGroups: ["batch"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["jobs"], scope: "Namespaced" },
].map((r) => Object.keys(r).sort().reduce((a, k) => ((a[k] = r[k]), a), {})));
const sortKeys = (r) => Object.keys(r).sort().reduce((a, k) => ((a[k] = r[k]), a), {});
for (const [kind, path, policy] of [["MutatingWebhookConfiguration", "/mutate", "Ignore"],
  ["ValidatingWebhookConfiguration", "/validate", "Ignore"]]) {
  const cfg = one(kind, "monta-planner");
  check((cfg.metadata.annotations || {})["cert-manager.io/inject-ca-from"] === `${NS}/${cert.metadata.name}`,
    `${kind}: cert-manager.io/inject-ca-from names the Certificate`);
  check((cfg.webhooks || []).length === 1, `${kind}: one webhook`);
  for (const w of cfg.webhooks || []) {
    const id = `${kind} ${w.name}`;
    check(JSON.stringify(w.admissionReviewVersions) === '["v1"]', `${id}: admissionReviewVersions [v1]`);
    check(w.sideEffects === "None", `${id}: sideEffects None`);
    check(w.timeoutSeconds === 5, `${id}: timeoutSeconds 5`);
    check(w.failurePolicy === policy, `${id}: failurePolicy ${policy}`);
    check(w.matchPolicy === "Equivalent", `${id}: matchPolicy Equivalent`);
    const s = (w.clientConfig || {}).service || {};
    check(s.name === svc.metadata.name && s.namespace === NS && s.port === 443 && s.path === path,
      `${id}: calls ${svc.metadata.name}.${NS}.svc:443${path}`);
    check(!(w.clientConfig || {}).caBundle, `${id}: caBundle left to cert-manager's injector`);
    check(JSON.stringify((w.rules || []).map(sortKeys)) === expectedRules, `${id}: CREATE pods and batch/v1 jobs only`);
    const exprs = (w.namespaceSelector || {}).matchExpressions || [];
    check(exprs.some((e) => e.key === "monta.io/admission" && e.operator === "In"),
      `${id}: only opted-in namespaces (monta.io/admission)`);
    check(exprs.some((e) => e.key === "kubernetes.io/metadata.name" && e.operator === "NotIn" &&
      e.values.includes(NS) && e.values.includes("kube-system")), `${id}: never kube-system or ${NS}`);
  }
}

// --- RBAC: least privilege ----------------------------------------------------------------
// Neither the planner nor the agent has a Kubernetes client. One read-only permission
// exists: the planner pod's node-labels sidecar may get and list nodes, with a token
// projected into that container alone.
const roles = objs.filter((o) => o.kind === "Role" || o.kind === "ClusterRole");
check(roles.length === 1 && roles[0].kind === "ClusterRole" && roles[0].metadata.name === "monta-node-reader",
  `one ClusterRole, monta-node-reader (found ${roles.map((r) => r.metadata.name).join(", ")})`);
check(JSON.stringify((roles[0] || {}).rules) ===
  JSON.stringify([{ apiGroups: [""], resources: ["nodes"], verbs: ["get", "list"] }]),
"monta-node-reader: get and list nodes, nothing else");
const bindings = objs.filter((o) => o.kind === "RoleBinding" || o.kind === "ClusterRoleBinding");
check(bindings.length === 1 && bindings[0].kind === "ClusterRoleBinding" &&
  JSON.stringify(bindings[0].roleRef) ===
  JSON.stringify({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "monta-node-reader" }) &&
  JSON.stringify(bindings[0].subjects) ===
  JSON.stringify([{ kind: "ServiceAccount", name: "monta-planner", namespace: NS }]),
"one binding: monta-node-reader to the monta-planner ServiceAccount");
const plannerSa = one("ServiceAccount", "monta-planner");
check(plannerSa.automountServiceAccountToken === false && pspec.automountServiceAccountToken === false,
  "planner pod: no API token mounted automatically");
const tokenVolumes = (pspec.volumes || []).filter((v) => v.projected &&
  (v.projected.sources || []).some((src) => src.serviceAccountToken)).map((v) => v.name);
const mountsToken = (c) => (c.volumeMounts || []).some((m) => tokenVolumes.includes(m.name) ||
  m.mountPath.startsWith("/var/run/secrets/kubernetes.io"));
check(!mountsToken(pc), "planner container: no API token");
const nl = container(planner, "node-labels");
check(nl.name === "node-labels" && mountsToken(nl), "planner pod: the node-labels sidecar holds the only token");
check(((nl.volumeMounts || []).find((m) => tokenVolumes.includes(m.name)) || {}).readOnly === true,
  "node-labels: token mounted read-only");
check(nl.securityContext && nl.securityContext.readOnlyRootFilesystem === true &&
  nl.securityContext.allowPrivilegeEscalation === false &&
  JSON.stringify(nl.securityContext.capabilities) === JSON.stringify({ drop: ["ALL"] }),
"node-labels: read-only root fs, no privilege escalation, drops ALL capabilities");
check(nl.resources && nl.resources.limits && nl.resources.limits.memory, "node-labels: memory limit");
for (const o of objs.filter((x) => x.kind === "Deployment" || x.kind === "DaemonSet")) {
  if (o === planner) continue;
  check(!(podSpec(o).volumes || []).some((v) => v.projected &&
    (v.projected.sources || []).some((src) => src.serviceAccountToken)), `${o.kind} ${o.metadata.name}: no API token`);
}

// --- where nodes sit: the fabric map and the node labels file --------------------------
const mountOf = (c, volumeName) => (c.volumeMounts || []).find((m) => m.name === volumeName);
const mapVol = (pspec.volumes || []).find((v) => v.configMap && v.configMap.name === "monta-fabric-map");
one("ConfigMap", "monta-fabric-map");
const mapMount = mapVol && mountOf(pc, mapVol.name);
check(mapMount && mapMount.readOnly === true && flag("fabric_map_file") &&
  flag("fabric_map_file").startsWith(mapMount.mountPath + "/"),
"planner: --fabric_map_file in the monta-fabric-map ConfigMap, mounted read-only");
const labelsFile = flag("fabric_node_labels_file") || "";
const labelsMount = (pc.volumeMounts || []).find((m) => labelsFile.startsWith(m.mountPath + "/"));
check(labelsMount && labelsMount.readOnly === true, "planner: --fabric_node_labels_file on a volume mounted read-only");
const sidecarMount = labelsMount && mountOf(nl, labelsMount.name);
check(sidecarMount && sidecarMount.mountPath === labelsMount.mountPath && sidecarMount.readOnly !== true,
  "node-labels: writes the planner's --fabric_node_labels_file volume at the same path");
for (const o of objs) {
  if (o.kind === "ClusterRole" || o.kind === "Role") {
    for (const r of o.rules || []) {
      check(!(r.verbs || []).includes("*") && !(r.resources || []).includes("*"), `${o.kind} ${o.metadata.name}: no wildcards`);
      check(!(r.resources || []).includes("secrets"), `${o.kind} ${o.metadata.name}: no secrets`);
    }
  }
}

// --- agent ------------------------------------------------------------------------------
const agent = one("DaemonSet", "monta-agent");
const aspec = podSpec(agent);
const ac = container(agent, "agent");
const agentSa = one("ServiceAccount", "monta-agent");
check(aspec.serviceAccountName === "monta-agent", "agent: own ServiceAccount");
check(agentSa.automountServiceAccountToken === false && aspec.automountServiceAccountToken === false,
  "agent: no API token mounted");
check(aspec.hostNetwork === true, "agent: hostNetwork (benchmark traffic on the node's NICs)");
check(aspec.dnsPolicy === "ClusterFirstWithHostNet", "agent: dnsPolicy ClusterFirstWithHostNet");
const env = Object.fromEntries((ac.env || []).map((e) => [e.name, e]));
check(env.NODE_NAME && env.NODE_NAME.valueFrom.fieldRef.fieldPath === "spec.nodeName", "agent: NODE_NAME from spec.nodeName");
check(env.POD_IP && env.POD_IP.valueFrom.fieldRef.fieldPath === "status.podIP", "agent: POD_IP from status.podIP");
const aargs = ac.args || [];
for (const want of ["--node_name=$(NODE_NAME)", "--bench_address=$(POD_IP)", "--planner=monta-planner.monta-system.svc:7400",
  "--metrics_listen=0.0.0.0:7402"]) {
  check(aargs.includes(want), `agent: arg ${want}`);
}
const sysfs = (aargs.find((a) => a.startsWith("--sysfs_root=")) || "").split("=")[1];
const sysVol = (aspec.volumes || []).find((v) => v.hostPath && v.hostPath.path === "/sys");
const sysMount = sysVol && (ac.volumeMounts || []).find((m) => m.name === sysVol.name);
check(sysMount && sysMount.readOnly === true && sysMount.mountPath === sysfs, "agent: host /sys read-only at --sysfs_root");
const hostPaths = (aspec.volumes || []).filter((v) => v.hostPath).map((v) => v.hostPath.path);
check(JSON.stringify(hostPaths.sort()) === '["/etc/monta/agent-tls","/sys"]',
  "agent: /sys and the node's own certificate directory are the only hostPaths");
check(!aargs.includes("--insecure"), "agent: never --insecure");
const tlsHostVol = (aspec.volumes || []).find((v) => v.hostPath && v.hostPath.path === "/etc/monta/agent-tls");
const agentTlsMount = tlsHostVol && (ac.volumeMounts || []).find((m) => m.name === tlsHostVol.name);
const aflag = (name) => (aargs.find((a) => a.startsWith(`--${name}=`)) || "").split("=")[1];
check(agentTlsMount && agentTlsMount.readOnly === true && aflag("tls_ca_file") === `${agentTlsMount.mountPath}/ca.crt` &&
  aflag("tls_cert_file") === `${agentTlsMount.mountPath}/tls.crt` && aflag("tls_key_file") === `${agentTlsMount.mountPath}/tls.key`,
  "agent: --tls_* files from the node's certificate directory, mounted read-only");
check((portByName(ac, "metrics") || {}).containerPort === 7402, "agent: metrics port 7402");
check(ac.securityContext.privileged !== true && ac.securityContext.allowPrivilegeEscalation === false,
  "agent: not privileged, no privilege escalation");
check(ac.securityContext.readOnlyRootFilesystem === true, "agent: read-only root fs");
const caps = ac.securityContext.capabilities || {};
check(JSON.stringify(caps.drop) === '["ALL"]', "agent: drops ALL capabilities");
const resources = JSON.stringify(ac.resources || {});
check(!resources.includes("nvidia.com/gpu"), "agent: requests no nvidia.com/gpu (measures idle nodes)");
check(ac.resources && ac.resources.limits && ac.resources.limits.memory, "agent: memory limit");
check((aspec.nodeSelector || {})["monta.io/agent"] === "true", "agent: nodes opt in with monta.io/agent=true");
if (variant === "gpu") {
  check(JSON.stringify(caps.add) === '["IPC_LOCK"]', "gpu agent: adds IPC_LOCK only");
  check((aspec.nodeSelector || {})["nvidia.com/gpu.present"] === "true", "gpu agent: GPU nodes only");
  check((aspec.tolerations || []).some((t) => t.key === "nvidia.com/gpu" && t.operator === "Exists"),
    "gpu agent: tolerates nvidia.com/gpu");
  check(env.NVIDIA_VISIBLE_DEVICES && env.NVIDIA_VISIBLE_DEVICES.value === "all", "gpu agent: sees all GPUs");
} else {
  check(caps.add === undefined, `${variant} agent: adds no capability`);
  check(aspec.securityContext.runAsNonRoot === true && ac.securityContext.runAsUser === undefined,
    `${variant} agent: non-root`);
}

// --- monitoring ---------------------------------------------------------------------------
const sm = one("ServiceMonitor", "monta-planner");
check(matches(sm.spec.selector.matchLabels, svc.metadata.labels), "ServiceMonitor selects the planner Service");
check((sm.spec.endpoints || []).some((e) => e.port === "metrics"), "ServiceMonitor scrapes the metrics port");
check(sm.spec.jobLabel && svc.metadata.labels[sm.spec.jobLabel] === "monta-planner",
  'ServiceMonitor job label becomes "monta-planner" (MontaPlannerDown)');
const pm = one("PodMonitor", "monta-agent");
check(matches(pm.spec.selector.matchLabels, agent.spec.template.metadata.labels), "PodMonitor selects the agent pods");
check((pm.spec.podMetricsEndpoints || []).some((e) => e.port === "metrics"), "PodMonitor scrapes the agent metrics port");
const rule = one("PrometheusRule", "monta");
check(((rule.spec || {}).groups || []).length > 0, "PrometheusRule has groups");

if (failures.length) {
  for (const f of failures) console.error("FAIL " + f);
  console.error(`${variant}: ${failures.length} of ${checks} checks failed`);
  process.exit(1);
}
console.log(`${variant}: ${checks} policy checks ok (${objs.length} objects)`);
