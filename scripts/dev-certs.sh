#!/usr/bin/env bash
# Throwaway development PKI for Monta's gRPC mutual TLS, made with the openssl CLI:
#   scripts/dev-certs.sh DIR [--planner_san=SAN] NODE...
# writes into DIR (mode 0700):
#   ca.crt ca.key                    a CA valid for 7 days (never use it outside a dev box)
#   planner.crt planner.key          the planner's (SAN DNS:localhost,IP:127.0.0.1 or --planner_san)
#   agent-NODE.crt agent-NODE.key    each agent's (SAN URI spiffe://monta/node/NODE)
#   operator.crt operator.key        an operator's (SAN URI spiffe://monta/operator/dev): RunBenchmark
#   reader.crt reader.key            a reader's (SAN DNS:reader.monta.local): read-only
#   planner.flags agent-NODE.flags operator.flags reader.flags
#                                    --tls_* flags for each, to pass as --flagfile=FILE
# Existing files are kept (delete DIR to start over). See docs/ARCHITECTURE.md, "Who may call what".
set -euo pipefail

die() { echo "dev-certs.sh: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: scripts/dev-certs.sh DIR [--planner_san=SAN] NODE..."
DIR=$1
shift
PLANNER_SAN="DNS:localhost,IP:127.0.0.1"
NODES=()
for arg in "$@"; do
  case "$arg" in
    --planner_san=* | --planner-san=*) PLANNER_SAN=${arg#*=} ;;
    -*) die "unknown flag $arg" ;;
    *) NODES+=("$arg") ;;
  esac
done
command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
mkdir -p "$DIR"
chmod 0700 "$DIR"

if [[ ! -s "$DIR/ca.crt" ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$DIR/ca.key" -out "$DIR/ca.crt" -days 7 -subj "/CN=monta-dev-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# issue NAME SAN: NAME.crt/.key signed by the CA, and NAME.flags.
issue() {
  local name=$1 san=$2
  if [[ ! -s "$DIR/$name.crt" ]]; then
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -keyout "$DIR/$name.key" -out "$DIR/$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
      -CAcreateserial -out "$DIR/$name.crt" -days 7 -extfile <(printf '%s\n' \
        "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth") \
      2>/dev/null
    rm -f "$DIR/$name.csr"
  fi
  printf -- '--tls_ca_file=%s\n--tls_cert_file=%s\n--tls_key_file=%s\n' \
    "$DIR/ca.crt" "$DIR/$name.crt" "$DIR/$name.key" >"$DIR/$name.flags"
}

issue planner "$PLANNER_SAN"
issue operator "URI:spiffe://monta/operator/dev"
issue reader "DNS:reader.monta.local"
for node in "${NODES[@]}"; do issue "agent-$node" "URI:spiffe://monta/node/$node"; done
chmod 0600 "$DIR"/*.key
