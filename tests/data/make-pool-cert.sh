#!/bin/sh
# Mints the TEST-ONLY leaf pool.pem / pool.key, signed by the CA already in this folder
# (ca.pem, ca.key; see make-certs.sh): EKU serverAuth, SAN *.pool-alpha-test.co.uk,
# *.pool-bravo-test.co.uk, *.pool-charlie-test.co.uk — the made-up names of the shared CF
# domain list the tests serve (tests/cf_domain_list.rs): after decoding, every entry of that
# list ends in .co.uk (docs/protocol.md §4.3), so server.pem cannot carry them. ECDSA P-256,
# validity 2020-01-01 .. 2120-01-01 like the others. Run from any directory:
#   sh tests/data/make-pool-cert.sh
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out pool.key
cat >"$tmp/pool.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = shared CF domain pool (TEST-ONLY)
O = tg-ws-proxy test rig
[v3_leaf]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:*.pool-alpha-test.co.uk, DNS:*.pool-bravo-test.co.uk, DNS:*.pool-charlie-test.co.uk
CNF
touch "$tmp/index.txt"
printf '3000\n' >"$tmp/serial"
cat >"$tmp/ca.cnf" <<CNF
[ca]
default_ca = rig
[rig]
database = $tmp/index.txt
serial = $tmp/serial
new_certs_dir = $tmp
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
commonName = supplied
organizationName = optional
CNF
openssl req -new -key pool.key -config "$tmp/pool.cnf" -out "$tmp/pool.csr"
openssl ca -batch -config "$tmp/ca.cnf" -cert ca.pem -keyfile ca.key -extfile "$tmp/pool.cnf" \
    -extensions v3_leaf -startdate 20200101000000Z -enddate 21200101000000Z -notext \
    -in "$tmp/pool.csr" -out pool.pem
openssl verify -CAfile ca.pem pool.pem
