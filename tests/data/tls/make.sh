#!/usr/bin/env bash
# Generates the private CA, server and client certificates of the upstream TLS tests
# (src/upstream/tls.rs). Test material only: the keys are public. Valid for 100 years.
# Usage: tests/data/tls/make.sh (writes into this folder).
set -euo pipefail
cd "$(dirname "$0")"
days=36500
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days $days \
  -subj "/CN=Warden Test Private CA" -keyout ca.key -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
leaf() { # name, subject, extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$2" \
    -keyout "$1.key" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days $days \
    -out "$1.pem" -extfile <(printf '%s\n' "$3")
  rm "$1.csr"
}
leaf server "127.0.0.1" "subjectAltName=IP:127.0.0.1,DNS:localhost
basicConstraints=critical,CA:FALSE
extendedKeyUsage=serverAuth"
leaf client "warden-test-client" "basicConstraints=critical,CA:FALSE
extendedKeyUsage=clientAuth"
rm -f ca.srl ca.key
