#!/bin/sh
# Regenerates the TEST-ONLY certificate authority and the leaf certificates in this folder.
#
#   ca.pem / ca.key         self-signed v3 CA (basicConstraints CA:true, keyUsage keyCertSign)
#   server.pem / server.key leaf signed by the CA: EKU serverAuth, SAN *.web.telegram.org,
#                           localhost, 127.0.0.1, *.workers.dev, *.example.com
#   mask.pem / mask.key     leaf signed by the CA: EKU serverAuth, SAN mask.example.org only
#                           (the fake "real site" a fake-TLS proxy masks to, tests/common/masksite.rs)
#
# Keys are ECDSA P-256 (PKCS#8 PEM); validity 2020-01-01 .. 2120-01-01 (fixed dates, so a
# machine whose clock is behind the generating machine still accepts them). The private keys are published on
# purpose: nothing outside the test rig may ever trust ca.pem. Run from any directory:
#   sh tests/data/make-certs.sh        everything: a NEW CA, then both leaves
#   sh tests/data/make-certs.sh mask   only mask.pem / mask.key, signed by the CA already here
#                                      (keeps ca.pem, ca.key, server.pem, server.key as they are)
set -eu
MODE=${1:-all}

cd "$(dirname "$0")"
START=20200101000000Z
END=21200101000000Z
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "$MODE" = all ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key
elif [ "$MODE" != mask ]; then
    echo "usage: make-certs.sh [mask]" >&2
    exit 2
fi
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out mask.key

cat >"$tmp/ca.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = tg-ws-proxy TEST-ONLY CA
O = tg-ws-proxy test rig
[v3_ca]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF

cat >"$tmp/leaf.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = kws2.web.telegram.org (TEST-ONLY)
O = tg-ws-proxy test rig
[v3_leaf]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = @alt
[alt]
DNS.1 = *.web.telegram.org
DNS.2 = localhost
DNS.3 = *.workers.dev
DNS.4 = *.example.com
IP.1 = 127.0.0.1
CNF

cat >"$tmp/mask.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = mask.example.org (TEST-ONLY mask site)
O = tg-ws-proxy test rig
[v3_leaf]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:mask.example.org
CNF

# `openssl ca` (not `req -x509` / `x509 -req`) because only it takes explicit start dates on
# OpenSSL 3.0.
touch "$tmp/index.txt"
printf '1000\n' >"$tmp/serial"
cat >>"$tmp/ca.cnf" <<CNF
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

if [ "$MODE" = all ]; then
    openssl req -new -key ca.key -config "$tmp/ca.cnf" -out "$tmp/ca.csr"
    openssl ca -batch -selfsign -config "$tmp/ca.cnf" -keyfile ca.key -extfile "$tmp/ca.cnf" \
        -extensions v3_ca -startdate "$START" -enddate "$END" -notext \
        -in "$tmp/ca.csr" -out ca.pem
    openssl req -new -key server.key -config "$tmp/leaf.cnf" -out "$tmp/server.csr"
    openssl ca -batch -config "$tmp/ca.cnf" -cert ca.pem -keyfile ca.key -extfile "$tmp/leaf.cnf" \
        -extensions v3_leaf -startdate "$START" -enddate "$END" -notext \
        -in "$tmp/server.csr" -out server.pem
    openssl verify -CAfile ca.pem server.pem
else
    # A serial the CA has not used for server.pem (1000, the first of a fresh database).
    printf '2000\n' >"$tmp/serial"
fi
openssl req -new -key mask.key -config "$tmp/mask.cnf" -out "$tmp/mask.csr"
openssl ca -batch -config "$tmp/ca.cnf" -cert ca.pem -keyfile ca.key -extfile "$tmp/mask.cnf" \
    -extensions v3_leaf -startdate "$START" -enddate "$END" -notext \
    -in "$tmp/mask.csr" -out mask.pem
openssl verify -CAfile ca.pem mask.pem
