#!/usr/bin/env bash
# Make a private CA and a serving certificate for the extender's HTTPS option (ExtenderConfiguration
# listen.tls; kube-scheduler side: enableHTTPS: true + tlsConfig.caData/caFile). Uses openssl only.
#
#   hack/gen-extender-certs.sh OUT_DIR [NAME...]
#
# NAME: a DNS name or an IPv4/IPv6 address the certificate must be valid for (subjectAltName).
# Default: the in-cluster names of the Service in manifests/ (hrl-extender.hrl-scheduler-system.svc,
# ...svc.cluster.local), localhost and 127.0.0.1. The first NAME is also the subject CN.
#
# Writes OUT_DIR/{ca.crt,ca.key,tls.crt,tls.key} (keys mode 0600; an existing CA in OUT_DIR is reused, so
# re-running renews the serving certificate without changing what the scheduler trusts). Then, for the
# second-scheduler-tls overlay:
#   kubectl -n hrl-scheduler-system create secret generic hrl-extender-tls \
#     --from-file=OUT_DIR/tls.crt --from-file=OUT_DIR/tls.key --from-file=OUT_DIR/ca.crt
# Environment: DAYS (validity of the serving certificate, default 365), CA_DAYS (default 3650).
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [NAME...]" >&2; exit 2; }
out=$1; shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(hrl-extender.hrl-scheduler-system.svc
                                  hrl-extender.hrl-scheduler-system.svc.cluster.local
                                  hrl-extender localhost 127.0.0.1)
command -v openssl >/dev/null || { echo "gen-extender-certs: openssl not found" >&2; exit 3; }
mkdir -p "$out"
umask 077

san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="${san:+,}IP:$n"; else san+="${san:+,}DNS:$n"; fi
done

if [ ! -s "$out/ca.crt" ] || [ ! -s "$out/ca.key" ]; then
  openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days "${CA_DAYS:-3650}" \
    -subj "/CN=hrl-extender-ca" -keyout "$out/ca.key" -out "$out/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

ext=$(mktemp); csr=$(mktemp)
trap 'rm -f "$ext" "$csr"' EXIT
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=serverAuth" "subjectAltName=$san" > "$ext"
openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/CN=${names[0]}" \
  -keyout "$out/tls.key" -out "$csr" 2>/dev/null
openssl x509 -req -in "$csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial -sha256 \
  -days "${DAYS:-365}" -extfile "$ext" -out "$out/tls.crt" 2>/dev/null
rm -f "$out/ca.srl"
chmod 0644 "$out/ca.crt" "$out/tls.crt"
echo "gen-extender-certs: wrote $out/{ca.crt,ca.key,tls.crt,tls.key} for $san" >&2
