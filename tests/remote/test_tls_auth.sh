#!/bin/sh
# TLS and authentication of remote stages (SPEC §15): a nats-server that
# requires TLS with client certificates (a CA, server and client
# certificates made here with openssl) and a user and password; a stage
# declared with tls = { ca, cert, key }, user and password round-trips an
# envelope; a wrong password, no client certificate, or no TLS are refused
# at declaration with an error naming the cause; a server with a token
# takes the stage with token = and refuses a wrong one.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null 2>&1 ||
    { echo "SKIP test_tls_auth: openssl is not installed"; exit 0; }
C="$D/certs"
mkdir -p "$C"
mk() {   # mk NAME CN [SAN]: a key and a certificate signed by the CA
    openssl req -newkey rsa:2048 -nodes -keyout "$C/$1.key" -out "$C/$1.csr" \
        -subj "/CN=$2" 2>/dev/null &&
    { if [ -n "${3:-}" ]; then printf 'subjectAltName=%s\n' "$3"; else :; fi; } \
        >"$C/$1.ext" &&
    openssl x509 -req -in "$C/$1.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" \
        -CAcreateserial -out "$C/$1.pem" -days 2 -extfile "$C/$1.ext" 2>/dev/null
}
check "openssl makes a CA, a server and a client certificate" sh -c "
    openssl req -x509 -newkey rsa:2048 -nodes -keyout '$C/ca.key' \
        -out '$C/ca.pem' -days 2 -subj /CN=seda-test-ca 2>/dev/null" 
check "... the server's" mk server 127.0.0.1 "IP:127.0.0.1,DNS:localhost"
check "... the client's" mk client seda-client
cat >"$D/tls.conf" <<CONF
tls {
  cert_file: "$C/server.pem"
  key_file: "$C/server.key"
  ca_file: "$C/ca.pem"
  verify: true
  timeout: 5
}
authorization { user: seda, password: "s3cret-pass" }
CONF
URL=$(NATSD_CONF="$D/tls.conf" sh "$REMOTE_DIR/natsd.sh" start "$D/nats") ||
    { echo "FAIL test_tls_auth: nats-server with TLS did not start"; exit 1; }
PIDS="$PIDS $(cat "$D/nats/pid")"
TLS="tls = { ca = '$C/ca.pem', cert = '$C/client.pem', key = '$C/client.key' }"
run() { "$SEDA" "$REMOTE_DIR/lua/auth_check.lua" "$URL" "$1" 2>&1; }
out=$(run "{ $TLS, user = 'seda', password = 's3cret-pass' }")
check "TLS with a client certificate and user/password: the envelope goes round ($out)" \
    [ "$out" = "ok hello+handled" ]
out=$(run "{ $TLS, user = 'seda', password = 'wrong' }")
check "a wrong password is refused at declaration, saying so ($out)" \
    contains "$out" "error stage 'secure': remote: cannot connect to $URL: Authentication Violation"
check "... and what to check" contains "$out" "the server refused the credentials"
out=$(run "{ tls = { ca = '$C/ca.pem' }, user = 'seda', password = 's3cret-pass' }")
check "no client certificate: refused ($out)" contains "$out" "needs tls.cert and tls.key"
out=$(run "{ user = 'seda', password = 's3cret-pass' }")
check "no TLS: refused ($out)" contains "$out" "TLS failed"
out=$(run "{ tls = { ca = '$D/none.pem' } }")
check "a CA file that is not there: named, with why ($out)" \
    contains "$out" "remote: tls.ca: cannot read '$D/none.pem': No such file or directory"
out=$(run "{ tls = { ca = '$C/ca.pem', cert = '$C/client.pem', key = '$D/none.key' } }")
check "... a key file too ($out)" contains "$out" "remote: tls.key: cannot read '$D/none.key'"
out=$(run "{ creds = '$D/none.creds' }")
check "... a creds file too ($out)" contains "$out" "remote: creds: cannot read '$D/none.creds'"
out=$(run "{ user = 'seda' }")
check "user without password: misuse, named ($out)" contains "$out" "user and password go together"
sh "$REMOTE_DIR/natsd.sh" stop "$D/nats"

printf 'authorization { token: "t0ken-42" }\n' >"$D/token.conf"
URL=$(NATSD_CONF="$D/token.conf" sh "$REMOTE_DIR/natsd.sh" start "$D/nats2") ||
    { echo "FAIL test_tls_auth: nats-server with a token did not start"; exit 1; }
PIDS="$PIDS $(cat "$D/nats2/pid")"
out=$(run "{ token = 't0ken-42' }")
check "a token: the envelope goes round ($out)" [ "$out" = "ok hello+handled" ]
out=$(run "{ token = 'nope' }")
check "a wrong token is refused, saying so ($out)" \
    contains "$out" "the server refused the credentials"
sh "$REMOTE_DIR/natsd.sh" stop "$D/nats2"
[ "$FAILS" = 0 ] || { tail -20 "$D/nats/log"; }
finish
